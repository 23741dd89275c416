"""How much of what the target emits a draft vocabulary can propose at all (`vocab-map coverage`).

A head drafts only ids of its vocabulary (an EAGLE-3 head's d2t, an EAGLE-1 head under a hot-token map), so at a
position where the target's next token lies outside it the draft is rejected whatever the head learned: the share of
the target's tokens inside the vocabulary is a hard ceiling on the share of positions a draft can match (and so on
per-position acceptance, in expectation over positions). The stream measured is the target's own greedy output on
the user's prompts, the tokens a verify checks drafts against. Pure counting: no model here (entry.py runs the
target)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Coverage:
    """One draft vocabulary against one token stream."""
    label: str  # what the vocabulary is: "N=4096 (specforge)", "head d2t", a map file
    draft_vocab_size: int
    stream_tokens: int  # tokens in the stream (every occurrence)
    outside_tokens: int  # of those, occurrences of ids the vocabulary lacks
    stream_distinct: int  # distinct ids in the stream
    outside_distinct: int  # distinct ids in the stream the vocabulary lacks

    @property
    def outside_share(self) -> float | None:
        """Share of the target's tokens the draft cannot propose (None for an empty stream)."""
        return self.outside_tokens / self.stream_tokens if self.stream_tokens else None

    @property
    def ceiling(self) -> float | None:
        """1 - outside_share: the most a draft can match, position by position."""
        share = self.outside_share
        return None if share is None else 1.0 - share

    def to_dict(self) -> dict:
        return {"label": self.label, "draft_vocab_size": self.draft_vocab_size, "stream_tokens": self.stream_tokens,
                "outside_tokens": self.outside_tokens, "outside_share": self.outside_share,
                "acceptance_ceiling": self.ceiling, "stream_distinct": self.stream_distinct,
                "outside_distinct": self.outside_distinct}


def _ids(values: Iterable[int] | torch.Tensor) -> torch.Tensor:
    if isinstance(values, torch.Tensor):
        return values.reshape(-1).to(torch.int64)
    return torch.tensor(list(values), dtype=torch.int64)


def coverage(stream: Iterable[int] | torch.Tensor, draft_ids: Iterable[int] | torch.Tensor,
             label: str = "") -> Coverage:
    """Count the stream's tokens (every occurrence) whose id is not among `draft_ids` (the target ids the draft
    vocabulary holds, in any order; duplicates count once)."""
    stream_ids, vocab = _ids(stream), torch.unique(_ids(draft_ids))
    inside = torch.isin(stream_ids, vocab)
    distinct = torch.unique(stream_ids)
    return Coverage(label=label, draft_vocab_size=int(vocab.numel()), stream_tokens=int(stream_ids.numel()),
                    outside_tokens=int((~inside).sum()), stream_distinct=int(distinct.numel()),
                    outside_distinct=int((~torch.isin(distinct, vocab)).sum()))
