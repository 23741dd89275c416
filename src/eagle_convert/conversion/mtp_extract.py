"""`convert --mtp TARGET`: the MTP layers inside a target written as a draft folder an engine loads, in an extracted
layout (layouts/mtp_*.py, picked by --to). Planned as every conversion is (mtp_plan.py) and written by the same
executor (execute.py): only the MTP tensors' byte ranges are read (local shards, or the Hub by range as for LM
heads), read ahead, every range recorded with its sha256 in eagle_convert.json; the folder is built in a staging
folder and moved into place only when complete (io/staging.py), so a refusal or failure writes nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..checkpoint.open import InputRef, open_input
from ..errors import OutputPathError, UnsupportedConversionError
from ..io.background import end_reads
from ..io.overlap import check_out_path
from ..io.staging import remove_stale_staging
from ..io.units import parse_size
from ..kinds import MTP
from ..layouts.registry import extraction_layouts
from ..mtp.locate import MtpLayers, find_mtp
from ..targets.quant import FP8_HOW
from .execute import execute_plan
from .mtp_plan import plan_mtp
from .plan import DEQUANT, Plan, PlannedTensor


@dataclass(frozen=True)
class MtpSettings:
    """How to extract (the CLI's `convert --mtp` options)."""
    to: str = "vllm"
    dequantize: bool = False
    dry_run: bool = False
    force: bool = False
    max_shard_size: str | int = "5GB"
    num_speculative_tokens: int = 1  # in the printed vLLM serve command
    revision: str | None = None
    token: str | None = None
    offline: bool | None = None
    progress: bool = False


@dataclass
class MtpResult:
    target: InputRef
    layers: MtpLayers
    plan: Plan
    out: Path | None  # None for a dry run
    files: list[str] = field(default_factory=list)
    provenance: dict | None = None
    notes: list[str] = field(default_factory=list)
    fetch: dict | None = None  # a repo id, dry run: what planning fetched and what extracting will fetch
    to: str = "vllm"  # the --to that picked the layout
    nonfinite: dict[str, int] = field(default_factory=dict)  # NaN/Inf the target's own tensors hold (written as is)
    fold = None  # the executor's: no fc bias is ever folded into an MTP layer
    token_map = None  # the executor's: an MTP head shares the target's vocabulary

    def inputs_record(self) -> dict:
        return {"target": self.target.to_dict()}

    def plan_dict(self) -> dict:
        """The plan as `--json` says it (and the human report lists it): per tensor its source and how it is made."""
        return {"layout": self.to, "serve_command": self.plan.serve_command,
                "dropped": [name for name, _ in self.plan.dropped],
                "tensors": [{"name": t.name, "source": t.role, "dtype": str(t.dtype).removeprefix("torch."),
                             "shape": list(t.shape), "how": _how(t)} for t in self.plan.tensors],
                "bytes_to_read": self.plan.bytes_read()["target"]}

    def to_dict(self) -> dict:
        return {"ok": True, "dry_run": self.out is None, "out": str(self.out) if self.out else None,
                "target": self.target.to_dict(), "mtp": self.layers.to_dict(), "files": self.files,
                "notes": self.notes, "fetch": self.fetch, **self.plan_dict()}


def _how(t: PlannedTensor) -> str:
    if t.derive == DEQUANT:
        return f"{FP8_HOW} x {t.dequant.scale.name} (block) -> {str(t.dtype).removeprefix('torch.')}"
    return "copy" if t.name == t.role else f"copy, renamed from {t.role}"


def extract_mtp(target: str, out: str | Path | None = None, settings: MtpSettings = MtpSettings()) -> MtpResult:
    """Write the MTP layers of `target` (folder or repo id) to `out` in the `settings.to` layout."""
    try:
        return _extract(target, out, settings)
    finally:
        end_reads()  # the read-ahead of this extraction ends with it, its threads joined, however it ends


def _extract(target: str, out: str | Path | None, settings: MtpSettings) -> MtpResult:
    layouts = extraction_layouts(MTP)
    if settings.to not in layouts:
        raise UnsupportedConversionError(f"--to {settings.to} does not apply to MTP heads.",
                                         f"Use --to {' or --to '.join(layouts)} with --mtp.")
    ref = open_input(target, revision=settings.revision, token=settings.token, offline=settings.offline,
                     role="target", quiet=not settings.progress, ranked=False)
    if not settings.dry_run:
        if out is None:
            raise OutputPathError("No output folder given.", "Pass -o OUT (or --dry-run to only print the plan).")
        check_out_path(Path(out), [ref], settings.force)
    if ref.checkpoint.weight_format != "safetensors":
        raise UnsupportedConversionError(
            f"{ref.label} stores its weights as {ref.checkpoint.weight_format}: MTP layers are extracted by byte "
            "range from safetensors files only.", "Use the model's safetensors release.")
    layers = find_mtp(ref.checkpoint)
    plan = plan_mtp(ref, layers, layouts[settings.to], dequantize=settings.dequantize,
                    out_label=str(Path(out).resolve()) if out else "OUT",
                    num_speculative_tokens=settings.num_speculative_tokens)
    result = MtpResult(ref, layers, plan, None, notes=list(ref.notes) + list(layers.notes), to=settings.to)
    if settings.dry_run:
        result.fetch = fetch_summary(ref, result)
        return result
    result.notes += remove_stale_staging(Path(out))
    max_shard = 0 if plan.single_file else parse_size(settings.max_shard_size)  # one named file: no sharding
    # NaN/Inf in the target's own layers are written as they are stored (engines load the target's layers as they
    # are too) and counted in eagle_convert.json
    execute_plan(plan, {"target": ref.checkpoint}, Path(out), settings.force, max_shard, result, settings.progress,
                 allow_nonfinite=True)
    return result


def fetch_summary(ref: InputRef, result: MtpResult) -> dict | None:
    """For a repo id: the bytes planning fetched (config, index, the MTP shards' headers) and every tensor range
    extracting will fetch, each marked cached or not (as a dry run of an EAGLE conversion says for the LM head)."""
    from ..io.hub.hub_source import HubSource
    from ..io.hub.ranges import is_cached

    source = ref.checkpoint.source
    if not isinstance(source, HubSource):
        return None
    names = sorted({leaf.name for t in result.plan.tensors for _, read in t.sources for leaf in read.leaves()})
    items = [{"file": r.file, "what": f"range of {n}", "bytes": r.nbytes,
              "cached": is_cached(source.ref, r.file, r.nbytes, key=n)} for n, r in
             ((n, result.layers.refs[n]) for n in names)]
    return {"repo_id": ref.repo_id, "commit_sha": ref.commit_sha, "fetched_to_plan": dict(source.fetched),
            "to_fetch": items, "bytes_to_fetch": sum(i["bytes"] for i in items if not i["cached"])}
