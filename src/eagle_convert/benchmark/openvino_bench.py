"""`bench --engine openvino`: the same bench, prompts, report and gates as our runner, with OpenVINO GenAI decoding
and counting (engines/openvino_offline.py). The target is exported to IR by optimum-intel and the head written by
`convert --to openvino` (its layers in GenAI's count), both in a temporary folder; a head already in IR (a folder
with openvino_model.xml) is loaded as it is. A second, plain pipeline decodes the same ids for the baseline and the
lossless check. `--engine-arg target_ir=DIR` reuses a target exported before (the export takes a while).

`--engine-arg hidden_layers_list=genai-default` (or a JSON list, in GenAI's count) is an experiment: the draft IR's
rt_info replaced by GenAI's own default {2, N/2, N-3} (what it taps when the IR states nothing) or by that list, to
measure what an untranslated head costs (docs/benchmarks.md). The report names it; a head served so is wrong."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from ..conversion.converter import convert
from ..conversion.openvino_export import find_openvino_python
from ..engines.openvino_offline import PRECISIONS, OpenVinoOffline, export_target_ir, genai_totals
from ..errors import EngineError
from ..io.progress import announce
from ..layouts.openvino import IR_FILES, WEIGHT_FORMATS
from ..runner.trees.shapes import TreeShape
from ..settings.bench import DecodeSettings, EngineOptions
from ..settings.convert import ConvertSettings
from .bench_report import BenchReport
from .inputs import BenchInputs
from .loop import EngineRun, counters_block, run_baseline, run_conversations
from .session import check_lossless, open_session
from .settings import report_settings

ENGINE_ARGS = ("target_ir", "hidden_layers_list")
GENAI_DEFAULT = "genai-default"


def genai_default_taps(num_hidden_layers: int) -> list[int]:
    """GenAI 2026.4's taps for a draft IR without hidden_layers_list: {2, N/2, N-3}, in its count (layer outputs)."""
    return [2, num_hidden_layers // 2, num_hidden_layers - 3]


def _taps_override(extra: dict, target_config: dict) -> list[int] | None:
    value = extra.get("hidden_layers_list")
    if value is None:
        return None
    if value == GENAI_DEFAULT:
        return genai_default_taps(int(target_config["num_hidden_layers"]))
    if not (isinstance(value, list) and value and all(isinstance(i, int) and not isinstance(i, bool) for i in value)):
        raise EngineError(f"--engine-arg hidden_layers_list={value!r} is neither {GENAI_DEFAULT} nor a list of layer "
                          "ids.", f"Pass hidden_layers_list={GENAI_DEFAULT} or e.g. hidden_layers_list=[2,15,27].")
    return value


def bench_openvino(inputs: BenchInputs, decode: DecodeSettings, engine: EngineOptions, *, dtype: str, baseline: bool,
                   progress: bool, drop: tuple[str, ...], before_run: Callable[[], None], extra: dict) -> BenchReport:
    if engine.url is not None:
        raise EngineError("--engine openvino runs OpenVINO GenAI here; --engine-url is a vLLM server.",
                          "Leave out --engine-url, or bench the server with --engine vllm.")
    unknown = sorted(set(extra) - set(ENGINE_ARGS))
    if unknown or engine.tensor_parallel_size != 1:
        raise EngineError(f"--engine openvino takes no {', '.join(unknown) or '--tensor-parallel-size'}.",
                          "Its --engine-arg keys are target_ir=DIR (a target exported to IR before) and "
                          f"hidden_layers_list={GENAI_DEFAULT}|[...] (an experiment); it runs on one CPU.")
    retap = _taps_override(extra, inputs.target.checkpoint.config)
    python = find_openvino_python(engine.python, what="--engine openvino")
    before_run()
    dtype = "float32" if dtype == "auto" else dtype  # our runner's CPU default: an fp32 bench compares exactly
    session = open_session(inputs.target_name, decode.prompts, chat_template=decode.chat_template,
                           ignore_eos=decode.ignore_eos)
    request = dict(max_new_tokens=decode.max_new_tokens, temperature=decode.temperature, seed=decode.seed)
    with tempfile.TemporaryDirectory(prefix="eagle-convert-openvino-") as workdir:
        target_ir, draft_ir, conversion = _ir_inputs(inputs, Path(workdir), python, dtype, extra, drop, progress)
        precision = PRECISIONS[dtype]
        with OpenVinoOffline(python, target_ir, draft_ir, k=decode.k, precision=precision,
                             what="OpenVINO GenAI (speculative decoding)", hidden_layers_list=retap) as pipe:
            announce("starting OpenVINO GenAI (speculative decoding)", enabled=progress)
            info = pipe.start()
            run = run_conversations(session, pipe, TreeShape.chain(decode.k), progress=progress,
                                    what="bench (OpenVINO GenAI)", **request)
        baseline_info = {}
        if baseline:
            with OpenVinoOffline(python, target_ir, None, k=decode.k, precision=precision,
                                 what="OpenVINO GenAI (plain decoding, the baseline)") as plain:
                announce("starting OpenVINO GenAI (plain decoding, the baseline)", enabled=progress)
                baseline_info = plain.start()
                run_baseline(run, plain, eos=session.eos, progress=progress, **request)
    spec = inputs.head(inputs.target.checkpoint.config, drop).spec
    settings = report_settings(inputs.target_name, TreeShape.chain(decode.k), decode, device="cpu", dtype=dtype,
                               use_template=session.use_template, baseline=baseline, num_prompts=len(session.prompts),
                               draft_kind=spec.kind, aux_layer_ids=list(spec.aux_layer_ids or ()) or None)
    block = {"name": "openvino", "mode": "offline", "version": info["version"], "python": python, "tp": None,
             "device": "cpu", "dtype": dtype, "inference_precision": info["precision"],
             "speculative_config": {"num_assistant_tokens": decode.k}, "start_time_s": info["start_s"],
             "baseline_start_time_s": baseline_info.get("start_s"),
             "draft": {"given": inputs.draft_name, "served": None if conversion is None else "a temporary folder",
                       "layout": "openvino", "conversion": conversion},
             "target_ir": extra.get("target_ir") or "exported by optimum-intel in a temporary folder",
             "genai_counters": _genai_block(run),
             **({"hidden_layers_list_override": retap} if retap is not None else {})}
    report = BenchReport(settings=settings, prompts=run.prompts, engine={
        **block, "generation_time_s": run.generation_s, "counters": counters_block(run, decode.k)})
    check_lossless(report)
    return report


def _ir_inputs(inputs: BenchInputs, workdir: Path, python: str, dtype: str, extra: dict, drop, progress: bool):
    """(target IR, draft IR, what was done to the draft or None)."""
    weight_format = WEIGHT_FORMATS[dtype]
    if extra.get("target_ir"):
        target_ir = Path(extra["target_ir"])
        if not (target_ir / IR_FILES[0]).is_file():
            raise EngineError(f"--engine-arg target_ir={target_ir} holds no {IR_FILES[0]}.",
                              "Pass a folder `optimum-cli export openvino` wrote for the target, or leave it out.")
    else:
        announce("exporting the target to OpenVINO IR (optimum-intel)", enabled=progress)
        target_ir = export_target_ir(python, Path(inputs.target_name), workdir / "target-ir", weight_format)
    draft = Path(inputs.draft_name)
    if (draft / IR_FILES[0]).is_file():
        return target_ir, draft.resolve(), None
    announce("converting the head --to openvino", enabled=progress)
    convert(inputs.draft, inputs.target, workdir / "draft-openvino",
            ConvertSettings(to="openvino", dtype=dtype, drop=tuple(drop), engine_python=python), inputs.hub)
    return target_ir, workdir / "draft-openvino", (f"converted with `convert --to openvino --dtype {dtype}` in a "
                                                    "temporary folder")


def _genai_block(run: EngineRun) -> dict:
    """GenAI's own totals beside the per-round counters (engines/openvino_offline.py: they leave out one round)."""
    return {"overall": genai_totals([g for outs in run.generations for g in outs]),
            "prompts": [{"id": p.id, **genai_totals(outs)} for p, outs in zip(run.prompts, run.generations)]}
