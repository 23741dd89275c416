"""The safetensors format's dtype codes and the byte-level helpers every reader and writer shares."""

from __future__ import annotations

import torch

SAFETENSORS_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool, "U16": torch.uint16, "U32": torch.uint32, "U64": torch.uint64,
    # Quantized checkpoints: FP8 codes (and E8M0 block scales) are indexed like any tensor; targets/quant.py decides
    # what may be read from them.
    "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2, "F8_E8M0": torch.float8_e8m0fnu,
}


SAFETENSORS_CODES = {dtype: code for code, dtype in SAFETENSORS_DTYPES.items()}


def nbytes_of(dtype: torch.dtype, shape: tuple[int, ...]) -> int:
    n = dtype.itemsize
    for d in shape:
        n *= d
    return n


def tensor_bytes(t: torch.Tensor) -> memoryview:
    """The raw bytes of a tensor (made contiguous), without a copy when it already is."""
    t = t.contiguous()
    return memoryview(t.reshape(-1).view(torch.uint8).numpy())
