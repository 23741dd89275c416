"""`bench --engine vllm` and `bench --engine-url URL`: the same bench, prompts, report and gates as our runner, with
the deploying engine doing the decoding and counting.

Offline (`engine_url=None`): vLLM's `LLM` in its own interpreter (vllm_offline.py), the draft converted first when
vLLM cannot load its layout (prepare.py), then a second, plain engine for the baseline. Server: an OpenAI-compatible
vLLM server that already serves the target with its head (vllm_server.py); it has no plain twin, so no baseline."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from ..errors import EngineError, LayoutError
from ..runner.bench import _check_lossless, _progress, open_session
from ..runner.bench_api import apply_report_gates, read_stored_report
from ..runner.report import BenchReport
from ..runner.tree_shapes import TreeShape
from .loop import build_report, run_baseline, run_speculative
from .prepare import prepare_draft
from .vllm_offline import VllmOffline, find_python, llm_args

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


def _settings(target: str, spec_kind: str, *, k, max_new_tokens, temperature, seed, info: dict, use_template: bool,
              baseline: bool, ignore_eos: bool, num_prompts: int, aux_layer_ids) -> dict:
    """The same keys as our runner's settings (runner/bench.py), so reports, gates and --reference-report compare."""
    return {"target": target, "k": k, "tree": TreeShape.chain(k).to_dict(), "max_new_tokens": max_new_tokens,
            "temperature": temperature, "seed": seed,
            "device": info.get("device"), "dtype": info.get("dtype"), "chat_template": use_template,
            "baseline": baseline, "ignore_eos": ignore_eos, "num_prompts": num_prompts, "draft_kind": spec_kind,
            "aux_layer_ids": list(aux_layer_ids) if aux_layer_ids else None}


def _max_model_len(target: str) -> int:
    config = json.loads((Path(target) / "config.json").read_text())
    text = config.get("text_config") or {}
    return min(DEFAULT_MAX_MODEL_LEN, config.get("max_position_embeddings") or text.get("max_position_embeddings")
               or DEFAULT_MAX_MODEL_LEN)


def bench_engine(target: str, draft: str | None, *, engine_url: str | None = None, engine_python: str | None = None,
                 tensor_parallel_size: int = 1, engine_args=(), k: int = 3, max_new_tokens: int = 256, prompts=None,
                 temperature: float = 0.0, seed: int = 0, dtype: str = "auto", chat_template: str = "auto",
                 baseline: bool = True, progress: bool = False, drop: tuple[str, ...] = (), revision: str | None = None,
                 token: str | None = None, offline: bool | None = None, ignore_eos: bool = False,
                 min_acceptance_length: float | None = None, reference_report=None, max_tau_drop: float | None = None,
                 strict: bool = False, warn=lambda message: None) -> BenchReport:
    if not Path(target).is_dir():
        raise LayoutError(f"The bench target {target!r} is not a local folder.",
                          "bench encodes the prompts with the target's own tokenizer and chat template: download it "
                          "first (e.g. `hf download ORG/NAME --local-dir DIR`) and pass the folder.")
    extra = parse_engine_args(engine_args)
    python = find_python(engine_python) if engine_url is None else None  # before any other work: the usual problem
    stored = read_stored_report(reference_report, max_tau_drop, {
        "k": k, "tree": TreeShape.chain(k).to_dict(), "max_new_tokens": max_new_tokens, "temperature": temperature,
        "seed": seed, "ignore_eos": ignore_eos})
    session = open_session(target, prompts, chat_template=chat_template, ignore_eos=ignore_eos)
    decode = dict(k=k, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
    if engine_url is not None:
        from .vllm_server import bench_server

        report = bench_server(engine_url, session, draft, strict=strict, warn=warn, progress=progress, **decode)
        # A server does not say which dtype it runs: --dtype declares it (so --compare can gate fp32 greedy).
        report.engine.update(device="server", dtype=None if dtype == "auto" else dtype,
                             dtype_source=None if dtype == "auto" else "declared by --dtype")
        report.settings = {**_settings(target, report.settings["draft_kind"], info=report.engine,
                                       use_template=session.use_template, baseline=False, ignore_eos=ignore_eos,
                                       num_prompts=len(session.prompts), aux_layer_ids=None, **decode)}
    else:
        report = _bench_offline(target, draft, session, python=python, tp=tensor_parallel_size,
                                extra=extra, dtype=dtype, baseline=baseline, progress=progress, drop=drop,
                                hub=dict(revision=revision, token=token, offline=offline), ignore_eos=ignore_eos,
                                **decode)
        _check_lossless(report)
    apply_report_gates(report, min_acceptance_length, stored, reference_report, max_tau_drop)
    return report


def _bench_offline(target: str, draft: str, session, *, python: str, tp: int, extra: dict, dtype: str, baseline: bool,
                   progress: bool, drop, hub: dict, ignore_eos: bool, k: int, max_new_tokens: int, temperature: float,
                   seed: int) -> BenchReport:
    decode = dict(max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
    with tempfile.TemporaryDirectory(prefix="eagle-convert-engine-draft-") as workdir:
        prepared = prepare_draft(draft, target, Path(workdir), drop=tuple(drop), **hub)
        common = llm_args(target, dtype=dtype, max_model_len=_max_model_len(target), seed=seed,
                          tensor_parallel_size=tp, extra=extra)
        spec_kwargs = {**common, "speculative_config": prepared.speculative_config(k)}
        with VllmOffline(python, spec_kwargs, what="vLLM (speculative decoding)") as engine:
            info = engine.start()
            if info.get("speculative_config") is None:
                raise EngineError("vLLM started without speculative decoding.",
                                  "Check the --engine-arg values: none may turn speculation off.")
            bar = _progress(list(session.prompts), enabled=progress)
            run = run_speculative(session, engine, k=k, on_prompt=getattr(bar, "update", lambda *a: None), **decode)
            if hasattr(bar, "close"):
                bar.close()
        baseline_info = {}
        if baseline:
            with VllmOffline(python, common, what="vLLM (plain decoding, the baseline)") as plain:
                baseline_info = plain.start()
                run_baseline(run, plain, eos=session.eos, **decode)
    settings = _settings(target, prepared.head.spec.kind, k=k, info=info, use_template=session.use_template,
                         baseline=baseline, ignore_eos=ignore_eos, num_prompts=len(session.prompts),
                         aux_layer_ids=prepared.head.spec.aux_layer_ids, **decode)
    block = {"name": "vllm", "mode": "offline", "version": info["version"], "python": python, "tp": info["tp"],
             "device": info["device"], "dtype": info["dtype"], "speculative_config": spec_kwargs["speculative_config"],
             "engine_speculative_config": info["speculative_config"],
             "llm_args": {key: value for key, value in common.items() if key != "model"},
             "start_time_s": info["start_s"], "baseline_start_time_s": baseline_info.get("start_s"),
             "draft": {"given": draft, "served": prepared.path, "layout": prepared.head.layout.name,
                       "conversion": prepared.conversion}}
    return build_report(run, settings, block)
