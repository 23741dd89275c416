"""The executor of a plan, for every head kind (`convert` and `convert --mtp`): every output tensor produced from its
sources and streamed (io/write.py) into a staging folder (io/staging.py), with its provenance (sha256 of the bytes
read), then the index, the config, the files copied beside it, the provenance record and the model card, and the
folder moved into place."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from .. import __version__
from ..checkpoint.index import Checkpoint
from ..checkpoint.ranks.gather import gather
from ..checkpoint.ranks.shards import Gathered
from ..checkpoint.read import read_tensor
from ..io.digest import PREHASH, Digest
from ..io.gguf_file import GgufTensor, write_gguf
from ..io.progress import Progress
from ..io.safetensors import tensor_bytes
from ..io.staging import STAGING_OWNER, staged_output
from ..io.write import OutTensor, sharded_files, write_index, write_json, write_safetensors
from ..targets.quant import dequantize_fp8
from . import finite
from .derive import fold_fc_bias
from .modelcard import model_card
from .openvino_export import export_ir
from .plan import DEQUANT, FOLD, GATHER, ZEROS, Plan, PlannedTensor
from .token_map_output import TokenMapOutput, write_token_map

if TYPE_CHECKING:  # what a result needs here: ConversionResult (converter.py) and MtpResult (mtp_extract.py)
    from typing import Protocol

    class Executed(Protocol):
        fold: object | None  # an fc-bias fold's report, set while producing (EAGLE-1 heads only)
        nonfinite: dict[str, int]
        token_map: dict | None
        provenance: dict | None
        files: list[str]
        out: Path | None

        def inputs_record(self) -> dict: ...


def execute_plan(plan: Plan, checkpoints: dict[str, Checkpoint], out: Path, force: bool, max_shard: int,
                 result: Executed, progress: bool, allow_nonfinite: bool = False,
                 token_map: TokenMapOutput | None = None, ir_python: str | None = None) -> None:
    """Write `plan` into `out`, reading each tensor's sources from `checkpoints` (origin -> checkpoint: "draft",
    "target"), and fill in `result` (files, provenance, NaN/Inf counts, where it went). `ir_python`: the interpreter
    that exports a plan with `ir_export` to OpenVINO IR (conversion/openvino_export.py)."""
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

    _warm(plan, checkpoints)
    wanted = [OutTensor(t.name, t.dtype, t.shape) for t in plan.tensors]
    files = {plan.single_file: wanted} if plan.single_file else sharded_files(wanted, max_shard)
    bar = Progress("writing tensors", len(wanted), "tensor", enabled=progress)
    with staged_output(out, force) as staging:
        try:
            if plan.gguf_file:
                write_gguf(staging / plan.gguf_file, {k: tuple(v) for k, v in plan.config.items()},
                           [GgufTensor(o.name, o.dtype, o.shape) for o in wanted],
                           lambda o: (bar.update(1), produce(o))[1], on_nonfinite=on_nonfinite)
            else:
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
        if not plan.gguf_file:  # a GGUF file holds its metadata itself
            _write_beside(plan, checkpoints, staging, files)
        exported = export_ir(staging, plan.ir_export, ir_python) if plan.ir_export else None
        if token_map is not None:
            result.token_map = write_token_map(token_map, staging)
        result.provenance = {
            "tool": "eagle-convert", "version": __version__, "layout": plan.layout, "dtype": plan.dtype_name,
            "inputs": result.inputs_record(),
            "dropped": [{"name": n, "reason": r} for n, r in plan.dropped], "notes": list(plan.notes),
            "fold": result.fold.to_dict() if result.fold else None,
            "nonfinite": result.nonfinite,  # --allow-nonfinite: NaN/Inf values written as the sources hold them
            "tensors": {t.name: provenance[t.name] for t in plan.tensors},  # plan order, whichever writer was first
            **({"token_map": result.token_map} if token_map is not None else {}),
            **({"ir_export": {**plan.ir_export.to_dict(), **exported}} if exported else {}),
            **plan.record,
        }
        write_json(staging / "eagle_convert.json", result.provenance)
        if plan.model_card:
            (staging / "README.md").write_text(model_card(plan, result))
        result.files = sorted(p.name for p in staging.iterdir() if p.name != STAGING_OWNER)
    result.out = out.resolve()


def _warm(plan: Plan, checkpoints: dict[str, Checkpoint]) -> None:
    """Ask for every range the plan reads, in the order the tensors are written: the disk reads ahead of the CPU."""
    for planned in plan.tensors:
        for origin, ref in planned.sources:
            source = checkpoints[origin].source
            for leaf in ref.leaves():
                source.warm(leaf.file, *((leaf.offset, leaf.nbytes) if leaf.offset is not None
                                         else (0, source.size(leaf.file))))


def _write_beside(plan: Plan, checkpoints: dict[str, Checkpoint], staging: Path, files: dict) -> None:
    """The index, config.json and the files copied from the target, beside the written tensors."""
    if plan.single_file:  # exactly what SGLang's export script writes: the weight map alone
        write_json(staging / "model.safetensors.index.json",
                   {"weight_map": {t.name: plan.single_file for t in plan.tensors}})
    else:
        write_index(staging, files)
    if plan.config_bytes is not None:
        (staging / "config.json").write_bytes(plan.config_bytes)
    else:
        write_json(staging / "config.json", plan.config)
    source = checkpoints["target"].source if plan.side_files else None
    for rel in plan.side_files:
        (staging / rel).write_bytes(source.local_path(rel).read_bytes())


def _how(planned: PlannedTensor) -> str:
    """How an output tensor was made from its sources, for the provenance record."""
    if planned.derive == DEQUANT:
        return planned.dequant.how(planned.dtype)
    if planned.rewrite:
        return f"{_how(dataclasses.replace(planned, rewrite=None))}, then {planned.rewrite.how}"
    if planned.derive not in (None, GATHER):
        return planned.derive
    source = planned.sources[0].ref
    cast = (None if source.dtype == planned.dtype else
            f"cast {str(source.dtype).removeprefix('torch.')} -> {str(planned.dtype).removeprefix('torch.')}")
    if planned.derive == GATHER:
        return f"{source.how()}, then {cast}" if cast else source.how()
    return cast or "copy"


def _produce(planned: PlannedTensor, checkpoints: dict[str, Checkpoint], result: Executed):
    """The tensor to write and the provenance of what was read for it (`_read`), with the layout's rewrite applied
    (llama.cpp's q/k row order, absolute d2t: layouts/gguf.py)."""
    value, sources = _read(planned, checkpoints, result)
    return (planned.rewrite.apply(value) if planned.rewrite else value), sources


def _read(planned: PlannedTensor, checkpoints: dict[str, Checkpoint], result: Executed):
    """The tensor to write (in its source dtype when only a cast is left: the writer casts it chunk by chunk) and the
    provenance of what was read for it: sha256 of the bytes read (never whole files), as a Digest computed on another
    core while the tensor is written; `execute_plan` waits for it."""
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
