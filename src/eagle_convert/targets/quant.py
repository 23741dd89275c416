"""How a target's LM head (or embedding) is stored: float, FP8 codes with a scale (dequantized exactly), or packed
(refused: the way out is `--lm-head-from` the unquantized base).

FP8 scales, as the quantizers write them, always multiply the codes (`weight_scale` in compressed-tensors / ModelOpt
/ FBGEMM, `weight_scale_inv` in DeepSeek-V3-style block FP8, despite its name):
- per tensor: a scale of shape [] or [1];
- per channel: [rows] or [rows, 1];
- block: [ceil(rows / b0), ceil(cols / b1)], the block size from the config's `weight_block_size`, or the one
  square power-of-two block that fits the shapes (anything else is refused rather than guessed).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..checkpoint.index import Checkpoint, TensorRef
from ..errors import ShapeMismatchError, UnsupportedConversionError

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
SCALE_SUFFIXES = ("weight_scale", "weight_scale_inv")
# Tensor names that only a packed (integer-coded) weight has beside it: GPTQ/AWQ, compressed-tensors pack-quantized,
# bitsandbytes, NVFP4 (ModelOpt's second-level scale).
PACKED_SUFFIXES = ("qweight", "weight_packed", "qzeros", "scales", "weight_scale_2", "weight.absmax",
                   "weight.quant_map", "blocks")
FP8_HOW = "dequantize fp8"


@dataclass(frozen=True)
class StoredWeight:
    """A target tensor as the converter reads it: `ref`, and for FP8 the scale that multiplies it."""
    ref: TensorRef
    scale: TensorRef | None = None
    scheme: str | None = None  # "per-tensor", "per-channel", "block RxC" (FP8 only)
    block: tuple[int, int] | None = None

    @property
    def quantized(self) -> bool:
        return self.scale is not None

    def how(self, out_dtype: torch.dtype) -> str:
        return (f"{FP8_HOW} {str(self.ref.dtype).removeprefix('torch.')} x {self.scale.name} ({self.scheme}) -> "
                f"{str(out_dtype).removeprefix('torch.')}")

    def describe(self) -> str:
        if self.scale is None:
            return f"{self.ref.name} ({str(self.ref.dtype).removeprefix('torch.')})"
        return f"{self.ref.name} (FP8 {self.scheme}, scale {self.scale.name}: dequantized exactly)"


def _packed_refusal(ckpt: Checkpoint, name: str, what: str) -> UnsupportedConversionError:
    return UnsupportedConversionError(
        f"The target's {what} ({name}) is stored packed or quantized in a format eagle-convert does not dequantize "
        f"({_packed_evidence(ckpt, name)}), so splicing it would copy raw codes into the draft.",
        "Take the LM head and embedding from the unquantized base model instead: --lm-head-from CHECKPOINT (a "
        "folder or repo id with the same vocab and hidden size, e.g. the bf16 model this checkpoint was quantized "
        "from). FP8 heads with a weight_scale / weight_scale_inv are dequantized automatically.")


def _shape_refusal(ckpt: Checkpoint, ref: TensorRef, shape: tuple[int, int], what: str) -> ShapeMismatchError:
    """A float (or FP8) tensor of the wrong shape is not packed: the config's sizes do not describe these weights."""
    return ShapeMismatchError(
        f"The target's {what} ({ref.name}) is {str(ref.dtype).removeprefix('torch.')} {list(ref.shape)}, but "
        f"{ckpt.label}'s config says vocab_size {shape[0]} and hidden_size {shape[1]}: the {what}'s rows must "
        "equal vocab_size (and its columns hidden_size). A float tensor is stored as it is, not packed: the config "
        "and the weights disagree.",
        "Fix vocab_size / hidden_size in the target's config.json to match its weights if the config was edited or "
        "copied from another model, or point --target at the checkpoint the head was trained for.")


def _packed_evidence(ckpt: Checkpoint, name: str) -> str:
    stem = name.removesuffix("weight")
    found = [stem + s for s in PACKED_SUFFIXES if ckpt.has(stem + s)]
    if ckpt.has(name):
        ref = ckpt.ref(name)
        found.insert(0, f"{name} is {str(ref.dtype).removeprefix('torch.')} {list(ref.shape)}")
    return ", ".join(found) or "no float weight"


def has_packed_form(ckpt: Checkpoint, name: str) -> bool:
    return any(n != name for n in stored_names(ckpt, name))


def stored_names(ckpt: Checkpoint, name: str) -> list[str]:
    """The tensors that hold `name` in this checkpoint: itself, and the parts of a packed form (qweight, scales...)."""
    stem = name.removesuffix("weight")
    return [n for n in (name, *(stem + s for s in PACKED_SUFFIXES)) if ckpt.has(n)]


def stored_weight(ckpt: Checkpoint, name: str, shape: tuple[int, int], what: str,
                  block_size: tuple[int, int] | None = None) -> StoredWeight:
    """`name` (which must exist, or have a packed form) as float, FP8 + scale, or refused."""
    if not ckpt.has(name):
        raise _packed_refusal(ckpt, name, what)
    ref = ckpt.ref(name)
    if ref.dtype.is_floating_point and ref.shape != shape and not has_packed_form(ckpt, name):
        raise _shape_refusal(ckpt, ref, shape, what)
    if ref.dtype in FP8_DTYPES:
        stem = name.removesuffix("weight")
        scale_name = next((stem + s for s in SCALE_SUFFIXES if ckpt.has(stem + s)), None)
        if scale_name is None or ref.shape != shape:
            raise _packed_refusal(ckpt, name, what)
        scale = ckpt.ref(scale_name)
        scheme, block = fp8_scheme(scale.shape, ref.shape, block_size)
        if scheme is None:
            raise UnsupportedConversionError(
                f"The target's {what} is FP8 with a {scale_name} of shape {list(scale.shape)}, which is neither per "
                f"tensor, per channel nor a block layout of {list(ref.shape)}.", _packed_refusal(ckpt, name, what).hint)
        return StoredWeight(ref, scale, scheme, block)
    if not ref.dtype.is_floating_point or ref.shape != shape or has_packed_form(ckpt, name):
        raise _packed_refusal(ckpt, name, what)
    return StoredWeight(ref)


def fp8_scheme(scale_shape: tuple[int, ...], shape: tuple[int, ...],
               block_size: tuple[int, int] | None) -> tuple[str | None, tuple[int, int] | None]:
    rows, cols = shape
    if tuple(scale_shape) in ((), (1,), (1, 1)):
        return "per-tensor", None
    if tuple(scale_shape) in ((rows,), (rows, 1)):
        return "per-channel", None
    if len(scale_shape) != 2:
        return None, None
    sr, sc = scale_shape
    if block_size:
        candidates = [tuple(block_size)]
    else:  # quantizers use square power-of-two blocks (128 x 128 in DeepSeek-V3 and compressed-tensors)
        candidates = [(b, b) for b in (2 ** i for i in range(13))]
    fits = [b for b in candidates if (-(-rows // b[0]), -(-cols // b[1])) == (sr, sc)]
    if len(fits) != 1:
        return None, None
    return f"block {fits[0][0]}x{fits[0][1]}", fits[0]


def dequantize_fp8(codes: torch.Tensor, scale: torch.Tensor, block: tuple[int, int] | None,
                   out_dtype: torch.dtype) -> torch.Tensor:
    """codes x scale, rounded once to `out_dtype`. The product of an FP8 code (4 significant bits) and a float32
    scale (24) is exact in float64, so the one rounding is to the output dtype: the correctly rounded value."""
    rows, cols = codes.shape
    s = scale.to(torch.float64)
    if block is not None:
        s = s.repeat_interleave(block[0], 0)[:rows].repeat_interleave(block[1], 1)[:, :cols]
    elif s.numel() == rows and rows != 1:
        s = s.reshape(rows, 1)
    else:
        s = s.reshape(())
    return (codes.to(torch.float64) * s).to(out_dtype)


def block_size_of(config: dict) -> tuple[int, int] | None:
    q = config.get("quantization_config") or {}
    size = q.get("weight_block_size")
    return (int(size[0]), int(size[1])) if isinstance(size, (list, tuple)) and len(size) == 2 else None


def quantization_summary(config: dict) -> str | None:
    """The config's quantization method (and what it leaves unquantized), for inspect."""
    q = config.get("quantization_config")
    if not isinstance(q, dict):
        return None
    method = q.get("quant_method") or q.get("quant_algo") or "unknown method"
    fmt = q.get("format") or (q.get("config_groups") or {}).get("group_0", {}).get("format")
    kept = q.get("ignore") or q.get("ignored_layers") or q.get("modules_to_not_convert") or q.get("exclude_modules")
    return f"{method}{f' ({fmt})' if fmt else ''}" + (f", not quantized: {', '.join(map(str, kept))}" if kept else "")
