"""`bench --engine vllm` and `bench --engine-url URL`: the same bench, prompts, report and gates as our runner, with
the deploying engine doing the decoding and counting.

Offline (`engine_url=None`): vLLM's `LLM` in its own interpreter (vllm_offline.py), the draft converted first when
vLLM cannot load its layout (prepare.py), then a second, plain engine for the baseline. Server: an OpenAI-compatible
vLLM server that already serves the target with its head (vllm_server.py); it has no plain twin, so no baseline."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..engines.prepare import prepare_opened
from ..engines.vllm_needs import cpu_needs
from ..engines.vllm_offline import VllmOffline, find_python, llm_args
from ..engines.vllm_server import ServerEngine
from ..errors import EngineError, LayoutError
from ..io.progress import announce
from ..runner.draft_gate import draft_position_limit
from ..runner.trees.shapes import TreeShape
from ..settings.bench import DecodeSettings, EngineOptions
from ..settings.common import HubOptions
from ..targets import family_for
from .bench_report import BenchReport
from .inputs import BenchInputs
from .loop import EngineRun, counters_block, run_baseline, run_conversations
from .openvino_bench import bench_openvino
from .session import Session, check_lossless, open_session
from .settings import report_settings

DEFAULT_MAX_MODEL_LEN = 4096  # capped by the target's max_position_embeddings; --engine-arg max_model_len=N


def parse_engine_args(pairs) -> dict:
    """KEY=VALUE pairs for `LLM(...)`: VALUE as JSON when it parses (numbers, true, {...}), else as a string."""
    args = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise EngineError(f"--engine-arg {pair!r} is not KEY=VALUE.",
                              "Pass one LLM(...) argument per --engine-arg, e.g. --engine-arg max_model_len=2048.")
        try:
            args[key.strip()] = json.loads(value)
        except ValueError:
            args[key.strip()] = value
    reserved = {"speculative_config", "model", "tensor_parallel_size"} & set(args)
    if reserved:
        raise EngineError(f"--engine-arg {', '.join(sorted(reserved))} is set by bench itself.",
                          "The speculative config comes from the head (as `convert` prints it), the model is --target "
                          "and the parallelism --tensor-parallel-size.")
    return args


def _max_model_len(config: dict) -> int:
    """The target's positions (the top-level config's, else its text model's), capped at DEFAULT_MAX_MODEL_LEN."""
    family = family_for(config)
    text = family.sizes_config(config) if family else config
    return min(DEFAULT_MAX_MODEL_LEN, config.get("max_position_embeddings") or text.get("max_position_embeddings")
               or DEFAULT_MAX_MODEL_LEN)


def bench_engine(target: str, draft: str | None, decode: DecodeSettings, engine: EngineOptions,
                 hub: HubOptions = HubOptions(), *, dtype: str = "auto", baseline: bool = True, progress: bool = False,
                 drop: tuple[str, ...] = (), before_run: Callable[[], None] = lambda: None,
                 inputs: BenchInputs | None = None) -> BenchReport:
    """The engine's report, gates not applied (entry.py applies them, as for ours). `before_run`: called once the
    engine's own usual problems are ruled out, before any work (entry.py: checks the stored report's settings).
    `inputs`: the run's checkpoints, when the caller opened them already (each is opened once per run)."""
    inputs = inputs or BenchInputs(target, draft, hub)
    if not Path(target).is_dir():
        raise LayoutError(f"The bench target {target!r} is not a local folder.",
                          "bench encodes the prompts with the target's own tokenizer and chat template: download it "
                          "first (e.g. `hf download ORG/NAME --local-dir DIR`) and pass the folder.")
    if engine.name == "llamacpp":
        return bench_llamacpp_engine(inputs, decode, engine, dtype=dtype, baseline=baseline, progress=progress,
                                     before_run=before_run)
    extra = parse_engine_args(engine.args)
    if engine.name == "openvino":  # its own interpreter, IR inputs and counters (openvino_bench.py)
        return bench_openvino(inputs, decode, engine, dtype=dtype, baseline=baseline, progress=progress,
                              drop=tuple(drop), before_run=before_run, extra=extra)
    python = find_python(engine.python) if engine.url is None else None  # before any other work: the usual problem
    before_run()
    session = open_session(target, decode.prompts, chat_template=decode.chat_template, ignore_eos=decode.ignore_eos)
    if engine.url is not None:
        return bench_server(inputs, session, decode, engine, dtype=dtype, progress=progress)
    report = _bench_offline(inputs, session, decode, python=python, tp=engine.tensor_parallel_size, extra=extra,
                            dtype=dtype, baseline=baseline, progress=progress, drop=drop,
                            concurrency=engine.concurrency)
    check_lossless(report)
    return report


def bench_llamacpp_engine(inputs: BenchInputs, decode: DecodeSettings, engine: EngineOptions, *, dtype: str,
                          baseline: bool, progress: bool, before_run: Callable[[], None]) -> BenchReport:
    """--engine llamacpp (llamacpp_bench.py): its tools found first (the usual problem), then the same report."""
    from ..engines.llamacpp import LlamaCppTools
    from .llamacpp_bench import bench_llamacpp, check_supported

    check_supported(decode)
    tools = LlamaCppTools.find(engine.bin)
    before_run()
    session = open_session(inputs.target_name, decode.prompts, chat_template=decode.chat_template,
                           ignore_eos=decode.ignore_eos)
    run, settings, block = bench_llamacpp(
        inputs, session, decode, tools, dtype=dtype, baseline=baseline, progress=progress,
        settings_of=lambda info, kind, aux: _settings(inputs.target_name, session, decode, info, baseline=baseline,
                                                      draft_kind=kind, aux_layer_ids=aux))
    report = _report(run, settings, block)
    check_lossless(report)
    return report


def _settings(target: str, session: Session, decode: DecodeSettings, info: dict, *, baseline: bool, draft_kind: str,
              aux_layer_ids, concurrency: int = 1) -> dict:
    return report_settings(target, TreeShape.chain(decode.k), decode, device=info.get("device"),
                           dtype=info.get("dtype"), use_template=session.use_template, baseline=baseline,
                           num_prompts=len(session.prompts), draft_kind=draft_kind,
                           aux_layer_ids=list(aux_layer_ids) if aux_layer_ids else None, concurrency=concurrency)


def _bench_offline(inputs: BenchInputs, session: Session, decode: DecodeSettings, *, python: str, tp: int,
                   extra: dict, dtype: str, baseline: bool, progress: bool, drop, concurrency: int = 1) -> BenchReport:
    request = dict(max_new_tokens=decode.max_new_tokens, temperature=decode.temperature, seed=decode.seed,
                   concurrency=concurrency)
    shape = TreeShape.chain(decode.k)
    target, draft = inputs.target_name, inputs.draft_name
    with tempfile.TemporaryDirectory(prefix="eagle-convert-engine-draft-") as workdir:
        config = inputs.target.checkpoint.config
        prepared = prepare_opened(inputs.draft, inputs.target, Path(workdir), drop=tuple(drop),
                                  revision=inputs.hub.revision, token=inputs.hub.token, offline=inputs.hub.offline)
        common = llm_args(target, dtype=dtype, max_model_len=_max_model_len(config), seed=decode.seed,
                          tensor_parallel_size=tp, extra=extra, concurrency=concurrency)
        spec_kwargs = {**common, "speculative_config": prepared.speculative_config(decode.k)}
        if concurrency > 1:  # each request's own counters and rounds, not only the engine-wide sums (vllm_batch.py)
            spec_kwargs.setdefault("per_request_spec_decode_metrics", "detailed")
        on_cpu = cpu_needs(config).for_worker(config)  # the target family's needs on vLLM's CPU build
        with VllmOffline(python, spec_kwargs, what="vLLM (speculative decoding)", on_cpu=on_cpu) as engine:
            announce("starting vLLM (speculative decoding)", enabled=progress)
            info = engine.start()
            if info.get("speculative_config") is None:
                raise EngineError("vLLM started without speculative decoding.",
                                  "Check the --engine-arg values: none may turn speculation off.")
            run = run_conversations(session, engine, shape, progress=progress, what="bench (vLLM)", **request)
        baseline_info = {}
        if baseline:
            with VllmOffline(python, common, what="vLLM (plain decoding, the baseline)", on_cpu=on_cpu) as plain:
                announce("starting vLLM (plain decoding, the baseline)", enabled=progress)
                baseline_info = plain.start()
                run_baseline(run, plain, eos=session.eos, progress=progress, **request)
    settings = _settings(target, session, decode, info, baseline=baseline, draft_kind=prepared.head.spec.kind,
                         aux_layer_ids=prepared.head.spec.aux_layer_ids, concurrency=concurrency)
    block = {"name": "vllm", "mode": "offline", "version": info["version"], "python": python, "tp": info["tp"],
             "device": info["device"], "dtype": info["dtype"], "speculative_config": spec_kwargs["speculative_config"],
             "engine_speculative_config": info["speculative_config"],
             "llm_args": {key: value for key, value in common.items() if key != "model"},
             "start_time_s": info["start_s"], "baseline_start_time_s": baseline_info.get("start_s"),
             "draft": {"given": draft, "served": prepared.path, "layout": prepared.layout_name,
                       "conversion": prepared.conversion},
             **_load(run, concurrency, engine, info.get("drafter_max_model_len"))}
    return _report(run, settings, block)


def bench_server(inputs: BenchInputs, session: Session, decode: DecodeSettings, engine: EngineOptions, *,
                 dtype: str, progress: bool = False) -> BenchReport:
    server = ServerEngine(engine.url, strict=engine.strict, warn=engine.warn)
    info = server.open(decode.k)
    # the draft's kind, for the report: read from the checkpoints the position checks opened
    head = inputs.head(inputs.target.checkpoint.config) if inputs.draft_name else None
    kind = head.spec.kind if head is not None else "served"
    if head is not None:  # the drafting-disabled rounds need the draft's limit, which a server does not expose
        config = {"max_position_embeddings": head.spec.max_position_embeddings, **head.spec.extra}
        server.draft_limit = draft_position_limit(config, info.get("max_model_len"))
        server.draft_limit_known = True
    run = run_conversations(session, server, TreeShape.chain(decode.k), max_new_tokens=decode.max_new_tokens,
                            temperature=decode.temperature, seed=decode.seed, progress=progress,
                            what="bench (vLLM server)", concurrency=engine.concurrency)
    # A server does not say which dtype it runs: --dtype declares it (so --compare can gate fp32 greedy).
    declared = None if dtype == "auto" else dtype
    block = {"name": "vllm", "mode": "server", "url": server.url, "version": info["version"], "model": info["model"],
             "tp": None, "device": "server", "dtype": declared,
             "speculative_config": {"num_speculative_tokens": info["k"]}, "start_time_s": None,
             "other_traffic": server.other_traffic,
             "note": "a server has no plain-decoding twin here: no baseline, speedup or lossless check",
             **_load(run, engine.concurrency, server, getattr(server, "draft_limit", None))}
    settings = _settings(inputs.target_name, session, decode, block, baseline=False, draft_kind=kind,
                         aux_layer_ids=None, concurrency=engine.concurrency)
    report = _report(run, settings, block)
    report.engine["dtype_source"] = None if dtype == "auto" else "declared by --dtype"
    return report


def _load(run: EngineRun, concurrency: int, engine, limit: int | None) -> dict:
    """The engine block's `concurrency` entry: the load, whose counters the report holds, and the share of verify
    rounds that vLLM's batch-wide position rule ran with drafting disabled (engines/vllm_batch.py; None: not
    measured, e.g. per-group counters). Nothing at --concurrency 1 (one request: docs/long-context.md's rule)."""
    if concurrency == 1:
        return {}
    scope = engine.counters_scope  # set by its generate_group (vllm_batch.PER_REQUEST or PER_GROUP)
    counts = [item.drafting_disabled_rounds for item in run.prompts]
    disabled = None if any(n is None for n in counts) else sum(counts)
    drafts = sum(item.stats.drafts for item in run.prompts)
    return {"concurrency": {"requests": concurrency, "counters": scope, "draft_position_limit": limit,
                            "drafting_disabled_rounds": disabled,
                            "drafting_disabled_share": None if disabled is None or not drafts else disabled / drafts}}


def _report(run: EngineRun, settings: dict, engine_block: dict) -> BenchReport:
    engine_block = {**engine_block, "generation_time_s": run.generation_s,
                    "counters": counters_block(run, settings["k"])}
    return BenchReport(settings=settings, prompts=run.prompts, engine=engine_block)

