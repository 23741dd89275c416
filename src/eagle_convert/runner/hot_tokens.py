"""Hot-token maps (FR-Spec) for heads that draft with the target's LM head (EAGLE-1/2): the head's LM head keeps only
the rows of the map's target ids, so a draft step multiplies by |map| rows instead of the whole vocabulary, and head
id i stands for target id hot_ids[i] (the head's `draft_to_target`, as an EAGLE-3 head's d2t does).

This is what SGLang does with `--speculative-token-map` (sglang PR#3822; `eagle_worker.py`: `head.data =
head.data[hot_token_id]` once at load, then `topk_index = hot_token_id[topk_index]` after every draft step): drafts
are drawn from a softmax over the hot rows only, and the verify stays the target's full forward, so the output is the
target's own (lossless); only acceptance can drop, when the target's next token is not in the map."""

from __future__ import annotations

import torch

from ..vocab.check import check_map, ids_facts, refuse_errors


def check_hot_token_ids(ids: torch.Tensor, vocab_size: int, what: str = "The token map") -> None:
    """Refuse what SGLang would load silently wrong, by the one map check (vocab/check.py) that `vocab-map check`,
    `bench --token-map` and `convert --token-map` apply: an empty map, a float or bool tensor (torch.tensor(...,
    int64) truncates floats; a bool `t2d` mask is not a list of ids), more than one dimension, ids outside the vocab,
    or an id twice (two head rows for one token: the draft distribution counts it twice)."""
    refuse_errors(check_map(ids_facts(what, ids, vocab_size)), what)


def restrict_lm_head(lm_head: torch.Tensor, hot_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(the LM head's rows of `hot_ids`, as its own contiguous copy; the ids as int64 on its device): done once when
    the head is built, so no draft step pays for the slice. The ids are checked (check_hot_token_ids) first."""
    check_hot_token_ids(hot_ids, lm_head.shape[0])
    ids = hot_ids.to(device=lm_head.device, dtype=torch.int64)
    return lm_head.index_select(0, ids).contiguous(), ids
