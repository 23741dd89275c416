"""Drafting a tree with the head's own KV cache, through the same head forward that chains use.

Before a round the head's cache holds its committed rows at slots 0..P-1 (P = the root's position; row P-1 pairs the
last target feature with the root token, and its output `first` predicts the root's children). Expansion rows go to
slots P, P+1, ...: each row is a node that gets children, fed as (node token, the head's output hidden at its parent)
at draft position P-1 + depth, and attends to every committed row, its expanded ancestors and itself. The next
round's context pass overwrites those slots, so expansion KV is dropped without any copy
(docs/design/tree-drafting.md, "The head's attention over the tree").

* dynamic (EAGLE-2/3, `topK_genrate`): the root's top-k are level 1; each of `depth` forwards expands the k best
  nodes of the last level (by cumulative log-prob), recording all k² children; then the global top-(T-1) rerank;
* static: every node with children is expanded once, level by level; a node is rank r of its parent's top-K.
Scores are cumulative log-probs of the head's untempered distribution (over the draft vocab for EAGLE-3; tokens are
mapped to target ids with d2t as in the chain).
"""

from __future__ import annotations

import torch

from ..heads import DraftOutput, HeadModule
from ..layers import TreeAttention
from .shapes import TreeShape
from .tree import DraftTree, select_top_nodes


class TreeExpansion:
    """The expansion rows of one round: where each goes in the head's cache and which rows it may see."""

    def __init__(self, head: HeadModule, committed: int):
        self.head, self.committed = head, committed
        self.device = head.device
        self.ancestors = torch.zeros(0, 0, dtype=torch.bool, device=self.device)  # [rows, rows]: ancestor or self
        self.positions = torch.zeros(0, dtype=torch.int64, device=self.device)

    def forward(self, tokens: torch.Tensor, hidden: torch.Tensor, parent_rows: torch.Tensor | None,
                depth: int) -> DraftOutput:
        """tokens [n] (target ids) at `depth`, hidden [1, n, H] = the head's output at each one's parent;
        parent_rows [n] = each parent's expansion row, or None when the parents are the root (not an expansion row)."""
        n, start = len(tokens), len(self.positions)
        rows = torch.zeros(n, start + n, dtype=torch.bool, device=self.device)
        if parent_rows is not None:
            rows[:, :start] = self.ancestors[parent_rows]
        rows[:, start:] = torch.eye(n, dtype=torch.bool, device=self.device)
        grown = torch.zeros(start + n, start + n, dtype=torch.bool, device=self.device)
        grown[:start, :start] = self.ancestors
        grown[start:] = rows
        self.ancestors = grown
        positions = torch.full((n,), self.committed - 1 + depth, dtype=torch.int64, device=self.device)
        self.positions = torch.cat([self.positions, positions])
        committed = torch.ones(n, self.committed, dtype=torch.bool, device=self.device)
        tree = TreeAttention(
            slots=self.committed + start + torch.arange(n, device=self.device),
            mask=torch.cat([committed, rows], dim=1),
            key_positions=torch.cat([torch.arange(self.committed, device=self.device), self.positions]))
        return self.head(tokens.view(1, n), hidden, positions, from_target=False, tree_attention=tree)


def _top(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs, head ids) of the k best, best first, per row."""
    top = torch.log_softmax(logits.float(), dim=-1).topk(k, dim=-1)
    return top.values, top.indices


def draft_dynamic(head: HeadModule, first: DraftOutput, root: torch.Tensor, position: int,
                  shape: TreeShape) -> DraftTree:
    k, device = shape.top_k, head.device
    expansion = TreeExpansion(head, position)
    scores, ids = _top(first.logits[0, -1], k)
    tokens = head.to_target_ids(ids)
    cand_tokens, cand_scores = [tokens], [scores]
    cand_parents = [torch.full((k,), -1, dtype=torch.int64, device=device)]
    beam = torch.arange(k, device=device)  # candidate index of each beam node
    beam_hidden = first.hidden[:, -1:].expand(1, k, first.hidden.shape[-1])
    parent_rows, created = None, k
    for level in range(shape.depth):
        out = expansion.forward(tokens, beam_hidden, parent_rows, depth=level + 1)
        child_scores, child_ids = _top(out.logits[0], k)  # [k, k]
        cumulative = child_scores + scores[:, None]
        child_tokens = head.to_target_ids(child_ids).flatten()
        cand_tokens.append(child_tokens)
        cand_scores.append(cumulative.flatten())
        cand_parents.append(beam.repeat_interleave(k))
        scores, best = cumulative.flatten().topk(k)
        rows = best // k  # the beam row each new beam node's parent is
        parent_rows = len(expansion.positions) - k + rows
        beam, beam_hidden, tokens = created + best, out.hidden[:, rows], child_tokens[best]
        created += k * k
    return select_top_nodes(root, torch.cat(cand_tokens).cpu(), torch.cat(cand_parents).cpu(),
                            torch.cat(cand_scores).cpu(), shape.tokens - 1)


def draft_static(head: HeadModule, first: DraftOutput, root: torch.Tensor, position: int,
                 shape: TreeShape) -> DraftTree:
    choices = shape.choices
    index = {c: i + 1 for i, c in enumerate(choices)}  # node index (root = 0)
    parents = [-1] + [index.get(c[:-1], 0) for c in choices]
    widths = [0] * (len(choices) + 1)  # per node: 1 + the largest rank among its children
    children: list[list[int]] = [[] for _ in range(len(choices) + 1)]
    for node, c in enumerate(choices, start=1):
        widths[parents[node]] = max(widths[parents[node]], c[-1] + 1)
        children[parents[node]].append(node)
    tokens = [int(root)] + [0] * len(choices)
    scores = [0.0] * (len(choices) + 1)
    expansion = TreeExpansion(head, position)
    row_of: dict[int, int] = {}  # expanded node -> its expansion row
    frontier, outputs = [0], first  # nodes whose top-K is read from `outputs` rows ...
    frontier_rows = [first.logits.shape[1] - 1]  # ... at these rows
    depth = 0
    while frontier:
        children_expanded = []
        for node, row in zip(frontier, frontier_rows):
            logp, ids = _top(outputs.logits[0, row], widths[node])
            target_ids = head.to_target_ids(ids).tolist()
            for child in children[node]:
                rank = choices[child - 1][-1]
                tokens[child], scores[child] = target_ids[rank], scores[node] + float(logp[rank])
                if widths[child]:
                    children_expanded.append(child)
        if not children_expanded:
            break
        depth += 1
        source_rows = [frontier_rows[frontier.index(parents[c])] for c in children_expanded]
        hidden = outputs.hidden[:, source_rows]  # [1, n, H]: the output at each expanded node's parent
        parent_rows = None if depth == 1 else torch.tensor([row_of[parents[c]] for c in children_expanded],
                                                          device=head.device)
        start = len(expansion.positions)
        outputs = expansion.forward(torch.tensor([tokens[c] for c in children_expanded], device=head.device),
                                    hidden, parent_rows, depth)
        row_of.update({c: start + j for j, c in enumerate(children_expanded)})
        frontier, frontier_rows = children_expanded, list(range(len(children_expanded)))
    return DraftTree(tokens=torch.tensor(tokens), parents=torch.tensor(parents),
                     scores=torch.tensor(scores, dtype=torch.float32))


def draft_tree(head: HeadModule, first: DraftOutput, root: torch.Tensor, position: int, shape: TreeShape) -> DraftTree:
    """The round's tree. `first` is the head's output whose last row sits at position - 1 (it predicts the root's
    children); `root` the root token, at target position `position`."""
    if shape.mode == "dynamic":
        return draft_dynamic(head, first, root, position, shape)
    if shape.mode == "static":
        return draft_static(head, first, root, position, shape)
    raise ValueError(f"draft_tree drafts dynamic and static trees, not {shape.mode!r}")
