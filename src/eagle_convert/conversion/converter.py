"""`convert`: resolve inputs -> read the draft -> plan -> validate -> (dry run stops) -> stream out -> verify."""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .. import __version__
from ..checkpoint.index import Checkpoint
from ..checkpoint.open import InputRef, absolute_if_local, open_input
from ..checkpoint.ranks.gather import gather
from ..checkpoint.ranks.shards import Gathered
from ..checkpoint.read import read_rows, read_tensor
from ..draft.load import DraftHead, load_draft
from ..errors import OutputPathError, UnsupportedConversionError
from ..io.digest import PREHASH, Digest
from ..io.overlap import find_overlap
from ..io.safetensors import tensor_bytes
from ..io.units import parse_size
from ..io.write import (
    STAGING_OWNER,
    OutTensor,
    remove_stale_staging,
    shard,
    shard_names,
    staged_output,
    write_json,
    write_safetensors,
)
from ..layouts import get_layout
from ..targets.quant import dequantize_fp8
from ..targets.read import TargetInfo, read_target
from . import finite
from .derive import FoldReport, fold_fc_bias, sampled_rows
from .modelcard import model_card
from .plan import DEQUANT, FOLD, GATHER, ZEROS, Plan, PlannedTensor, build_plan
from .prefetch import end_reads
from .validate import check_vocab_map

EMBED_SAMPLE_ROWS = 64  # rows compared between a draft's embedding copy and the target's (reads ~64 rows, not V)


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
            **({"will_check": self.will_check} if self.out is None else {}),
            **self.plan.to_dict(),
        }


def check_out_path(out: Path, inputs: list[InputRef], force: bool) -> None:
    """Refuse an output folder that would touch an input: by where the input files really are (symlinks followed,
    a repo's cache folders), since --force replaces the whole output folder."""
    out = out.resolve()
    overlap = find_overlap(out, [(ref.label, ref.checkpoint.source) for ref in inputs])
    if overlap is not None:
        raise OutputPathError(f"The output folder {out} overlaps the input {overlap.input_label}: "
                              f"{overlap.file} lives in {overlap.folder}, so writing the output (or replacing it "
                              "with --force) would modify the input.",
                              "Pick another -o folder, outside every input and its real files; inputs are never "
                              "modified.")
    if out.exists() and not force:
        raise OutputPathError(f"{out} already exists.", "Pass --force to replace it, or choose another -o folder.")


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
def convert(draft: str, target: str, out: str | Path | None = None, *, to: str = "vllm-v0", dtype: str = "auto",
            dry_run: bool = False, force: bool = False, drop: tuple[str, ...] = (), max_shard_size: str | int = "5GB",
            fc_bias: str = "error", verifier: str | None = None, num_speculative_tokens: int = 3,
            revision: str | None = None, target_revision: str | None = None, token: str | None = None,
            offline: bool | None = None, progress: bool = False, check_embedding: bool = False,
            target_pattern: str | None = None, target_lm_head: str | None = None, target_embed: str | None = None,
            lm_head_from: str | None = None, allow_nonfinite: bool = False) -> ConversionResult:
    """Convert the EAGLE head `draft` for `target` into the `to` layout in `out` (docs/convert.md: every option)."""
    quiet = not progress
    # A dry run reads the draft's safetensors header by range too, so it fetches no tensor data.
    draft_in = open_input(draft, revision=revision, token=token, offline=offline, role="draft", quiet=quiet,
                          ranges=True if dry_run else None)
    target_in = open_input(target, revision=target_revision, token=token, offline=offline, role="target", quiet=quiet,
                           pattern=target_pattern)
    # --lm-head-from: the target's LM head and embedding from another checkpoint (an unquantized base).
    weights_in = open_input(lm_head_from, revision=None, token=token, offline=offline, role="target", quiet=quiet) \
        if lm_head_from else None
    if not dry_run:
        if out is None:
            raise OutputPathError("No output folder given.", "Pass -o OUT (or --dry-run to only print the plan).")
        check_out_path(Path(out), [draft_in, target_in] + ([weights_in] if weights_in else []), force)
    target_info = read_target(target_in.checkpoint, lm_head=target_lm_head, embed=target_embed,
                              lm_head_from=weights_in.checkpoint if weights_in else None)
    head = load_draft(draft_in.checkpoint, target_info.config, drop=tuple(drop))
    # Names written into configs and the serve command work from any folder: local paths absolute, repo ids as ids.
    plan = build_plan(head, target_info, to=to, dtype=dtype, fc_bias=fc_bias,
                      verifier=absolute_if_local(verifier) if verifier else None, target_label=target_in.serve_name,
                      out_label=str(Path(out).resolve()) if out else "OUT",
                      num_speculative_tokens=num_speculative_tokens)
    _check_vocab_map(head)
    result = ConversionResult(plan, draft_in, target_in, head.layout.name, head.layout_reason, None,
                              lm_head_from=weights_in)
    rule = get_layout(to).embedding_rule(head.spec, frozenset(head.tensors))
    always = check_embedding or rule is not None
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
    result.notes += remove_stale_staging(Path(out))
    _execute(plan, head, target_info, Path(out), force, parse_size(max_shard_size), result, progress,
             allow_nonfinite)
    return result


def _check_vocab_map(head: DraftHead) -> None:
    d2t = head.tensors.get("d2t")
    t2d = head.tensors.get("t2d")
    ckpt = head.checkpoint
    check_vocab_map(read_tensor(ckpt, d2t) if d2t else None, read_tensor(ckpt, t2d) if t2d else None,
                    head.spec.vocab_size, ckpt.label)


def _target_files_read(plan: Plan) -> set[str]:
    return {leaf.file for t in plan.tensors for src in t.sources if src.origin == "target" for leaf in src.ref.leaves()}


def compares_embeddings(head: DraftHead, target: TargetInfo, plan: Plan, always: bool = False) -> bool:
    """Whether `compare_embeddings` will read and compare rows (what a dry run lists as "will check")."""
    if "embed_tokens.weight" not in head.tensors or not target.checkpoint.has(target.embed_name):
        return False
    if not always and target.checkpoint.file_of(target.embed_name) not in _target_files_read(plan):
        return False
    return not target.embedding_weight().quantized


def compare_embeddings(head: DraftHead, target: TargetInfo, plan: Plan, always: bool = False) -> dict | None:
    """When the draft carries its own embedding copy, spot-check it against the target's on evenly spaced rows.

    Only when the target file holding the embedding is read anyway (or `always`): opening another shard of a large
    target just for this check would cost what the conversion is designed to avoid."""
    ref = head.tensors.get("embed_tokens.weight")
    if ref is None or not target.checkpoint.has(target.embed_name):
        return None
    embed_file = target.checkpoint.file_of(target.embed_name)
    if not always and embed_file not in _target_files_read(plan):
        return {"rows_compared": 0, "max_abs_diff": None, "equal": None,
                "message": f"the draft's embed_tokens was not compared with the target's: it is in {embed_file}, which "
                           "the conversion does not otherwise read (pass --check-embedding to compare)"}
    stored = target.embedding_weight()
    if stored.quantized:  # codes, not values: the draft's copy cannot be compared row by row
        return None
    tref = stored.ref
    if tref.shape != ref.shape:
        return {"rows_compared": 0, "max_abs_diff": None, "equal": False,
                "message": f"draft embedding is {list(ref.shape)}, target's is {list(tref.shape)}"}
    rows = sampled_rows(ref.shape[0], EMBED_SAMPLE_ROWS)
    a = read_rows(head.checkpoint, ref, rows).to(torch.float32)
    b = read_rows(target.checkpoint, tref, rows).to(torch.float32)
    diff = float((a - b).abs().max()) if rows else 0.0
    return {"rows_compared": len(rows), "max_abs_diff": diff, "equal": diff == 0.0}


def fetch_plan(plan: Plan, inputs: dict[str, InputRef]) -> dict | None:
    """For repo-id inputs: bytes already fetched to build the plan, and exactly what converting will fetch (whole
    files for a draft, tensor byte ranges for a target), each marked cached or not. Local inputs fetch nothing."""
    from ..io.hub.ranges import is_cached
    from ..io.hub.repos import cached_file
    from ..io.hub.source import HubSource

    summary = {}
    for role, ref in inputs.items():
        source = ref.checkpoint.source
        if not isinstance(source, HubSource):
            continue
        refs = {(leaf.file, leaf.name): leaf for t in plan.tensors for src in t.sources if src.origin == role
                for leaf in src.ref.leaves()}
        items = []
        if role == "draft" or ref.checkpoint.weight_format == "bin":  # whole weight files
            for rel in sorted({file for file, _ in refs} | (set(ref.checkpoint.files) if role == "draft" else set())):
                cached = cached_file(source.ref, rel) is not None
                items.append({"file": rel, "what": "whole file", "bytes": source.size(rel), "cached": cached})
        else:
            for (rel, name), tref in sorted(refs.items()):
                cached = is_cached(source.ref, rel, tref.nbytes, key=name)
                items.append({"file": rel, "what": f"range of {name}", "bytes": tref.nbytes, "cached": cached})
        summary[role] = {"repo_id": ref.repo_id, "commit_sha": ref.commit_sha,
                         "fetched_to_plan": dict(source.fetched), "to_fetch": items,
                         "bytes_to_fetch": sum(i["bytes"] for i in items if not i["cached"])}
    return summary or None


def _execute(plan: Plan, head: DraftHead, target: TargetInfo, out: Path, force: bool, max_shard: int,
             result: ConversionResult, progress: bool, allow_nonfinite: bool = False) -> None:
    checkpoints = {"draft": head.checkpoint, "target": target.checkpoint}
    by_name = {t.name: t for t in plan.tensors}
    nonfinite: dict[str, int] = {}  # NaN/Inf values each tensor's sources held (finite.judge raises for the rest)
    provenance: dict[str, dict] = {}
    pending: list[dict] = []  # source entries whose sha256 is still being computed (on threads of their own)

    def settle() -> None:
        for src in pending:
            src["sha256"] = src["sha256"].hexdigest()
        pending.clear()

    def produce(o: OutTensor) -> torch.Tensor:
        # Hashing lags behind writing: a tensor's source digest may still run while the next tensors are written, so
        # both cores stay busy (the fp32 sources of a bf16 output take twice as long to hash as to write). This costs
        # no memory: what is hashed is file pages (a mapped file or cached range) or a pickle held anyway.
        planned = by_name[o.name]
        value, sources = _produce(planned, checkpoints, result)
        pending.extend(sources)
        provenance[o.name] = {"sources": sources, "how": _how(planned),
                              "dtype": str(planned.dtype).removeprefix("torch."), "shape": list(planned.shape)}
        return value

    def on_nonfinite(o: OutTensor, value: torch.Tensor, written: int) -> None:
        nonfinite[o.name] = finite.judge(by_name[o.name], value, written, checkpoints)

    for planned in plan.tensors:  # in the order they are written: the disk reads ahead of the CPU
        for origin, ref in planned.sources:
            source = checkpoints[origin].source
            for leaf in ref.leaves():
                source.warm(leaf.file, *((leaf.offset, leaf.nbytes) if leaf.offset is not None
                                         else (0, source.size(leaf.file))))
    wanted = [OutTensor(t.name, t.dtype, t.shape) for t in plan.tensors]
    shards = shard(wanted, max_shard)
    files = dict(zip(shard_names(len(shards)), shards))
    bar = _progress(len(wanted), progress)
    with staged_output(out, force) as staging:
        try:
            for rel, tensors in files.items():
                write_safetensors(staging / rel, tensors, lambda o: (bar.update(1), produce(o))[1],
                                  on_nonfinite=on_nonfinite)
            settle()
        finally:
            bar.close()  # also on error: tqdm's own monitor thread must not outlive the conversion
        result.nonfinite = {t.name: nonfinite[t.name] for t in plan.tensors if nonfinite.get(t.name)}
        if result.nonfinite and not allow_nonfinite:
            raise finite.refusal(result.nonfinite, by_name)  # inside staged_output: the staging folder is removed
        for name, count in result.nonfinite.items():
            provenance[name]["nonfinite"] = count
        if len(files) > 1:
            write_json(staging / "model.safetensors.index.json", {
                "metadata": {"total_size": sum(t.nbytes for t in wanted)},
                "weight_map": {t.name: rel for rel, ts in files.items() for t in ts}})
        write_json(staging / "config.json", plan.config)
        result.provenance = {
            "tool": "eagle-convert", "version": __version__, "layout": plan.layout, "dtype": plan.dtype_name,
            "inputs": {"draft": result.draft.to_dict(), "target": result.target.to_dict(),
                       **({"lm_head_from": result.lm_head_from.to_dict()} if result.lm_head_from else {})},
            "dropped": [{"name": n, "reason": r} for n, r in plan.dropped], "notes": list(plan.notes),
            "fold": result.fold.to_dict() if result.fold else None,
            "nonfinite": result.nonfinite,  # --allow-nonfinite: NaN/Inf values written as the sources hold them
            "tensors": {t.name: provenance[t.name] for t in plan.tensors},  # plan order, whichever writer was first
        }
        write_json(staging / "eagle_convert.json", result.provenance)
        (staging / "README.md").write_text(model_card(plan, result))
        result.files = sorted(p.name for p in staging.iterdir() if p.name != STAGING_OWNER)
    result.out = out.resolve()


def _how(planned: PlannedTensor) -> str:
    """How an output tensor was made from its sources, for the provenance record."""
    if planned.derive == DEQUANT:
        return planned.dequant.how(planned.dtype)
    if planned.derive not in (None, GATHER):
        return planned.derive
    source = planned.sources[0].ref
    cast = (None if source.dtype == planned.dtype else
            f"cast {str(source.dtype).removeprefix('torch.')} -> {str(planned.dtype).removeprefix('torch.')}")
    if planned.derive == GATHER:
        return f"{source.how()}, then {cast}" if cast else source.how()
    return cast or "copy"


def _produce(planned: PlannedTensor, checkpoints: dict[str, Checkpoint], result: ConversionResult):
    """The tensor to write (in its source dtype when only a cast is left: the writer casts it chunk by chunk) and the
    provenance of what was read for it: sha256 of the bytes read (never whole files), as a Digest computed on another
    core while the tensor is written; `_execute` waits for it."""
    if planned.derive == ZEROS:
        return torch.zeros(planned.shape, dtype=planned.dtype), []
    values, sources = [], []
    for origin, ref in planned.sources:
        ckpt = checkpoints[origin]
        if isinstance(ref, Gathered):  # one source entry per rank shard, with the byte range read
            value, shards = gather(ckpt, ref)
            sources += [{"origin": origin, "file": ckpt.source.describe(leaf.file), "name": leaf.name,
                         "range": [leaf.offset, leaf.offset + leaf.nbytes], "revision": ckpt.source.revision(),
                         "sha256": Digest(tensor_bytes(shard))} for leaf, shard in zip(ref.leaves(), shards)]
            values.append(value)
            continue
        value = read_tensor(ckpt, ref)
        span = ckpt.span(ref)  # hashed from the file already (the CLI starts on the draft before torch loads)?
        digest = (PREHASH.take(*span) if span else None) or Digest(tensor_bytes(value))
        sources.append({"origin": origin, "file": ckpt.source.describe(ref.file), "name": ref.name,
                        "revision": ckpt.source.revision(), "sha256": digest})
        values.append(value)
    if planned.derive == DEQUANT:
        codes, scale = values
        return dequantize_fp8(codes, scale, planned.dequant.block, planned.dtype), sources
    if planned.derive == FOLD:
        embed, fc_weight, fc_bias = values
        folded, result.fold = fold_fc_bias(embed, fc_weight, fc_bias, planned.dtype)
        return folded, sources
    return values[0], sources


class _NoBar:
    def update(self, n: int = 1) -> None: ...
    def close(self) -> None: ...


def _progress(total: int, enabled: bool):
    if not enabled or not sys.stderr.isatty():
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, desc="writing tensors", unit="tensor", file=sys.stderr, leave=False)
