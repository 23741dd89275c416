"""One draft tree per verify round, as plain tensors: the object that both the draft side and the verify side read.

Node 0 is the root: the last token the target fixed (the previous round's bonus, or the prefill's token), not yet in
the target's cache. Every other node is a drafted token with a parent of smaller index, a depth (root 0) and a score
(cumulative draft log-prob; root 0). From `parents` alone follow the tree attention mask (a node sees itself and its
ancestors), the positions (prefix length + depth) and the retrieve paths (one root-to-leaf row per leaf, -1 padded),
laid out exactly as the EAGLE reference (`topK_genrate`) lays them out; see docs/design/tree-drafting.md,
"Rerank and layout".

Acceptance, given the target's logits at every node (the prediction for the token after it):
* greedy: on each path, the leading nodes whose token equals the target's argmax at their parent; the longest path
  wins (the first one on a tie), then the target's argmax after its last accepted node (the bonus);
* sampling: from the root, try the children in node order, accepting child x with probability p(x); on rejection zero
  p(x) and renormalise before the next child; when all children fail, sample the residual p. The EAGLE reference's
  rule for deterministic (top-k) drafts: each emitted token is distributed exactly as the target's own sample.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch


@dataclass(frozen=True)
class DraftTree:
    tokens: torch.Tensor  # [T] int64 target ids; tokens[0] = the root
    parents: torch.Tensor  # [T] int64; -1 for the root, else a smaller index
    scores: torch.Tensor  # [T] float32 cumulative draft log-prob; 0 for the root

    @property
    def size(self) -> int:
        """T = root + drafted nodes: the target's verify batch."""
        return len(self.tokens)

    @cached_property
    def depths(self) -> torch.Tensor:
        return self.mask.sum(1) - 1

    @cached_property
    def mask(self) -> torch.Tensor:
        """[T, T] bool: mask[i, j] iff j is i or an ancestor of i (built row by row from the parent's row)."""
        return ancestor_mask(self.parents.tolist())

    @cached_property
    def paths(self) -> torch.Tensor:
        """[P, D + 1] int64: per leaf (in node order) the node indices root to leaf, padded with -1."""
        return retrieve_paths(self.parents.tolist(), self.depths.tolist())

    @cached_property
    def children(self) -> list[list[int]]:
        """Per node, its children in node order (= rank order among siblings)."""
        kids: list[list[int]] = [[] for _ in range(self.size)]
        for node, parent in enumerate(self.parents.tolist()[1:], start=1):
            kids[parent].append(node)
        return kids


def ancestor_mask(parents: list[int]) -> torch.Tensor:
    size = len(parents)
    mask = torch.eye(size, dtype=torch.bool)
    mask[:, 0] = True
    for node in range(1, size):
        if not 0 <= parents[node] < node:
            raise ValueError(f"node {node} has parent {parents[node]}: parents must come before their children")
        mask[node] |= mask[parents[node]]
    return mask


def retrieve_paths(parents: list[int], depths: list[int]) -> torch.Tensor:
    is_parent = set(parents[1:])
    leaves = [node for node in range(len(parents)) if node not in is_parent]
    width = max(depths) + 1
    paths = torch.full((len(leaves), width), -1, dtype=torch.int64)
    for row, leaf in enumerate(leaves):
        node = leaf
        for level in range(depths[leaf], -1, -1):
            paths[row, level] = node
            node = parents[node]
    return paths


def select_top_nodes(root: torch.Tensor, tokens: torch.Tensor, parents: torch.Tensor, scores: torch.Tensor,
                     n: int) -> DraftTree:
    """EAGLE-2's global rerank: the n best-scoring candidates, kept in candidate order behind the root.
    Candidates are flat tensors in creation order (a parent is always created before its children); `parents` holds
    each one's parent candidate index, -1 for the root's children. A child never outscores its parent (log-probs are
    <= 0), and a stable sort puts the parent first on an exact tie, so the selection is always ancestor-closed."""
    if not 1 <= n <= len(tokens):
        raise ValueError(f"cannot keep {n} of {len(tokens)} candidates")
    order = torch.sort(scores, descending=True, stable=True).indices[:n]
    chosen = torch.sort(order).values
    node_of = torch.full((len(tokens) + 1,), -1, dtype=torch.int64)  # candidate index + 1 -> node index
    node_of[0] = 0  # parent -1 (the root) -> node 0
    node_of[chosen + 1] = torch.arange(1, n + 1)
    node_parents = node_of[parents[chosen] + 1]
    if bool((node_parents < 0).any()):
        raise AssertionError("tree selection is not ancestor-closed")  # impossible by the argument above
    return DraftTree(tokens=torch.cat([root.view(1).cpu(), tokens[chosen]]),
                     parents=torch.cat([torch.tensor([-1]), node_parents]),
                     scores=torch.cat([torch.zeros(1), scores[chosen].float()]))


def accept_greedy_tree(tree: DraftTree, target_argmax: torch.Tensor) -> tuple[list[int], int]:
    """(accepted node indices root first, bonus token). target_argmax [T]: the target's argmax at each node."""
    paths = tree.paths
    argmax = target_argmax.cpu()
    tokens = torch.cat([tree.tokens, torch.tensor([-1])])  # a -1 index reads token -1, which never matches
    candidates = tokens[paths]  # [P, D+1]
    predicted = argmax[paths[:, :-1].clamp_min(0)]  # the target's choice after each path position
    matches = (candidates[:, 1:] == predicted) & (paths[:, 1:] >= 0)
    lengths = matches.long().cumprod(1).sum(1)
    best = int(lengths.argmax())  # first row of the longest
    accepted = int(lengths[best])
    nodes = paths[best, : accepted + 1].tolist()
    return nodes, int(argmax[nodes[-1]])


def best_path_row(tree: DraftTree, target_argmax: torch.Tensor) -> int:
    """The retrieve-path row greedy acceptance picks (the reference's `best_candidate`)."""
    nodes, _ = accept_greedy_tree(tree, target_argmax)
    rows = (tree.paths[:, : len(nodes)] == torch.tensor(nodes)).all(1)
    return int(rows.long().argmax())


def accept_sampled_tree(tree: DraftTree, target_probs: torch.Tensor,
                        generator: torch.Generator | None = None) -> tuple[list[int], int]:
    """Multi-candidate acceptance for deterministic drafts. target_probs [T, V]: the target's (tempered)
    distribution at each node. Returns (accepted node indices root first, next token)."""
    device = generator.device if generator is not None else torch.device("cpu")
    probs = target_probs.float().to(device)
    tokens = tree.tokens.tolist()
    node, nodes = 0, [0]
    while True:
        p, accepted = probs[node].clone(), None
        for child in tree.children[node]:
            x = tokens[child]
            if float(torch.rand((), generator=generator, device=device)) < float(p[x]):
                accepted = child
                break
            p[x] = 0.0
            p /= p.sum()
        if accepted is None:  # no child, or every child rejected: the next token comes from what is left of p
            if not bool(torch.isfinite(p).all()):  # all mass sat on rejected children: impossible but for rounding
                p = probs[node]
            return nodes, int(torch.multinomial(p, 1, generator=generator))
        node = accepted
        nodes.append(node)
