"""`inspect`: what a checkpoint is, what is wrong with it for serving, and which conversion fixes each problem."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..checkpoint.index import config_dtype
from ..checkpoint.open import open_input
from ..checkpoint.ranks.checkpoint import RankedCheckpoint
from ..draft.load import DraftHead, load_draft
from ..errors import EagleConvertError
from ..families import family_of, family_refusal
from ..io.safetensors import SAFETENSORS_CODES
from ..kinds import KINDS, HeadKind, kind_of
from ..layouts import LAYOUTS
from ..layouts.base import SOURCE_LIMIT_KEY
from ..mtp.folder import extracted_layout
from ..positions.checks import PositionOptions, check_positions, text_view
from ..rope.schedule import engine_limit
from ..taps.conventions import describe_taps, taps_line
from ..targets.target_info import TargetInfo, read_target
from ..vocab.check import check_map
from ..vocab.head import head_facts
from .gguf_output import gguf_head, gguf_output, tensors_of, vocabulary_problems
from .mtp import PROVENANCE, mtp_section
from .openvino_output import openvino_output, openvino_taps, openvino_tensors
from .target import describe_target, looks_like_target

HALF = {"float16", "bfloat16"}


@dataclass
class Problem:
    what: str
    fix: str

    def to_dict(self) -> dict:
        return {"problem": self.what, "fix": self.fix}


@dataclass
class InspectReport:
    path: str
    layout: str | None
    layout_reason: str | None
    kind: str | None
    config: dict
    tensors: list[dict]
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ranks: dict | None = None  # a target saved per rank: format, tp/pp, parts, padded vocab, the files read
    target: dict | None = None  # PATH is a target checkpoint: family, LM head / embedding, quantization, bench
    variant: str | None = None  # "EAGLE-3 (norm_before_fc)", "EAGLE 3.1 (...)", "EAGLE-1"
    flags: dict = field(default_factory=dict)  # EAGLE-3 flag -> {"value", "source"}: what was read, and from where
    positions: dict | None = None  # a draft's position and RoPE checks (positions.py; docs/long-context.md)
    vocab_map: list[dict] = field(default_factory=list)  # an EAGLE-3 head's d2t/t2d findings (vocab/check.py)
    mtp: dict | None = None  # PATH is an MTP draft folder: family, layers, how it is served, provenance (mtp.py)
    # The target layers feeding a head fed aux states, in every engine's convention, with where they came from and
    # `line`, the sentence the CLI prints (taps/conventions.py)
    taps: dict | None = None
    family: dict | None = None  # a late-2026 draft family it shows (families/): which, who loads it, converted or not

    def to_dict(self) -> dict:
        return {"path": self.path, "layout": self.layout, "layout_reason": self.layout_reason, "kind": self.kind,
                "variant": self.variant, "flags": self.flags,
                "config": self.config, "tensors": self.tensors, "problems": [p.to_dict() for p in self.problems],
                "notes": self.notes, "ranks": self.ranks, "target": self.target, "positions": self.positions,
                "vocab_map": self.vocab_map, "mtp": self.mtp, "taps": self.taps,
                "family": self.family}


def inspect(path: str, target: str | None = None, *, drop: tuple[str, ...] = (), revision: str | None = None,
            target_revision: str | None = None, token: str | None = None, offline: bool | None = None,
            target_pattern: str | None = None, max_model_len: int | None = None) -> InspectReport:
    provenance = gguf_output(path)  # a llama.cpp draft GGUF convert wrote: no config.json to read
    if provenance is not None:
        return _gguf_report(str(path), provenance)
    provenance = openvino_output(path)  # an OpenVINO IR convert wrote: no safetensors to read
    if provenance is not None:
        return _openvino_report(str(path), provenance)
    # PATH may itself be a target saved per rank; --target-pattern names the target's files, PATH's without --target.
    ref = open_input(path, revision=revision, token=token, offline=offline, role="draft", ranges=True, ranked=True,
                     pattern=None if target else target_pattern)
    ckpt = ref.checkpoint
    if isinstance(ckpt, RankedCheckpoint):
        return _ranked_report(path, ckpt, ref.notes)
    tensors = [{"name": r.name, "shape": list(r.shape), "dtype": SAFETENSORS_CODES[r.dtype], "file": r.file}
               for r in ckpt.refs().values()]
    target_info = None
    if target:
        target_info = read_target(open_input(target, revision=target_revision, token=token, offline=offline,
                                             role="target", pattern=target_pattern).checkpoint)
    report = InspectReport(path=str(path), layout=None, layout_reason=None, kind=None, config=ckpt.config,
                           tensors=tensors, notes=list(ref.notes))
    family = family_of(ckpt.config, ckpt.names())
    if family is not None:
        report.family = family.describe()
        if family.converts is None:  # named and refused before anything reads it as a look-alike
            refusal = family_refusal(family, str(path))
            report.problems.append(Problem(refusal.message, refusal.hint))
            return report
    kind = KINDS[kind_of(ckpt.config, frozenset(ckpt.names()))]
    # Before the target check: a head extracted from its target (MTP) alone in a folder has the target's config, but
    # no trunk; one still inside its target is the target's report.
    extracted = None if kind.from_draft_checkpoint else extracted_layout(ckpt.config, ckpt.names())
    if extracted:
        return _mtp_report(report, ckpt, kind, extracted, target_info)
    if target is None and looks_like_target(ckpt):
        return _target_report(report, ckpt)
    try:
        head = load_draft(ckpt, target_info.config if target_info else None, drop=drop)
    except EagleConvertError as exc:
        report.problems.append(Problem(exc.message, exc.hint))
        return report
    report.layout, report.layout_reason, report.kind = head.layout.name, head.layout_reason, head.spec.kind
    report.variant = head.spec.variant
    report.flags = variant_flags(head.spec)
    report.taps = _taps(head.spec, target_info)
    report.notes += list(head.notes)
    report.problems += _problems(head, target_info, PROVENANCE in ckpt.source.files())
    report.positions = check_positions(head.layout.flat_config(ckpt.config), target_info.config if target_info
                                       else None, PositionOptions(max_model_len)).to_dict()
    if head.spec.head_kind.vocab_map:
        _vocab_findings(report, head, target_info)
    return report


def _gguf_report(path: str, provenance: dict) -> InspectReport:
    layout = LAYOUTS[provenance["layout"]]
    file_name, kind = gguf_head(path)
    return InspectReport(path=path, layout=layout.name, kind=kind or layout.kinds[0], config={},
                         layout_reason=f"written by eagle-convert ({PROVENANCE}) as {layout.summary}",
                         tensors=tensors_of(provenance, file_name), notes=list(provenance.get("notes") or []),
                         problems=[Problem(*p) for p in vocabulary_problems(path, file_name, kind)])


def _openvino_report(path: str, provenance: dict) -> InspectReport:
    layout = LAYOUTS["openvino"]
    return InspectReport(path=path, layout=layout.name, kind=layout.kinds[0], config={},
                         layout_reason=f"written by eagle-convert ({PROVENANCE}) as {layout.summary}",
                         tensors=openvino_tensors(provenance), notes=list(provenance.get("notes") or []),
                         taps=openvino_taps(provenance))


def _vocab_findings(report: InspectReport, head: DraftHead, target: TargetInfo | None) -> None:
    """The vocab room's one check of the head's map (what `vocab-map check` reports): errors as problems, the rest
    as notes."""
    findings = check_map(head_facts(head.checkpoint, target.vocab_size if target else None))
    report.vocab_map = [f.as_dict() for f in findings]
    for f in findings:
        if f.error and f.name != "missing-d2t":  # a missing d2t is already a problem of its own above
            report.problems.append(Problem(f"Vocab map {f.name}: {f.message} ({f.engines}).",
                                           "eagle-convert vocab-map check HEAD lists every finding; rebuild or "
                                           "re-export the map the head was trained with."))
        elif not f.error:
            report.notes.append(f"vocab map {f.name}: {f.message} ({f.engines})")


def _mtp_report(report: InspectReport, ckpt, kind: HeadKind, layout: str, target: TargetInfo | None) -> InspectReport:
    section, problems, notes = mtp_section(ckpt, layout, report.path, target.config if target else None)
    report.layout, report.kind, report.mtp = f"mtp-{layout}", kind.name, section
    report.layout_reason = (f"{section.get('title') or 'MTP'} layer(s) alone, no trunk: "
                            + ("SGLang's NextN layout (architecture " + ", ".join(ckpt.config.get("architectures"))
                               + ", layer renumbered to 0)" if layout == "sglang" else
                               "the target's config, the layers under their original names"))
    report.problems += [Problem(what, fix) for what, fix in problems]
    report.notes += notes
    return report


def _target_report(report: InspectReport, ckpt) -> InspectReport:
    section, problems = describe_target(ckpt)
    report.layout, report.kind, report.target = "target checkpoint", "target", section
    report.layout_reason = f"family {section['family'] or 'unknown'}" + (
        f", LM head {section['lm_head']['name']}" if "lm_head" in section else "")
    report.problems += [Problem(what, fix) for what, fix in problems]
    return report


def variant_flags(spec) -> dict:
    """Each EAGLE-3 flag with its value and where it was read from (the tensors, the config, or a default)."""
    if not spec.head_kind.aux_states:  # only a kind fed aux states comes in variants
        return {}
    values = {"norm_before_fc": spec.norm_before_fc, "fc_norm": spec.fc_norm, "norm_output": spec.norm_output,
              "norm_before_residual": spec.norm_before_residual, "use_aux_hidden_state": spec.use_aux_hidden_state,
              "num_aux_states": spec.num_aux_states,  # absent ids are null, never [] (a stated empty list)
              "aux_layer_ids": None if spec.aux_layer_ids is None else list(spec.aux_layer_ids),
              "num_layers": spec.num_layers, "qk_norm": spec.qk_norm,
              "lm_head": "target" if spec.lm_head_from_target else "draft"}
    return {k: {"value": v, "source": spec.flag_sources.get(k, "")} for k, v in values.items()}


def _taps(spec, target: TargetInfo | None) -> dict | None:
    """The layers feeding the head as each engine and exporter counts them (None: a kind fed no aux states)."""
    if not spec.head_kind.aux_states and spec.aux_layer_ids is None:  # DFlash states its taps without aux flags
        return None
    taps = describe_taps(spec.aux_layer_ids, spec.aux_ids_origin, target.num_hidden_layers if target else None)
    return {**taps, "line": taps_line(taps)}


def _ranked_report(path: str, ckpt: RankedCheckpoint, notes: list[str]) -> InspectReport:
    """A target saved per rank: what convert will gather from it (the checks ran when it was opened)."""
    ranks = ckpt.describe()
    tensors = [{"name": r["name"], "shape": r["shape"], "dtype": SAFETENSORS_CODES[ckpt.ref(hf).dtype],
                "file": r["file"]} for hf, t in ranks["tensors"].items() for r in t["reads"]]
    unique = list({(t["file"], t["name"]): t for t in tensors}.values())
    return InspectReport(path=str(path), layout=f"per-rank target ({ranks['format']})",
                         layout_reason=ckpt.summary_line(), kind="target", config=ckpt.config, tensors=unique,
                         notes=list(notes), ranks=ranks)


def _problems(head: DraftHead, target: TargetInfo | None, converted: bool) -> list[Problem]:
    spec, cfg, names = head.spec, head.checkpoint.config, set(head.tensors)
    out: list[Problem] = []
    convert_hint = "eagle-convert convert DRAFT --target TARGET -o OUT --to LAYOUT"
    if (spec.head_kind.target_lm_head and "lm_head.weight" not in names
            and not _shares_target_lm_head(head.layout, spec)):
        out.append(Problem(f"No LM head: an {spec.head_kind.title} head uses its target's.", _lm_head_fix(head)))
    if "bias" in cfg:
        out.append(Problem(f"SafeAILab config key bias={cfg['bias']!r} (the fc bias flag): vLLM reads it as attention "
                           "bias and, when true, creates q/k/v/o biases that are never loaded.",
                           f"{convert_hint} removes it and states the fc bias the engine's way."))
    if spec.fc_bias and not _holds(head.layout, head, "fc.bias"):
        out.append(Problem("fc.bias present: vLLM V1 cannot express it (dropped silently).", _fc_bias_fix(head)))
    short = _short_limit(head, target, converted)
    if short:
        out.append(short)
    stored = {SAFETENSORS_CODES[r.dtype] for r in head.tensors.values() if r.dtype.is_floating_point}
    said = config_dtype(head.layout.flat_config(cfg))  # a wrapper layout (vllm-v0) has it in its inner config
    if "F32" in stored and str(said) in HALF:
        out.append(Problem(f"Stored in float32 though the config says {said}: twice the bytes.",
                           "convert --dtype auto writes the target's dtype."))
    if head.checkpoint.weight_format == "bin":
        out.append(Problem("Pickle (.bin) weights: engines prefer safetensors.", "convert writes safetensors only."))
    if spec.head_kind.vocab_map and "d2t" not in names and spec.draft_vocab_size < spec.vocab_size:
        out.append(Problem("No d2t: draft ids would be read as target ids.", "Use an export that includes d2t."))
    if spec.norm_before_residual:
        out.append(Problem("norm_before_residual: true (residual taken after hidden_norm): released EAGLE-3 heads take "
                           "it before, and SGLang 0.5.23 cannot express it.", "--to vllm or --to speculators write it "
                           "explicitly; `bench` runs it as vLLM would, so compare it with the released head "
                           "(`bench --reference-draft`)."))
    if target:
        feature = spec.target_hidden_size if spec.head_kind.aux_states else spec.hidden_size
        if feature != target.hidden_size:
            out.append(Problem(f"Hidden size mismatch: the head expects {feature}, "
                               f"the target has {target.hidden_size}.",
                               "Use the target this head was trained for."))
        if spec.vocab_size != target.vocab_size:
            out.append(Problem(f"Vocab mismatch: head {spec.vocab_size}, target {target.vocab_size}.",
                               "Use the target this head was trained for."))
    return out


def _short_limit(head: DraftHead, target: TargetInfo | None, converted: bool) -> Problem | None:
    """A draft limit below its target's: engines stop drafting (or refuse to start) past it. With --target that is
    the comparison itself (the limits as engines compute them, positions/checks.py); without, a limit of 2048 or less
    is suspect only in a folder convert did not write (convert raises it to the target's, recording the old one), and
    a target whose own limit is 2048 makes a 2048 draft right, not short."""
    config, limit = head.layout.flat_config(head.checkpoint.config), head.spec.max_position_embeddings
    fix = "convert raises it to the target's; RoPE stays the draft's."
    if target is not None:
        draft_limit, target_limit = engine_limit(text_view(config)), engine_limit(text_view(target.config))
        if not (draft_limit and target_limit and draft_limit < target_limit):
            return None
        return Problem(f"max_position_embeddings is {limit}, below the target's {target_limit}: drafting stops or "
                       "crashes past it.", fix)
    if converted or SOURCE_LIMIT_KEY in config or limit > 2048:
        return None
    return Problem(f"max_position_embeddings is {limit}, a trainer's default: drafting stops or crashes past it if "
                   "the target's limit is higher (--target compares them).", fix)


# What a layout keeps by design is asked of the layout itself (formats/), so that a correct output of each layout
# reports no problem, and a fix never names the layout the folder is already in.

def _holds(layout, head: DraftHead, role: str) -> bool:
    """`layout` writes this head, `role` included, as it is (vllm-v0 and sglang keep an EAGLE-1 fc bias)."""
    canonical = frozenset(head.tensors)
    return (layout.writable and layout.refusal(head.spec, canonical) is None
            and role in layout.output_names(head.spec, canonical).values())


def _shares_target_lm_head(layout, spec) -> bool:
    """The engine takes this head's LM head from the target by design (EAGLE-1 in vllm and sglang)."""
    return "lm_head.weight" in layout.dropped_reasons(spec)


def _other_layouts(head: DraftHead, keep) -> list[str]:
    """The output layouts, other than the folder's own, that write this head and satisfy `keep(layout)`."""
    canonical = frozenset(head.tensors)
    return [name for name, layout in LAYOUTS.items() if layout.writable and layout is not head.layout
            and layout.refusal(head.spec, canonical) is None and keep(layout)]


def _fc_bias_fix(head: DraftHead) -> str:
    keeping = _other_layouts(head, lambda layout: _holds(layout, head, "fc.bias"))
    # plan.py folds a foldable kind's fc bias (EAGLE-1) into the embedding for a layout without one (vLLM V1)
    folding = (_other_layouts(head, lambda layout: not _holds(layout, head, "fc.bias"))
               if head.spec.head_kind.fc_bias_foldable else [])
    ways = ([f"{_to(folding)} --fc-bias fold (exact)"] if folding else []) + \
        ([f"keep it with {_to(keeping)}"] if keeping else [])
    if not ways:
        return "No layout eagle-convert writes holds this head's fc bias; `eagle-convert layouts` lists them."
    return f"{', or '.join(ways)}."


def _lm_head_fix(head: DraftHead) -> str:
    sharing = _other_layouts(head, lambda layout: _shares_target_lm_head(layout, head.spec))
    splicing = _other_layouts(head, lambda layout: not _shares_target_lm_head(layout, head.spec))
    parts = ([f"{_to(splicing)} splices the target's in"] if splicing else []) + \
        ([f"with {_to(sharing)} the engine uses the target's by design"] if sharing else [])
    return f"eagle-convert convert DRAFT --target TARGET -o OUT {'; '.join(parts)}."


def _to(layouts: list[str]) -> str:
    return " / ".join(f"--to {name}" for name in layouts)
