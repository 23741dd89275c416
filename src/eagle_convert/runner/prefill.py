"""The prompt's pass through the target (and the head's first context) in chunks, so that a long prompt's activations
never exist all at once: peak memory grows with the chunk, not with the prompt (the KV caches still hold every
position). A chunk after the first attends to the cached keys before it through a boolean mask (runner/masks.py).

The head's row i pairs the target's feature at position i with the token at position i+1, so each chunk's head rows
are known once the target has run that chunk, except the last row of the last chunk, which needs the token the
prefill itself chooses: the head runs chunk by chunk right behind the target.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from .heads import DraftOutput, HeadModule
from .model import DEFAULT_PREFILL_CHUNK, TargetModel, TargetOutput

__all__ = ["DEFAULT_PREFILL_CHUNK", "chunk_bounds", "prefill"]


def chunk_bounds(length: int, chunk: int) -> list[tuple[int, int]]:
    if chunk < 1:
        raise ValueError(f"prefill chunk must be >= 1, got {chunk}")
    return [(start, min(start + chunk, length)) for start in range(0, length, chunk)]


def prefill(target: TargetModel, head: HeadModule | None, prompt_ids: Sequence[int],
            choose: Callable[[torch.Tensor], torch.Tensor]) -> tuple[torch.Tensor, TargetOutput, DraftOutput | None]:
    """Run the prompt through the target (and the head behind it) in chunks of `target.prefill_chunk` rows.
    `choose(logits [V])` picks the first generated token from the last row. Returns (that token as a 0-d tensor,
    the last chunk's target output, the head's output for its last chunk: the first draft's start, or None)."""
    prompt = torch.tensor([prompt_ids], dtype=torch.int64, device=target.device)
    length = prompt.shape[1]
    bounds = chunk_bounds(length, target.prefill_chunk)
    head_out = None
    for start, stop in bounds:
        out = target(prompt[:, start:stop], range(start, stop), last_logits_only=True)
        if stop == length:
            last = choose(out.logits[0, -1])
            next_tokens = torch.cat([prompt[0, start + 1:], last.view(1)])
        else:
            next_tokens = prompt[0, start + 1:stop + 1]
        if head is not None:
            head_out = head(next_tokens.view(1, -1), head.target_feature(out), range(start, stop), from_target=True,
                            last_logits_only=True)
    return last, out, head_out
