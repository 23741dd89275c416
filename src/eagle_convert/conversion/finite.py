"""NaN and Inf in what `convert` writes. The writer scans every float chunk as it writes it (io/write.py); a tensor
that had any comes here, and only then are its sources read again to tell where the values came from:

- from the source files (copied, cast, gathered, or FP8 codes / scales dequantized): refused at the end of the
  conversion, listing every such tensor, unless --allow-nonfinite, which writes them as they are and records them;
- made by eagle-convert from finite values (a cast or a dequantization past the output dtype's range, an fc-bias
  fold that overflows): always refused, as is a fold of non-finite values (its result would be NaN/Inf throughout)."""

from __future__ import annotations

import torch

from ..checkpoint.index import Checkpoint
from ..checkpoint.ranks.gather import gather
from ..checkpoint.ranks.shards import Gathered
from ..checkpoint.read import read_tensor
from ..errors import NonFiniteError, option
from ..io.write import count_nonfinite
from .plan import DEQUANT, FOLD, PlannedTensor

ALLOW_HINT = ("The values are in the source files, not made by eagle-convert: re-export or retrain the head (or "
              f"use an intact copy of the target); or pass {option('allow_nonfinite')} to write them as they are (the "
              "provenance file then records which tensors hold how many).")
KEEP_BIAS = f"{option('to', 'vllm-v0')} / {option('to', 'sglang')}"  # the layouts that keep an fc bias as it is


def _dtype(t: torch.dtype) -> str:
    return str(t).removeprefix("torch.")


def _read(ckpt: Checkpoint, ref) -> torch.Tensor:
    return gather(ckpt, ref)[0] if isinstance(ref, Gathered) else read_tensor(ckpt, ref)


def _counted(t: torch.Tensor) -> int:
    if t.dtype.is_floating_point and t.dtype.itemsize == 1:  # FP8: torch has no isfinite for it; fp16 holds it all
        t = t.to(torch.float16)
    return count_nonfinite(t)


def judge(planned: PlannedTensor, value: torch.Tensor, written: int, checkpoints: dict[str, Checkpoint]) -> int:
    """`written` NaN/Inf values went into `planned` (produced as `value`): how many came from its sources (to refuse
    or record), or NonFiniteError when eagle-convert made them."""
    if planned.derive == FOLD:
        _judge_fold(planned, written, checkpoints)
    if planned.derive == DEQUANT:
        codes, scale = (_read(checkpoints[s.origin], s.ref) for s in planned.sources)
        from_source = _counted(codes) + _counted(scale)
    else:  # a copy, cast or gather: `value` is the source tensor itself
        from_source = written if value.dtype == planned.dtype else _counted(value)
    if written > from_source:
        how = "dequantizing its FP8 codes" if planned.derive == DEQUANT else "casting it"
        raise NonFiniteError(
            f"{planned.name} ({planned.describe_source()}) holds values beyond the range of {_dtype(planned.dtype)}: "
            f"{how} to {_dtype(planned.dtype)} made {written - from_source} Inf value(s) from finite ones.",
            f"Pass {option('dtype', 'float32')} (or bfloat16, which has float32's range) so the values fit.")
    return from_source


def _judge_fold(planned: PlannedTensor, written: int, checkpoints: dict[str, Checkpoint]) -> None:
    embed, fc_weight, fc_bias = (_read(checkpoints[s.origin], s.ref) for s in planned.sources)
    used = {"embed_tokens.weight": embed, "fc.weight (its embedding half)": fc_weight[:, :embed.shape[1]],
            "fc.bias": fc_bias}
    bad = {name: n for name, t in used.items() if (n := _counted(t))}
    if bad:
        raise NonFiniteError(
            f"The fc-bias fold into {planned.name} reads non-finite values ("
            + ", ".join(f"{name}: {n}" for name, n in bad.items())
            + f"), so the folded embedding has {written} NaN/Inf values: E' = E + W_e^-1 b spreads them.",
            f"Fix the head's tensors (re-export or retrain it): {option('allow_nonfinite')} copies non-finite values "
            f"as they are but cannot fold them; {option('fc_bias', 'drop')}, or {KEEP_BIAS} (which keep the bias), "
            "do not fold.")
    raise NonFiniteError(
        f"The fc-bias fold into {planned.name} made {written} NaN/Inf values from finite inputs: W_e^-1 b (the bias "
        f"moved into the embedding) exceeds the range of {_dtype(planned.dtype)}, i.e. the embedding half of fc.weight "
        "is (nearly) singular.",
        f"The fold cannot express this head: use {option('fc_bias', 'drop')} (lossy), or {KEEP_BIAS}, which keep "
        "the fc bias.")


def refusal(found: dict[str, int], planned: dict[str, PlannedTensor]) -> NonFiniteError:
    """The error for source NaN/Inf without --allow-nonfinite: every tensor that has any, with its count."""
    listed = "; ".join(f"{name}: {n} (from {planned[name].describe_source()})" for name, n in found.items())
    return NonFiniteError(f"NaN or Inf values in the sources of {len(found)} tensor(s) to be written: {listed}. "
                          "Nothing was written.", ALLOW_HINT)
