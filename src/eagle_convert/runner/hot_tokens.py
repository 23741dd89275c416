"""Hot-token maps (FR-Spec) for heads that draft with the target's LM head (EAGLE-1/2): the head's LM head keeps only
the rows of the map's target ids, so a draft step multiplies by |map| rows instead of the whole vocabulary, and head
id i stands for target id hot_ids[i] (the head's `draft_to_target`, as an EAGLE-3 head's d2t does).

This is what SGLang does with `--speculative-token-map` (sglang PR#3822; `eagle_worker.py`: `head.data =
head.data[hot_token_id]` once at load, then `topk_index = hot_token_id[topk_index]` after every draft step): drafts
are drawn from a softmax over the hot rows only, and the verify stays the target's full forward, so the output is the
target's own (lossless); only acceptance can drop, when the target's next token is not in the map."""

from __future__ import annotations

import torch

from ..errors import LayoutError, ShapeMismatchError


def check_hot_token_ids(ids: torch.Tensor, vocab_size: int, what: str = "The token map") -> None:
    """Refuse what SGLang would load silently wrong: a float or bool tensor (torch.tensor(..., int) truncates floats;
    a bool `t2d` mask is not a list of ids), more than one dimension, ids outside the vocab, or an id twice (two head
    rows for one token: the draft distribution counts it twice)."""
    if ids.dim() != 1 or ids.numel() == 0:  # first: an empty list loads as float32
        raise LayoutError(f"{what} has shape {list(ids.shape)}; a hot-token map is a non-empty 1-D list of ids.",
                          "Save the hot target ids as one list or 1-D tensor (torch.save(ids, 'map.pt')).")
    if ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
        raise LayoutError(
            f"{what} holds {str(ids.dtype).removeprefix('torch.')} values, not integer token ids.",
            "A hot-token map is a list or 1-D integer tensor of target token ids (SGLang's --speculative-token-map); "
            "a bool tensor is a t2d mask: convert it with `eagle-convert vocab-map convert`.")
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ShapeMismatchError(
            f"{what} holds token id {bad}, outside the target vocabulary [0, {vocab_size}).",
            "The map was built for another tokenizer or target: rebuild it for this target "
            "(`eagle-convert vocab-map build --target ...`).")
    unique = torch.unique(ids)
    if unique.numel() != ids.numel():
        counts = torch.bincount(ids.to(torch.int64) - low)
        twice = int(torch.nonzero(counts > 1)[0]) + low
        raise LayoutError(
            f"{what} lists token id {twice} more than once ({ids.numel() - unique.numel()} duplicate(s) in "
            f"{ids.numel()} ids): the head would hold two rows for one token.",
            "Remove the duplicates (each hot token once) and pass the map again.")


def restrict_lm_head(lm_head: torch.Tensor, hot_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(the LM head's rows of `hot_ids`, as its own contiguous copy; the ids as int64 on its device): done once when
    the head is built, so no draft step pays for the slice. The ids are checked (check_hot_token_ids) first."""
    check_hot_token_ids(hot_ids, lm_head.shape[0])
    ids = hot_ids.to(device=lm_head.device, dtype=torch.int64)
    return lm_head.index_select(0, ids).contiguous(), ids
