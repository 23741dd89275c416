"""`convert --mtp TARGET`: the MTP layers inside a target written as a draft folder an engine loads (plan.py says
how per layout). Only the MTP tensors' byte ranges are read (local shards, or the Hub by range as for LM heads);
every range read is recorded with its sha256 in eagle_convert.json; the folder is built in a staging folder and
moved into place only when complete (io/staging.py), so a refusal or failure writes nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from .. import __version__
from ..checkpoint.open import InputRef, open_input
from ..checkpoint.read import read_tensor
from ..conversion.checks import check_out_path
from ..conversion.prefetch import end_reads
from ..errors import OutputPathError, UnsupportedConversionError
from ..io.digest import Digest
from ..io.progress import Progress
from ..io.safetensors import tensor_bytes
from ..io.staging import STAGING_OWNER, remove_stale_staging, staged_output
from ..io.units import parse_size
from ..io.write import OutTensor, sharded_files, write_index, write_json, write_safetensors
from ..targets.quant import dequantize_fp8
from .locate import MtpLayers, find_mtp
from .plan import LAYOUTS, MtpPlan, MtpTensor, plan_sglang, plan_vllm

# Files beside the weights that a served folder keeps: tokenizer, generation config, and the remote code a
# config's auto_map names (top-level *.py).
COPIED = ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
          "vocab.json", "merges.txt", "tokenizer.model", "added_tokens.json", "chat_template.jinja")


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
    plan: MtpPlan
    out: Path | None  # None for a dry run
    files: list[str] = field(default_factory=list)
    provenance: dict | None = None
    notes: list[str] = field(default_factory=list)
    fetch: dict | None = None  # a repo id, dry run: what planning fetched and what extracting will fetch

    def to_dict(self) -> dict:
        return {"ok": True, "dry_run": self.out is None, "out": str(self.out) if self.out else None,
                "target": self.target.to_dict(), "mtp": self.layers.to_dict(), "files": self.files,
                "notes": self.notes, "fetch": self.fetch, **self.plan.to_dict()}


def extract_mtp(target: str, out: str | Path | None = None, settings: MtpSettings = MtpSettings()) -> MtpResult:
    """Write the MTP layers of `target` (folder or repo id) to `out` in the `settings.to` layout."""
    try:
        return _extract(target, out, settings)
    finally:
        end_reads()  # the read-ahead of this extraction ends with it, its threads joined, however it ends


def _extract(target: str, out: str | Path | None, settings: MtpSettings) -> MtpResult:
    if settings.to not in LAYOUTS:
        raise UnsupportedConversionError(f"--to {settings.to} does not apply to MTP heads.",
                                         f"Use --to {' or --to '.join(LAYOUTS)} with --mtp.")
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
    out_label = str(Path(out).resolve()) if out else "OUT"
    if settings.to == "vllm":
        raw = bytes(ref.checkpoint.source.read_range("config.json", 0, ref.checkpoint.source.size("config.json")))
        plan = plan_vllm(layers, raw, settings.dequantize, ref.serve_name, out_label, settings.num_speculative_tokens)
    else:
        plan = plan_sglang(layers, ref.checkpoint.config, settings.dequantize, ref.serve_name, out_label)
    result = MtpResult(ref, layers, plan, None, notes=list(ref.notes) + list(layers.notes))
    if settings.dry_run:
        result.fetch = fetch_summary(ref, result)
        return result
    result.notes += remove_stale_staging(Path(out))
    write_extraction(result, Path(out), settings)
    return result


def fetch_summary(ref: InputRef, result: MtpResult) -> dict | None:
    """For a repo id: the bytes planning fetched (config, index, the MTP shards' headers) and every tensor range
    extracting will fetch, each marked cached or not (as a dry run of an EAGLE conversion says for the LM head)."""
    from ..io.hub.ranges import is_cached
    from ..io.hub.source import HubSource

    source = ref.checkpoint.source
    if not isinstance(source, HubSource):
        return None
    names = sorted({t.source for t in result.plan.tensors} | {t.scale for t in result.plan.tensors if t.scale})
    items = [{"file": r.file, "what": f"range of {n}", "bytes": r.nbytes,
              "cached": is_cached(source.ref, r.file, r.nbytes, key=n)} for n, r in
             ((n, result.layers.refs[n]) for n in names)]
    return {"repo_id": ref.repo_id, "commit_sha": ref.commit_sha, "fetched_to_plan": dict(source.fetched),
            "to_fetch": items, "bytes_to_fetch": sum(i["bytes"] for i in items if not i["cached"])}


def write_extraction(result: MtpResult, out: Path, settings: MtpSettings) -> None:
    ckpt, plan = result.target.checkpoint, result.plan
    provenance: dict[str, dict] = {}

    def produce(o: OutTensor) -> torch.Tensor:
        planned = by_name[o.name]
        value, sources = _read(ckpt, result.layers, planned)
        provenance[o.name] = {"sources": sources, "how": planned.how(),
                              "dtype": str(planned.dtype).removeprefix("torch."), "shape": list(planned.shape)}
        return value

    by_name = {t.name: t for t in plan.tensors}
    wanted = [OutTensor(t.name, t.dtype, t.shape) for t in plan.tensors]
    files = {plan.single_file: wanted} if plan.single_file else sharded_files(wanted,
                                                                              parse_size(settings.max_shard_size))
    with staged_output(out, settings.force) as staging, \
            Progress("writing tensors", len(wanted), "tensor", enabled=settings.progress) as shown:
        for rel, tensors in files.items():
            write_safetensors(staging / rel, tensors, lambda o: (shown.update(), produce(o))[1])
        for entry in provenance.values():
            for src in entry["sources"]:
                src["sha256"] = src["sha256"].hexdigest()
        if plan.single_file:  # exactly what SGLang's export script writes: the weight map alone
            write_json(staging / "model.safetensors.index.json", {"weight_map": {t.name: plan.single_file
                                                                                for t in wanted}})
        else:
            write_index(staging, files)
        (staging / "config.json").write_bytes(plan.config)
        _copy_side_files(ckpt.source, staging)
        result.provenance = {
            "tool": "eagle-convert", "version": __version__, "layout": f"mtp-{plan.layout}",
            "inputs": {"target": result.target.to_dict()}, "mtp": result.layers.to_dict(),
            "dropped": plan.dropped, "notes": result.notes,
            "tensors": {t.name: provenance[t.name] for t in plan.tensors}}
        write_json(staging / "eagle_convert.json", result.provenance)
        result.files = sorted(p.name for p in staging.iterdir() if p.name != STAGING_OWNER)
    result.out = out.resolve()


def _read(ckpt, layers: MtpLayers, planned: MtpTensor) -> tuple[torch.Tensor, list[dict]]:
    """The tensor to write and, for each byte range read for it, where from and a sha256 (computed on another core
    while the tensor is written)."""
    values, sources = [], []
    for name in (planned.source, planned.scale):
        if name is None:
            continue
        ref = layers.refs[name]
        value = read_tensor(ckpt, ref)
        sources.append({"file": ckpt.source.describe(ref.file), "name": name, "range": [ref.offset,
                        ref.offset + ref.nbytes], "revision": ckpt.source.revision(),
                        "sha256": Digest(tensor_bytes(value))})
        values.append(value)
    if planned.scale:
        return dequantize_fp8(values[0], values[1], layers.block, planned.dtype), sources
    return values[0], sources


def _copy_side_files(source, staging: Path) -> None:
    for rel in source.files():
        if "/" not in rel and (rel in COPIED or rel.endswith(".py")):
            (staging / rel).write_bytes(source.local_path(rel).read_bytes())
