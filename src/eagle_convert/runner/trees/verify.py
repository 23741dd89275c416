"""Verifying a draft tree in one target forward, and committing the accepted path to the target's cache.

The committed prefix occupies cache slots 0..L-1 (slot = position). The tree's T rows go to slots L..L+T-1 at
positions L + depth (siblings share a position), each seeing the whole prefix and, inside the tree, its ancestors and
itself. After acceptance the accepted path's rows move to slots L..L+a, where a plain sequence would have put them;
later slots are stale and are overwritten before any query can see them, as in the chain runner.
"""

from __future__ import annotations

import torch

from ..layers import TreeAttention
from ..model import TargetModel, TargetOutput
from .tree import DraftTree


def tree_attention(tree: DraftTree, prefix: int, device) -> tuple[torch.Tensor, TreeAttention]:
    """(positions [T], attention layout) of a tree placed after `prefix` committed tokens."""
    size = tree.size
    positions = (prefix + tree.depths).to(device)
    mask = torch.cat([torch.ones(size, prefix, dtype=torch.bool), tree.mask], dim=1).to(device)
    layout = TreeAttention(slots=prefix + torch.arange(size, device=device), mask=mask,
                           key_positions=torch.cat([torch.arange(prefix, device=device), positions]))
    return positions, layout


def verify_tree(target: TargetModel, tree: DraftTree, prefix: int) -> TargetOutput:
    """One target forward over root + nodes; logits[0, i] = the target's prediction after node i."""
    positions, layout = tree_attention(tree, prefix, target.device)
    return target(tree.tokens.view(1, -1).to(target.device), positions, tree_attention=layout)


def commit_path(target: TargetModel, nodes: list[int], prefix: int) -> None:
    """Move the KV of the accepted nodes (root first) from their tree slots to slots prefix..prefix+a, every layer."""
    if nodes == list(range(len(nodes))):
        return  # already in place (a chain-shaped path)
    sources = prefix + torch.tensor(nodes, device=target.device)
    for layer in target.layers:
        layer.attention.cache.move(sources, prefix)
