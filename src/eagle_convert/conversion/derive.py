"""Tensors computed rather than copied, and the numeric checks that go with them."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

ROW_CHUNK = 4096  # embedding rows per step: bounds the extra memory of the fold's error check


@dataclass(frozen=True)
class FoldReport:
    max_abs_error: float  # worst |fc_folded(e) - fc_original(e)| over every embedding row and output unit
    max_rel_error: float  # the same, relative to the largest |fc_original(e)| of that row
    rows_checked: int

    def to_dict(self) -> dict:
        return {"max_abs_error": self.max_abs_error, "max_rel_error": self.max_rel_error,
                "rows_checked": self.rows_checked}


def fold_fc_bias(embed: torch.Tensor, fc_weight: torch.Tensor, fc_bias: torch.Tensor,
                 out_dtype: torch.dtype) -> tuple[torch.Tensor, FoldReport]:
    """E' = E + W_e^-1 b, so that fc([E'(t) ; f]) = fc([E(t) ; f]) + b with no bias term (vLLM V1 has none).

    W_e is the embedding half of fc.weight ([H, H], columns [:H]); the solve runs in float64. The report measures,
    for every real embedding row, how far the folded fc output (with E' rounded to the output dtype) is from the
    original one; the feature half of fc is untouched, so this is the whole error."""
    hidden = embed.shape[1]
    w_e = fc_weight[:, :hidden].to(torch.float64)
    shift = torch.linalg.solve(w_e, fc_bias.to(torch.float64))  # W_e^-1 b
    folded = torch.empty(embed.shape, dtype=out_dtype)
    w32, b64 = w_e.to(torch.float32), fc_bias.to(torch.float64)
    max_abs = max_rel = 0.0
    for start in range(0, embed.shape[0], ROW_CHUNK):
        rows = embed[start:start + ROW_CHUNK].to(torch.float64)
        new_rows = (rows + shift).to(out_dtype)
        folded[start:start + ROW_CHUNK] = new_rows
        # error = W_e (E'_rounded - E) - b, computed on the small difference so fp32 is accurate enough.
        err = ((new_rows.to(torch.float64) - rows).to(torch.float32) @ w32.T).to(torch.float64) - b64
        ref = (rows.to(torch.float32) @ w32.T).to(torch.float64) + b64
        row_abs = err.abs().amax(dim=1)
        max_abs = worst(max_abs, float(row_abs.max()))
        max_rel = worst(max_rel, float((row_abs / ref.abs().amax(dim=1).clamp_min(1e-30)).max()))
    return folded, FoldReport(max_abs, max_rel, embed.shape[0])


def worst(a: float, b: float) -> float:
    """The larger error, NaN counting as the worst of all (Python's max(0.0, nan) is 0.0: a NaN fold would read as
    exact)."""
    return math.nan if math.isnan(a) or math.isnan(b) else max(a, b)


def sampled_rows(num_rows: int, count: int) -> list[int]:
    """`count` evenly spaced row ids (all rows when there are fewer), always including the first and last."""
    if num_rows <= count:
        return list(range(num_rows))
    return sorted({round(i * (num_rows - 1) / (count - 1)) for i in range(count)})
