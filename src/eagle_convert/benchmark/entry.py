"""`eagle_convert.bench`: resolve the draft through the format layer (any layout convert reads or writes), bench it
on the target with our runner or an engine (and `compare` the two), and apply the gates asked for (gates.py): the
whole report, as `--json` prints it."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..checkpoint.ranks.checkpoint import RankedCheckpoint
from ..draft.load import tensor_reader
from ..errors import IncomparableReportError, LayoutError, UnsupportedConversionError
from ..io.text import TextEncodingError, read_text
from ..kinds import check_takes_token_map
from ..positions.checks import PositionOptions
from ..runner.trees.shapes import TreeOptions, TreeShape, resolve_tree
from ..settings.bench import BenchSettings, ContextSettings, DecodeSettings, EngineOptions, GateOptions
from ..settings.common import HubOptions
from ..targets.target_info import read_target
from ..vocab.token_map import read_token_map
from . import gates as gate_checks
from .bench_report import SCHEMA_VERSION, BenchReport
from .compare import compare_gate
from .inputs import BenchInputs
from .llamacpp_bench import given_gguf, llamacpp_compare_gate
from .position_checks import bench_max_model_len, check_before_bench

DEFAULT_MAX_TAU_DROP = 0.05


def bench(target: str, draft: str | None = None, settings: BenchSettings | None = None,
          hub: HubOptions | None = None, **keywords) -> BenchReport:
    """Bench DRAFT on TARGET: the one entry point of `eagle-convert bench` (which passes `settings` and `hub`) and
    of `eagle_convert.bench` (whose callers spell the settings as keywords: bench_settings says them). With
    `settings.context`, long documents per context length (context_bench.run_context)."""
    if settings is None:
        settings, hub = bench_settings(**keywords)
    elif keywords:
        raise TypeError(f"bench() takes settings or keywords, not both (got {', '.join(sorted(keywords))})")
    hub = hub or HubOptions()
    if settings.context is not None:
        from .context_bench import run_context

        return run_context(target, draft, settings, hub)
    return run(target, draft, settings, hub)


def bench_settings(*, k: int = 3, max_new_tokens: int = 256, prompts=None, temperature: float = 0.0, seed: int = 0,
                   device: str = "auto", dtype: str = "auto", chat_template: str = "auto", baseline: bool = True,
                   progress: bool = False, drop: tuple[str, ...] = (), revision: str | None = None,
                   token: str | None = None, offline: bool | None = None, ignore_eos: bool = False,
                   min_acceptance_length: float | None = None, reference_draft: str | None = None,
                   reference_report: str | Path | None = None, max_tau_drop: float | None = None,
                   tree: TreeOptions | None = None, engine: str | EngineOptions | None = None,
                   compare: bool = False, max_model_len: int | None = None, allow_rope_mismatch: bool = False,
                   token_map: str | Path | None = None,
                   context: ContextSettings | None = None) -> tuple[BenchSettings, HubOptions]:
    """`eagle_convert.bench`'s keywords as settings. A raw EAGLE-1 release uses the target's LM head and embedding
    in memory, so raw and converted heads give the same numbers. The target must be a local folder.

    Gates (`report.gates`, `report.passed`): `min_acceptance_length` (τ floor); `reference_draft` (the head as
    released, benched in the same run: in fp32 greedy every round must be identical); `reference_report` (a stored
    `--json` report of the same settings: τ may drop by at most `max_tau_drop`, overall and per category).
    `tree`: draft trees (runner/trees/shapes.py) instead of k-token chains. `engine`: who decodes, "ours" (None) or
    "vllm" (offline), or EngineOptions (a server's url, vLLM's interpreter, arguments, ...); `compare`: our runner
    too, on the same prompts, gated against the engine (vLLM offline when no engine is given); with an engine,
    `reference_draft` is the head our runner benches (the head as released) and the engine DRAFT.
    `max_model_len`, `allow_rope_mismatch`: the position and RoPE checks run first (docs/long-context.md). `token_map`:
    a hot-token map file (SGLang's --speculative-token-map) restricting an EAGLE-1 head's LM head (our runner).
    `context`: `bench --context-lengths` (long documents cut to each length, `prompts` unused; report.context per
    bucket). `revision`, `token`, `offline`: how a draft repo id is read from the Hub."""
    if isinstance(engine, str):
        if engine not in ("ours", "vllm", "llamacpp", "openvino"):
            raise ValueError(f"engine must be 'ours', 'vllm', 'llamacpp', 'openvino' or EngineOptions, got {engine!r}")
        engine = None if engine == "ours" else EngineOptions(name=engine)
    decode = DecodeSettings(k=k, tree=tree, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
                            ignore_eos=ignore_eos, chat_template=chat_template, prompts=prompts, token_map=token_map)
    gates = GateOptions(min_acceptance_length, reference_draft, reference_report, max_tau_drop)
    return BenchSettings(decode, gates, engine, compare, device, dtype, baseline, progress, tuple(drop), max_model_len,
                         allow_rope_mismatch, context), HubOptions(revision, token, offline)


def run(target: str, draft: str | None, settings: BenchSettings, hub: HubOptions = HubOptions(), *,
        inputs: BenchInputs | None = None) -> BenchReport:
    """The whole bench report: our runner, or `settings.engine` (and with `compare` ours beside it), the gates
    applied; the position and RoPE checks first (a RoPE error is refused before any model loads). `inputs`: the
    checkpoints the caller already opened (context_bench), else opened here."""
    decode, gates, engine, compare = settings.decode, settings.gates, settings.engine, settings.compare
    if not compare and engine is None:
        require_local_target(target)  # our runner's first refusal comes before the checks read the target
    lengths = settings.context.lengths if settings.context else ()
    positions = PositionOptions(bench_max_model_len(settings.max_model_len, lengths, decode.max_new_tokens),
                                settings.allow_rope_mismatch)
    inputs = inputs or BenchInputs(target, draft, hub)  # each checkpoint opened once for the whole run
    # a .gguf head for llama.cpp is served as given: no HF config to check (llamacpp_bench.py)
    checked = None if given_gguf(draft) else check_before_bench(inputs, positions)
    how = dict(device=settings.device, dtype=settings.dtype, baseline=settings.baseline, progress=settings.progress,
               drop=settings.drop)
    if compare or engine is not None:
        if decode.token_map is not None:
            raise UnsupportedConversionError(
                "--token-map restricts the head's LM head in our runner; vLLM has no hot-token map (FR-Spec), so an "
                "engine bench would run the full head.",
                "Bench the map with our runner (without --engine / --engine-url / --compare).")
        report = _bench_with_engine(inputs, decode, gates, engine or EngineOptions(), compare=compare, **how)
    else:
        report = _bench_ours(inputs, decode, gates, **how)
    report.positions = checked.to_dict() if checked else None
    return report


def _bench_ours(inputs: BenchInputs, decode: DecodeSettings, gates: GateOptions, *, device: str, dtype: str,
                baseline: bool, progress: bool, drop) -> BenchReport:
    from ..runner.heads import head_module_class
    from .our_bench import bench_target  # torch model code loads only when our runner benches

    target = inputs.target_name
    require_local_target(target)
    stored = read_stored_report(gates.reference_report, gates.max_tau_drop)
    target_ckpt = inputs.target.checkpoint
    if isinstance(target_ckpt, RankedCheckpoint):
        raise LayoutError(f"The bench target {target} is saved per tensor-parallel rank "
                          f"({target_ckpt.summary_line()}).",
                          "bench runs the whole target: pass the Hugging Face checkpoint it was saved from (convert "
                          "accepts the per-rank folder; bench needs every layer, unsharded).")
    target_info = read_target(target_ckpt)

    def head_of(draft: BenchInputs):
        head = draft.head(target_info.config, drop)  # text sizes
        head_module_class(head.spec).check_runs(head.spec, draft.draft_name)  # before the target loads
        return head

    head = head_of(inputs)
    hot_token_ids = None
    if decode.token_map is not None:  # refused before the target loads: a wrong map costs no bench
        check_takes_token_map(head.spec.head_kind)
        hot_token_ids = read_token_map(decode.token_map, head.spec.vocab_size).ids_tensor()
    shape = resolve_tree(decode.tree or TreeOptions(), k=decode.k, draft_kind=head.spec.kind,
                         target_config=target_ckpt.config)
    if shape.mode != "chain":
        head_module_class(head.spec).check_tree(inputs.draft_name)
    if shape.mode != "chain" and gates.reference_draft is not None:
        raise IncomparableReportError(
            "--reference-draft compares the two heads round by round on chains; it does not take a tree.",
            "Run the reference gate with --tree chain (a conversion that drafts every chain alike drafts every tree "
            "alike), and bench the tree separately.")
    if stored is not None:  # what can be compared before the run is, so that a mismatch costs no bench
        gate_checks.check_settings(SCHEMA_VERSION, decode.comparable(shape), stored, str(gates.reference_report))
    reference, inexact = None, None
    if gates.reference_draft is not None:
        ref_head = head_of(inputs.with_draft(gates.reference_draft))
        inexact = why_not_exact(head, ref_head, target_info)
        # The released head rounded as the converted head stores it: a correct cast then changes nothing.
        reference = (ref_head.spec, rounded_like(tensor_reader(ref_head), head.tensors))
    report = bench_target(target_ckpt, (head.spec, tensor_reader(head)), decode, shape, device=device, dtype=dtype,
                          baseline=baseline, progress=progress, reference=reference, target_path=target,
                          hot_token_ids=hot_token_ids)
    same_run = [gate_checks.reference_draft(report, report.reference, gates.reference_draft, inexact=inexact)
                ] if gates.reference_draft is not None else []
    apply_report_gates(report, gates, stored, same_run=same_run)
    return report


def require_local_target(target: str) -> None:
    if not Path(target).is_dir():
        raise LayoutError(f"The bench target {target!r} is not a local folder.",
                          "bench runs the whole target: download it first "
                          "(e.g. `hf download ORG/NAME --local-dir DIR`) and pass the folder.")


def _bench_with_engine(inputs: BenchInputs, decode: DecodeSettings, gates: GateOptions, engine: EngineOptions, *,
                       compare: bool, device: str, dtype: str, baseline: bool, progress: bool, drop) -> BenchReport:
    """The engine's report; with `compare`, our runner first (quick, and our own errors surface before an engine
    starts) on the same prompts, without a baseline, and the engine_compare gate after the others."""
    from .engine_bench import bench_engine

    if (decode.tree or TreeOptions()).tree != "chain":
        raise ValueError("an engine bench drafts chains: bench the tree with our runner alone")
    ours = None
    if compare and given_gguf(inputs.draft_name) and gates.reference_draft is None:
        raise LayoutError(f"--compare runs {inputs.draft_name} in our runner too, which reads Hugging Face heads, "
                          "not GGUF files.", "Name the head the GGUF was converted from: --reference-draft RAW (our "
                          "runner benches RAW, llama.cpp the GGUF).")
    if compare:  # --reference-draft RAW: ours runs the head as released, the engine the conversion (who is at fault?)
        ours = _bench_ours(inputs.with_draft(gates.reference_draft or inputs.draft_name), decode, GateOptions(),
                           device=device, dtype=dtype, baseline=False, progress=progress, drop=drop)
    stored = []  # read once the engine's usual problems are ruled out: a mismatch then costs no engine start

    def check_stored():
        stored.append(read_stored_report(gates.reference_report, gates.max_tau_drop,
                                         decode.comparable(TreeShape.chain(decode.k))))

    report = bench_engine(inputs.target_name, inputs.draft_name, decode, engine, inputs.hub, dtype=dtype,
                          baseline=baseline, progress=progress, drop=drop, before_run=check_stored, inputs=inputs)
    apply_report_gates(report, gates, stored[0])
    if ours is not None:
        ours_data = ours.to_dict()
        gate_of = llamacpp_compare_gate if engine.name == "llamacpp" else compare_gate
        gate, rows = gate_of(ours_data, report.to_dict(), engine.label)
        report.gates.append(gate)
        report.compare = {"ours": {"settings": ours_data["settings"], "overall": ours_data["overall"]}, "rows": rows}
    return report


def read_stored_report(reference_report, max_tau_drop, settings: dict | None = None) -> dict | None:
    """The stored --reference-report; with `settings`, checked against this run's before the run (a mismatch then
    costs no bench). Without, the caller checks once it knows them (a tree's shape depends on the head)."""
    if max_tau_drop is not None and reference_report is None:
        raise IncomparableReportError("--max-tau-drop was given without --reference-report.",
                                      "Pass the stored report to compare with: --reference-report FILE.")
    if reference_report is None:
        return None
    stored = _read_report(reference_report)
    if settings is not None:
        gate_checks.check_settings(SCHEMA_VERSION, settings, stored, str(reference_report))
    return stored


def apply_report_gates(report: BenchReport, gates: GateOptions, stored: dict | None, same_run=()) -> None:
    """The gates any bench report gets, whichever engine produced it (`same_run`: gates computed by the caller
    from the same run, listed after the τ floor)."""
    report.min_acceptance_length = gates.min_acceptance_length
    if gates.min_acceptance_length is not None:
        report.gates.append(gate_checks.min_acceptance_length(report, gates.min_acceptance_length))
    report.gates.extend(same_run)
    if stored is not None:
        drop_allowed = DEFAULT_MAX_TAU_DROP if gates.max_tau_drop is None else gates.max_tau_drop
        report.gates.append(gate_checks.reference_report(report.to_dict(), stored, str(gates.reference_report),
                                                         drop_allowed))


def rounded_like(reader, stored: dict):
    """`reader`'s tensors, each rounded to the float dtype the converted head stores under that name when that is
    narrower (a release in float32 converted to bfloat16): the rounding a correct conversion does, and no more."""
    def get(name: str):
        value = reader(name)
        ref = stored.get(name)
        if ref is not None and value.is_floating_point() and ref.dtype.is_floating_point and (
                ref.dtype.itemsize < value.element_size()):
            return value.to(ref.dtype)
        return value

    return get


def why_not_exact(head, reference, target) -> str | None:
    """Why a round-by-round comparison cannot hold even for a correct conversion, or None. Rounding the reference
    like the head (rounded_like) covers casts of the head's own tensors; not a target tensor spliced in narrower
    than the target stores it (the reference uses the target's own), nor a fc bias folded into a half-precision
    embedding (E + W^-1 b rounded once, against E and b rounded apart)."""
    for name, ref in head.tensors.items():
        if name in reference.tensors or not ref.dtype.is_floating_point:
            continue
        source = {"lm_head.weight": target.lm_head, "embed_tokens.weight": target.embedding}.get(name)
        if source is None:
            continue
        stored = source().dtype
        if (name == "embed_tokens.weight" and reference.spec.fc_bias and not head.spec.fc_bias
                and ref.dtype != torch.float32):
            return (f"its fc bias was folded into a {str(ref.dtype).removeprefix('torch.')} embedding, which rounds "
                    "differently from the released embedding and bias")
        if ref.dtype.itemsize < stored.itemsize:
            return (f"its {name} (spliced from the target) is stored in {str(ref.dtype).removeprefix('torch.')}, "
                    f"narrower than the target's {str(stored).removeprefix('torch.')}")
    return None


def _read_report(path: str | Path) -> dict:
    try:  # NaN / Infinity would make every τ comparison false, so a damaged reference would pass its gate
        return json.loads(read_text(path), parse_constant=_not_a_number, parse_float=_finite_float)
    except TextEncodingError:
        raise
    except (OSError, ValueError, RecursionError) as error:  # RecursionError: JSON nested past Python's limit
        raise IncomparableReportError(f"Cannot read the stored report {path}: {error}.",
                                      "Pass a report written by `eagle-convert bench --json` (or --report).") from error


def _not_a_number(word: str) -> float:
    raise ValueError(f"it holds {word}, which no bench report writes")


def _finite_float(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"it holds {text}, a number past float range")
    return value
