"""`convert`: resolve inputs -> read the draft -> plan -> validate (validate.py, tensor_checks.py) -> (dry run stops,
fetch.py says what a real run will fetch) -> stream out and verify (execute.py)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..checkpoint.open import InputRef, absolute_if_local, open_input
from ..draft.load import load_draft
from ..errors import OutputPathError, UnsupportedConversionError, option
from ..io.background import end_reads
from ..io.overlap import check_out_path
from ..io.staging import remove_stale_staging
from ..io.units import parse_size
from ..layouts import get_layout
from ..layouts.base import SOURCE_LIMIT_KEY
from ..layouts.registry import default_output_layout
from ..positions.checks import PositionOptions, check_positions, refuse_rope_errors
from ..settings.common import HubOptions
from ..settings.convert import ConvertSettings
from ..targets.target_info import read_target
from .derive import FoldReport
from .execute import execute_plan
from .fetch import fetch_plan
from .openvino_export import find_openvino_python
from .plan import Plan, build_plan
from .target_gguf import target_vocabulary
from .tensor_checks import EMBED_SAMPLE_ROWS, check_head_vocab_map, compare_embeddings, compares_embeddings
from .token_map_output import plan_token_map


@dataclass
class ConversionResult:
    plan: Plan
    draft: InputRef
    target: InputRef
    detected_layout: str
    detected_because: str
    out: Path | None  # None for a dry run
    files: list[str] = field(default_factory=list)
    provenance: dict | None = None
    fold: FoldReport | None = None
    embedding_check: dict | None = None
    fetch: dict | None = None  # repo inputs only: what was fetched to plan, and what converting will fetch
    lm_head_from: InputRef | None = None  # where the target's LM head and embedding were read, when not the target
    nonfinite: dict[str, int] = field(default_factory=dict)  # --allow-nonfinite: NaN/Inf written, per tensor
    notes: list[str] = field(default_factory=list)  # about the output folder (a killed run's staging folder removed)
    will_check: list[str] = field(default_factory=list)  # dry run: checks the real run makes on data not read yet
    positions: dict | None = None  # the position and RoPE checks (positions/checks.py) and what was written
    token_map: dict | None = None  # --token-map: its source, sha256, the file in OUT, hot ids, target vocab
    target_gguf: dict | None = None  # --target-gguf: the file, its size, and the sha256 of the vocabulary copied

    def inputs_record(self) -> dict:
        """The inputs as eagle_convert.json records them."""
        return {"draft": self.draft.to_dict(), "target": self.target.to_dict(),
                **({"lm_head_from": self.lm_head_from.to_dict()} if self.lm_head_from else {})}

    def to_dict(self) -> dict:
        return {
            "ok": True,
            "dry_run": self.out is None,
            "out": str(self.out) if self.out else None,
            "draft": self.draft.to_dict(),
            "target": self.target.to_dict(),
            **({"lm_head_from": self.lm_head_from.to_dict()} if self.lm_head_from else {}),
            "detected_layout": self.detected_layout,
            "detected_because": self.detected_because,
            "files": self.files,
            "fold": self.fold.to_dict() if self.fold else None,
            "embedding_check": self.embedding_check,
            "nonfinite": self.nonfinite,
            "fetch": self.fetch,
            "positions": self.positions,
            **({"token_map": self.token_map} if self.token_map else {}),
            **({"target_gguf": self.target_gguf} if self.target_gguf else {}),
            **({"will_check": self.will_check} if self.out is None else {}),
            **self.plan.to_dict(),
        }


def _one_conversion_of_reading_state(fn):
    """Read-ahead and pre-hashing state (io/readahead.py, io/digest.py) belongs to one conversion: cleared when it
    ends, however it ends (success, error, Ctrl-C), so that a long-lived process never trusts a range read ahead long
    ago; and every background thread it started is stopped and joined before it returns (io/background.py)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            end_reads()

    return wrapper


@_one_conversion_of_reading_state
def convert(draft: str | InputRef, target: str | InputRef, out: str | Path | None, settings: ConvertSettings,
            hub: HubOptions = HubOptions()) -> ConversionResult:
    """Convert the EAGLE head `draft` for `target` into the `settings.to` layout in `out` (None: the default for the
    head's kind, layouts.registry.DEFAULT_OUTPUT_LAYOUTS; docs/convert.md: every option;
    `max_model_len` and `allow_rope_mismatch`: the position and RoPE checks, docs/long-context.md). `token_map`: a
    hot-token map for an EAGLE-1 head --to sglang, checked, copied into OUT and named in the serve command
    (conversion/token_map_output.py). `hub`: how repo ids are read (the draft at `revision`, the target at
    `target_revision`). `draft` and `target` may be inputs the caller opened already (a bench converting the draft it
    is benching), each then read as it is, not opened again."""
    s, tensors = settings, settings.tensors
    to, dtype, dry_run, force, drop, token_map = s.to, s.dtype, s.dry_run, s.force, s.drop, s.token_map
    max_model_len, allow_rope_mismatch, progress = s.max_model_len, s.allow_rope_mismatch, s.progress
    revision, target_revision, token, offline = hub.revision, hub.target_revision, hub.token, hub.offline
    target_pattern, target_lm_head, target_embed = s.target_pattern, tensors.target_lm_head, tensors.target_embed
    lm_head_from = tensors.lm_head_from
    quiet = not progress
    # A dry run reads the draft's safetensors header by range too, so it fetches no tensor data.
    draft_in = _opened(draft, revision=revision, token=token, offline=offline, role="draft", quiet=quiet,
                       ranges=True if dry_run else None)
    target_in = _opened(target, revision=target_revision, token=token, offline=offline, role="target", quiet=quiet,
                        pattern=target_pattern)
    # --lm-head-from: the target's LM head and embedding from another checkpoint (an unquantized base).
    weights_in = open_input(lm_head_from, revision=None, token=token, offline=offline, role="target", quiet=quiet) \
        if lm_head_from else None
    if not dry_run:
        if out is None:
            raise OutputPathError("No output folder given.", f"Pass {option('out', cli='-o OUT', python='out=FOLDER')} "
                                  f"(or {option('dry_run')} to only print the plan).")
        check_out_path(Path(out), [draft_in, target_in] + ([weights_in] if weights_in else []), force)
    target_info = read_target(target_in.checkpoint, lm_head=target_lm_head, embed=target_embed,
                              lm_head_from=weights_in.checkpoint if weights_in else None)
    head = load_draft(draft_in.checkpoint, target_info.config, drop=tuple(drop))
    positions = check_positions(head.layout.flat_config(head.checkpoint.config), target_info.config,
                                PositionOptions(max_model_len, allow_rope_mismatch))
    refuse_rope_errors(positions)  # before anything is planned or written
    to = to or default_output_layout(head.spec.kind)  # said in the plan (`layout`), like a --to given
    hot = plan_token_map(token_map, head.spec, get_layout(to), target_info.config) if token_map else None
    vocabulary, vocabulary_record = target_vocabulary(s.target_gguf, get_layout(to), head.spec, target_info) \
        if s.target_gguf else (None, None)
    # Names written into configs and the serve command work from any folder: local paths absolute, repo ids as ids.
    out_label = str(Path(out).resolve()) if out else "OUT"
    plan = build_plan(head, target_info, to=to, dtype=dtype, fc_bias=s.fc_bias,
                      verifier=absolute_if_local(s.verifier) if s.verifier else None,
                      target_label=target_in.serve_name, out_label=out_label,
                      num_speculative_tokens=s.num_speculative_tokens,
                      token_map=f"{out_label}/{hot.file_name}" if hot else None, target_vocabulary=vocabulary)
    if vocabulary_record:  # recorded in eagle_convert.json as the other inputs are
        plan = replace(plan, record={**plan.record, "target_gguf": vocabulary_record})
    check_head_vocab_map(head)
    result = ConversionResult(plan, draft_in, target_in, head.layout.name, head.layout_reason, None,
                              lm_head_from=weights_in, token_map=hot.describe() if hot else None,
                              target_gguf=vocabulary_record)
    positions.written = written_positions(plan.config) if not plan.gguf_file else {
        **get_layout(to).flat_config(plan.config), "why": gguf_positions_said(plan.config)}
    # What still holds for the output (a limit convert raised, a key it mirrored, no longer): what the CLI warns of.
    after = check_positions(get_layout(to).flat_config(plan.config), target_info.config,
                            PositionOptions(max_model_len, allow_rope_mismatch))
    result.positions = {**positions.to_dict(), "output_findings": [f.to_dict() for f in after.findings]}
    rule = get_layout(to).embedding_rule(head.spec, frozenset(head.tensors))
    always = s.check_embedding or rule is not None
    if dry_run:
        result.fetch = fetch_plan(plan, {"draft": draft_in, "target": weights_in or target_in})
        if compares_embeddings(head, target_info, plan, always):  # the rows are read by the real run only
            result.will_check.append(rule.check if rule else
                                     f"the draft's embed_tokens against the target's on up to {EMBED_SAMPLE_ROWS} "
                                     "sampled rows (a difference is a warning)")
        return result
    result.embedding_check = compare_embeddings(head, target_info, plan, always=always)
    if rule and result.embedding_check and result.embedding_check["equal"] is False:
        check = result.embedding_check
        difference = check.get("message") or (f"max |diff| {check['max_abs_diff']:g} on {check['rows_compared']} "
                                              "sampled rows")
        raise UnsupportedConversionError(rule.refusal.format(difference=difference), rule.hint)
    # the OpenVINO interpreter is found before anything is written (the usual problem of --to openvino)
    ir_python = find_openvino_python(s.engine_python) if plan.ir_export else None
    result.notes += remove_stale_staging(Path(out))
    execute_plan(plan, {"draft": head.checkpoint, "target": target_info.checkpoint}, Path(out), force,
                 parse_size(s.max_shard_size), result, progress, s.allow_nonfinite, token_map=hot, ir_python=ir_python)
    return result


def _opened(name: str | InputRef, **options) -> InputRef:
    return name if isinstance(name, InputRef) else open_input(name, **options)


def gguf_positions_said(metadata: dict) -> str:
    """The GGUF keys that state the output's positions, named after the file's own architecture (eagle3, dflash)."""
    arch = metadata["general.architecture"][1]
    scaling = ("and the head's RoPE scaling as llama.cpp's converter writes it (llama3: the rope_freqs.weight tensor; "
               f"linear, YaRN: {arch}.rope.scaling.*)") if arch == "eagle3" else "(a head with RoPE scaling is refused)"
    return f"GGUF {arch}.context_length and {arch}.rope.freq_base {scaling}"


def written_positions(config: dict) -> dict:
    """The position and RoPE keys an output config states, wherever the layout nests its model config."""
    inner = config.get("model") or config.get("transformer_layer_config") or config
    keys = ("max_position_embeddings", SOURCE_LIMIT_KEY, "rope_theta", "rope_scaling", "rope_parameters")
    return {**{k: inner.get(k) for k in keys if k in inner},
            "why": "rope_scaling (read by stacks before transformers 5) and rope_parameters (transformers 5, vLLM "
                   "0.32, SGLang 0.5.23) state one schedule, so every engine runs the same RoPE"}
