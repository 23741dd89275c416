"""`bench --token-map FILE`: the hot target ids a map file holds, read and checked before any model loads, for an
EAGLE-1 head whose LM head the runner then restricts to them (runner/hot_tokens.py)."""

from __future__ import annotations

from pathlib import Path

import torch

from ..errors import CorruptCheckpointError, LayoutError
from ..runner.hot_tokens import check_hot_token_ids


def read_token_map(path: str | Path, vocab_size: int) -> torch.Tensor:
    """SGLang's --speculative-token-map file: a list or 1-D tensor of hot target ids saved with torch.save, read as
    SGLang reads it (torch.load(weights_only=True)) but checked: ids in [0, vocab_size), integers, no duplicates."""
    path = Path(path)
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # a pickle weights_only refuses, a truncated zip, not a torch file at all
        cause = next((line for line in str(error).splitlines() if line.strip()), type(error).__name__)[:200]
        raise CorruptCheckpointError(
            f"Cannot read the token map {path} with torch.load(weights_only=True), as SGLang reads it: "
            f"{cause.rstrip('.')}.",
            "Pass a file saved with torch.save(list_or_1d_tensor_of_ids, FILE) (no other pickled objects).") from error
    if isinstance(loaded, dict):
        raise LayoutError(f"The token map {path} holds a dict ({', '.join(map(str, list(loaded)[:4]))}), not a list "
                          "of hot target ids.",
                          "Write its ids as an SGLang token map first (`eagle-convert vocab-map convert`).")
    try:
        ids = loaded if isinstance(loaded, torch.Tensor) else torch.tensor(loaded)
    except (TypeError, ValueError, RuntimeError) as error:
        raise LayoutError(f"The token map {path} is not a list of token ids: {error}.",
                          "Pass a list or 1-D integer tensor of target token ids.") from error
    check_hot_token_ids(ids, vocab_size, what=f"The token map {path}")
    return ids.to(torch.int64)
