"""Position and RoPE checks, from configs alone: the draft's position limit against the target's and a
`--max-model-len`, the draft's RoPE schedule against the target's as engines compute them (rope/schedule.py), the two
keys a schedule can be stated in, a sliding window, and the context the head was made for. `inspect` reports them;
`convert` and `bench` run them first and refuse a RoPE error (`refuse_rope_errors`).

Severities: an error is a RoPE difference that changes the draft's numbers against its target in a way no released
head does on purpose (a scaled schedule unlike the target's, a YaRN fallback, a type the engines refuse, two keys that
disagree); `--allow-rope-mismatch` keeps the draft's own schedule instead (a head trained with its own schedule). A
plain-RoPE draft beside a scaled or differently based target is a warning: the EAGLE reference trains a draft with
its config's RoPE and released heads state plain RoPE for llama3 targets, so config alone cannot tell that from a
converter that dropped the scaling (speculators PR#574); the warning names both readings. Limits and windows are
warnings that name what each engine does (ENGINE_PAST_LIMIT; docs/long-context.md has the code lines)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import RopeMismatchError
from ..layouts.base import SOURCE_LIMIT_KEY
from ..rope.schedule import READERS, Rope, engine_limit, engine_rope
from ..rope.types import type_conflict
from .texts import ENGINE_PAST_LIMIT, ENGINE_WINDOWS, TAU_PAST_TRAINING

ERROR, WARNING, INFO = "error", "warning", "info"
MROPE_KEYS = ("mrope_section", "mrope_interleaved")


@dataclass(frozen=True)
class PositionOptions:
    """What the checks are asked: the context the user will serve (None: the target's limit), and whether a RoPE
    error is allowed (the draft's own schedule kept)."""
    max_model_len: int | None = None
    allow_rope_mismatch: bool = False


@dataclass(frozen=True)
class Finding:
    name: str  # stable: tests and users match on it
    severity: str  # ERROR, WARNING or INFO
    message: str
    hint: str = ""
    engines: dict = field(default_factory=dict)  # engine -> what it does here

    def to_dict(self) -> dict:
        return {"name": self.name, "severity": self.severity, "message": self.message, "hint": self.hint,
                **({"engines": self.engines} if self.engines else {})}


@dataclass
class PositionReport:
    draft: dict
    target: dict | None  # None: inspected without --target
    options: PositionOptions
    findings: list[Finding]
    written: dict | None = None  # convert: the position and RoPE keys it wrote, and why

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == ERROR]

    def names(self) -> list[str]:
        return [f.name for f in self.findings]

    def to_dict(self) -> dict:
        return {"max_model_len": self.options.max_model_len,
                "allow_rope_mismatch": self.options.allow_rope_mismatch, "draft": self.draft,
                "target": self.target, "findings": [f.to_dict() for f in self.findings],
                **({"written": self.written} if self.written is not None else {})}


def text_view(config: dict) -> dict:
    """A multimodal config's text model, whose limit and RoPE are the ones a draft pairs with."""
    nested = config.get("text_config")
    return {**config, **nested} if isinstance(nested, dict) else dict(config)


def check_positions(draft_config: dict, target_config: dict | None,
                    options: PositionOptions = PositionOptions()) -> PositionReport:
    """Every position and RoPE finding for a draft (its flat config, layouts' `flat_config`) and its target (None:
    the draft's own findings and --max-model-len only)."""
    draft, target = text_view(draft_config), text_view(target_config or {})
    findings = form_findings(draft)
    if target_config is not None:
        findings += pair_findings(engine_rope(draft), engine_rope(target))
    if options.allow_rope_mismatch:
        findings = [allowed(f) for f in findings]
    findings += limit_findings(draft, target, options.max_model_len) + window_findings(draft)
    return PositionReport(describe(draft, with_source=True), describe(target) if target_config is not None else None,
                          options, findings)


def describe(config: dict, *, with_source: bool = False) -> dict:
    out = {"max_position_embeddings": config.get("max_position_embeddings"), "engine_limit": engine_limit(config),
           "rope": engine_rope(config).to_dict(),
           "rope_keys": [k for k in ("rope_theta", "rope_scaling", "rope_parameters") if config.get(k) is not None]}
    if with_source:
        out["source_max_position_embeddings"] = config.get(SOURCE_LIMIT_KEY)
        out["sliding_window"] = {k: config.get(k) for k in ("sliding_window", "use_sliding_window", "layer_types")
                                 if config.get(k) is not None} or None
    return out


def allowed(finding: Finding) -> Finding:
    if finding.severity != ERROR:
        return finding
    return Finding(finding.name, WARNING, f"{finding.message} Allowed by --allow-rope-mismatch: the draft's own "
                   "schedule is kept.", finding.hint, finding.engines)


def refuse_rope_errors(report: PositionReport) -> None:
    """Raise RopeMismatchError, one paragraph naming every RoPE error, when the report holds any."""
    if report.errors:
        raise RopeMismatchError(
            "The draft's RoPE would not compute the target's positions: "
            + " ".join(f"[{f.name}] {f.message}" for f in report.errors),
            "If the draft's config lost the target's schedule, copy the target's rope_theta and rope_scaling into "
            "it; if the head was trained with its own schedule, pass --allow-rope-mismatch to keep it. "
            "`eagle-convert inspect DRAFT --target TARGET` lists every position and RoPE finding.")


# ---- RoPE ---------------------------------------------------------------------------------------------------------

def form_findings(draft: dict) -> list[Finding]:
    """The draft's own RoPE keys: a type both engines refuse, and rope_scaling / rope_parameters that disagree."""
    out = []
    for key in ("rope_scaling", "rope_parameters"):
        conflict = type_conflict(draft.get(key))
        if conflict:
            out.append(Finding("rope_type_conflict", ERROR, f"The draft's {key} says rope_type {conflict[0]!r} and "
                               f"type {conflict[1]!r}: vLLM refuses to load it.",
                               "Keep one of the two keys, the one the head was trained with."))
    modern, legacy, first = (engine_rope(draft, reader) for reader in READERS)
    if modern == legacy == first:
        return out
    if not draft.get("rope_scaling"):
        out.append(Finding("rope_parameters_only", WARNING,
                           f"The draft states its RoPE in rope_parameters only ({_schedule(modern)}): a stack before "
                           f"transformers 5 reads rope_scaling and the top-level rope_theta and runs "
                           f"{_schedule(legacy)} (SpecForge PR#742).",
                           "convert writes rope_theta, rope_scaling and rope_parameters, so every stack reads one "
                           "schedule."))
    else:
        out.append(Finding("rope_forms_disagree", ERROR,
                           f"The draft's rope_scaling and rope_parameters disagree: transformers 5 (vLLM) runs "
                           f"{_schedule(modern)}, a stack before it {_schedule(legacy)}, SGLang on such a stack "
                           f"{_schedule(first)} (it reads rope_parameters first).",
                           "Keep the schedule the head was trained with in both keys."))
    return out


def pair_findings(draft: Rope, target: Rope) -> list[Finding]:
    """The draft's schedule against the target's, compared as engines compute them (defaults filled)."""
    out = mrope_findings(draft, target)
    draft_params, target_params = _without_mrope(draft.params), _without_mrope(target.params)
    if not draft.scaled:
        if target.scaled:
            out.append(Finding("rope_scaling_dropped", WARNING,
                               f"The draft states plain RoPE (theta {draft.theta:g}), the target "
                               f"{_schedule(target)}: engines run the draft as its config says. Right if the head "
                               "was trained plain (EAGLE reference releases for Llama 3.1 are); wrong if a converter "
                               "dropped its rope_scaling (speculators PR#574).",
                               "If the head was trained with the target's scaling, copy the target's rope_scaling "
                               "into the draft's config.json" + ("." if draft.theta == target.theta else
                                                                  f", and its rope_theta ({target.theta:g}; the draft "
                                                                  f"states {draft.theta:g}, 10000 when absent).")))
        elif draft.theta != target.theta:
            out.append(Finding("rope_theta_mismatch", WARNING,
                               f"The draft's rope_theta is {draft.theta:g}, the target's {target.theta:g}: engines "
                               "run the draft with its own base.",
                               "If the draft's config lacks the rope_theta it was trained with (10000 is assumed "
                               "then), add it."))
        return out
    if not target.scaled:
        out.append(Finding("rope_scaling_added", ERROR, f"The draft states {_schedule(draft)}, the target plain "
                           f"RoPE (theta {target.theta:g}).", "Remove the draft's rope_scaling unless it was "
                           "trained with it."))
    elif draft.type != target.type:
        name = "yarn_fallback" if target.type == "yarn" else "rope_type_mismatch"
        out.append(Finding(name, ERROR, f"The draft runs {_schedule(draft)}, the target {_schedule(target)}"
                           + (" (a YaRN schedule replaced by another, as NeMo PR#2399 fixed)." if name ==
                              "yarn_fallback" else "."), "Copy the target's rope_scaling into the draft's config."))
    else:
        if draft.theta != target.theta:
            out.append(Finding("rope_theta_mismatch", ERROR, f"The draft's {draft.type} schedule has rope_theta "
                               f"{draft.theta:g}, the target's {target.theta:g}.",
                               "Copy the target's rope_theta into the draft's config."))
        differ = {k: (draft_params.get(k), target_params.get(k)) for k in sorted(set(draft_params) | set(
            target_params)) if draft_params.get(k) != target_params.get(k)}
        if differ:
            out.append(Finding("rope_scaling_mismatch", ERROR, f"The draft's {draft.type} parameters differ from "
                               "the target's (draft vs target, defaults filled as engines fill them): "
                               + ", ".join(f"{k} {a!r} vs {b!r}" for k, (a, b) in differ.items()) + ".",
                               "Copy the target's rope_scaling into the draft's config."))
    return out


def mrope_findings(draft: Rope, target: Rope) -> list[Finding]:
    section, wanted = draft.params.get("mrope_section"), target.params.get("mrope_section")
    if wanted is None and section is None:
        return []
    engines = {"sglang": "SGLang's EAGLE-3 Llama draft treats a rope_scaling with mrope_section as plain RoPE fed "
                         "the target's multimodal positions (models/llama_eagle3.py:132-142, 234-235)",
               "vllm": "vLLM reads legacy type 'mrope' as default RoPE with its mrope_section "
                       "(transformers_utils/config.py:596-602)"}
    if wanted is not None and section is None:
        return [Finding("mrope_section_missing", WARNING, f"The target uses multimodal RoPE (mrope_section "
                        f"{wanted}), the draft states none: with image or video inputs its positions differ from "
                        "the target's; text-only prompts are unaffected.", "Copy the target's mrope_section into "
                        "the draft's rope_scaling if the head was trained with it.", engines)]
    if section != wanted:
        return [Finding("mrope_mismatch", ERROR, f"The draft's mrope_section is {section}, the target's {wanted}.",
                        "Copy the target's mrope_section into the draft's config.", engines)]
    return [Finding("mrope", INFO, f"Multimodal RoPE (mrope_section {section}) on both sides.", "", engines)]


def _without_mrope(params: dict) -> dict:
    return {k: v for k, v in params.items() if k not in MROPE_KEYS}


def _schedule(rope: Rope) -> str:
    if not rope.scaled:
        return f"plain RoPE (theta {rope.theta:g})"
    shown = ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}"
                      for k, v in _without_mrope(rope.params).items() if v is not None and k != "partial_rotary_factor")
    return f"{rope.type} RoPE (theta {rope.theta:g}; {shown})"


# ---- limits and windows -------------------------------------------------------------------------------------------

def limit_findings(draft: dict, target: dict, max_model_len: int | None) -> list[Finding]:
    draft_limit, target_limit = engine_limit(draft), engine_limit(target)
    out = []
    if draft_limit and target_limit and draft_limit < target_limit:
        out.append(Finding("draft_limit_below_target", WARNING,
                           f"The draft's position limit is {draft_limit}, the target's {target_limit}.",
                           "convert raises the draft's limit to the target's (as vLLM's V2 runner does on load), "
                           "so no engine stops drafting or refuses to start; acceptance still falls past the "
                           "context the head was trained on.", dict(ENGINE_PAST_LIMIT)))
    if max_model_len and draft_limit and draft_limit < max_model_len:
        out.append(Finding("draft_limit_below_max_model_len", WARNING,
                           f"--max-model-len {max_model_len} is past the draft's position limit {draft_limit}.",
                           "Convert the head (convert raises its limit to the target's) or serve a shorter "
                           "--max-model-len.", dict(ENGINE_PAST_LIMIT)))
    if max_model_len and target_limit and target_limit < max_model_len:
        out.append(Finding("target_limit_below_max_model_len", WARNING,
                           f"--max-model-len {max_model_len} is past the target's own limit {target_limit}.",
                           "Serve at most the target's limit.", {
                               "vllm": "refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (config/model.py:2639-2666)",
                               "sglang": "refuses it unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 "
                                         "(configs/model_config.py:1296-1316)"}))
    trained = _trained_limit(draft)
    served = max_model_len or target_limit
    if trained and served and trained < served:
        where = ("recorded by convert before it raised the limit" if draft.get(SOURCE_LIMIT_KEY) is not None
                 else "the draft's own max_position_embeddings")
        out.append(Finding("short_training_context", WARNING,
                           f"The head was made for {trained} positions ({where}), and {served} will be served: "
                           f"{TAU_PAST_TRAINING.format(limit=trained)}",
                           f"Bench at the context you serve to see the curve; a head trained on sequences of "
                           f"{served} tokens, or a sliding-window draft, holds acceptance further."))
    return out


def _trained_limit(draft: dict) -> int | None:
    """The context the head was made for, by config evidence: the limit convert recorded before raising it, else
    the draft's own max_position_embeddings (EAGLE trainers write their --max-length there, EAGLE#311); scaled as
    engines scale the limit (linear, dynamic)."""
    source = draft.get(SOURCE_LIMIT_KEY)
    values = [engine_limit(draft), engine_limit({**draft, "max_position_embeddings": source}) if source else None]
    return min((v for v in values if v), default=None)


def window_findings(draft: dict) -> list[Finding]:
    window, kinds = draft.get("sliding_window"), draft.get("layer_types") or []
    sliding = [i for i, kind in enumerate(kinds) if kind == "sliding_attention"]
    use = draft.get("use_sliding_window")
    if not window or use is False or (kinds and not sliding):
        return []
    how = (f"layer_types marks layer(s) {sliding} sliding" if sliding
           else "use_sliding_window is true" if use else "sliding_window is set without layer_types")
    engines = dict(ENGINE_WINDOWS)
    if not sliding:
        engines["vllm"] = ("vLLM's Llama draft windows only the layers layer_types marks (models/llama.py:185-204): "
                           "this draft runs unwindowed")
    return [Finding("sliding_window", WARNING, f"The draft has a {window}-token sliding window ({how}).",
                    "Serve it where the window is honoured, and bench it at long context: a window trades acceptance "
                    "at 2k for acceptance past 16k (speculators PR#684).", engines)]
