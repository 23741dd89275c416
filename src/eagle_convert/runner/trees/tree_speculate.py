"""Tree speculative decoding, batch 1: each round drafts one tree (tree_draft.py), verifies all its nodes in one
target forward (verify.py), accepts a root path (tree.py), commits its KV and extends the head.

Same alignment and head context as the chain loop (speculate.py): after a round that accepted nodes n_1..n_a and
emitted the next token t, the head gets a+1 rows pairing the target's features at root, n_1..n_a (gathered from the
verify output at those nodes) with n_1..n_a, t, at positions L..L+a. The head's expansion rows are never committed:
its context only ever holds the target's own features.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ..heads import HeadModule
from ..model import TargetModel
from ..prefill import prefill
from ..speculate import choose_token, emit_tokens, token_probs
from .shapes import TreeShape
from .tree import accept_greedy_tree, accept_sampled_tree
from .tree_draft import draft_tree
from .verify import commit_path, verify_tree


@dataclass
class TreeResult:
    tokens: list[int]  # generated tokens, prompt excluded; ends at the first EOS or at max_new_tokens
    k: int  # the tree's levels: the most drafts one round can accept
    accepted_per_round: list[int] = field(default_factory=list)
    nodes_per_round: list[int] = field(default_factory=list)  # drafted nodes verified (root excluded)
    # per round, sum of exp(score) over the nodes: the expected accepted length if the head were calibrated
    predicted_per_round: list[float] = field(default_factory=list)
    # Greedy only: per round the accepted path's drafted ids (what --reference-draft compares), no margins for trees.
    drafted_per_round: list[list[int]] = field(default_factory=list)
    margins_per_round: list[list[float]] = field(default_factory=list)


@torch.inference_mode()  # one mode for the whole generation: every cache update inside it
def tree_generate(target: TargetModel, head: HeadModule, prompt_ids: Sequence[int], *, shape: TreeShape,
                  max_new_tokens: int, temperature: float = 0.0, eos_ids: Sequence[int] = (),
                  generator: torch.Generator | None = None) -> TreeResult:
    if shape.mode not in ("dynamic", "static") or max_new_tokens < 1 or not prompt_ids:
        raise ValueError("need a dynamic or static tree, max_new_tokens >= 1 and a non-empty prompt")
    eos, device = set(eos_ids), target.device
    last, _, head_out = prefill(target, head, prompt_ids, lambda logits: choose_token(logits, temperature, generator))
    result = TreeResult(tokens=[], k=shape.levels)
    if emit_tokens(result.tokens, [int(last)], eos, max_new_tokens):
        return result
    position = len(prompt_ids)  # position of `last`, the root of the next tree
    while True:
        tree = draft_tree(head, head_out, last, position, shape)
        checked = verify_tree(target, tree, position)
        if temperature == 0:
            nodes, next_token = accept_greedy_tree(tree, checked.logits[0].argmax(-1))
        else:
            nodes, next_token = accept_sampled_tree(tree, token_probs(checked.logits[0], temperature), generator)
        accepted = len(nodes) - 1
        new = tree.tokens[nodes[1:]].tolist() + [next_token]
        result.accepted_per_round.append(accepted)
        result.nodes_per_round.append(tree.size - 1)
        result.predicted_per_round.append(float(tree.scores[1:].exp().sum()))
        if temperature == 0:
            result.drafted_per_round.append(new[:-1])
            result.margins_per_round.append([])
        if emit_tokens(result.tokens, new, eos, max_new_tokens):
            return result
        commit_path(target, nodes, position)
        new_ids = torch.tensor([new], dtype=torch.int64, device=device)
        features = head.target_feature(checked)[:, torch.tensor(nodes, device=device)]
        head_out = head(new_ids, features, range(position, position + accepted + 1), from_target=True,
                        last_logits_only=True)
        last = new_ids[0, -1]
        position += accepted + 1
