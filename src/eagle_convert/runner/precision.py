"""What makes an fp32 run on a GPU exact, and a record of what ran.

On Ampere and later GPUs, fp32 matmuls and convolutions may run as TF32 (10-bit mantissa) when a library or the user
enabled it (`torch.backends.cuda.matmul.allow_tf32`, `torch.set_float32_matmul_precision("high")`,
`torch.backends.cudnn.allow_tf32`, which defaults to True). The bench's fp32 lossless check demands identical tokens
from speculative and plain decoding: under TF32 a verify pass over k+1 rows and a one-token step round differently, so
a correct run would be reported as a runner bug. An fp32 CUDA target therefore pins TF32 off (process-wide, as those
switches are) and refuses to run when `TORCH_ALLOW_TF32_CUBLAS_OVERRIDE` forces TF32 in cuBLAS behind every switch.
"""

from __future__ import annotations

import os
import platform

import torch

from ..errors import UnsupportedModelError

TF32_OVERRIDE = "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"


def tf32_override_set() -> bool:
    return os.environ.get(TF32_OVERRIDE, "0").strip() not in ("", "0")


def pin_exact_fp32(device: torch.device, dtype: torch.dtype) -> None:
    """For an fp32 run on CUDA: TF32 off for matmuls and cuDNN; a forced cuBLAS override refused."""
    if device.type != "cuda" or dtype != torch.float32:
        return
    if tf32_override_set():
        raise UnsupportedModelError(
            f"{TF32_OVERRIDE} is set, which makes cuBLAS run fp32 matmuls as TF32 whatever torch asks: an fp32 bench "
            "would not be exact and its lossless check would blame the runner.",
            f"Unset {TF32_OVERRIDE} for an fp32 run, or bench in bfloat16 (`--dtype bfloat16`), whose lossless "
            "check reports the first divergence instead of demanding identical tokens.")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def runtime_environment(device: torch.device | str) -> dict:
    """Device, versions, TF32 state and the SDPA backends torch may choose from, for the bench report."""
    device = torch.device(device)
    env = {"device": str(device), "torch": torch.__version__, "python": platform.python_version(),
           "threads": torch.get_num_threads(), "float32_matmul_precision": torch.get_float32_matmul_precision(),
           TF32_OVERRIDE: os.environ.get(TF32_OVERRIDE)}
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        env |= {"device_name": torch.cuda.get_device_name(index),
                "capability": ".".join(map(str, torch.cuda.get_device_capability(index))),
                "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
                "tf32_matmul": torch.backends.cuda.matmul.allow_tf32, "tf32_cudnn": torch.backends.cudnn.allow_tf32,
                "sdpa_backends": [name for name, on in (
                    ("flash", torch.backends.cuda.flash_sdp_enabled()),
                    ("memory_efficient", torch.backends.cuda.mem_efficient_sdp_enabled()),
                    ("cudnn", getattr(torch.backends.cuda, "cudnn_sdp_enabled", lambda: False)()),
                    ("math", torch.backends.cuda.math_sdp_enabled())) if on]}
    else:
        env |= {"device_name": platform.processor() or platform.machine(), "sdpa_backends": ["cpu"]}
    return env
