"""Properties of tree drafting: greedy tree output equals plain greedy decoding; a chain-shaped tree gives the chain
runner's rounds exactly; a head that agrees with its target reaches every level; the head's tree rows see exactly
their ancestors; multi-candidate sampling emits the target's distribution."""

from __future__ import annotations

import pytest
import torch
from support.runner_fixtures import agreeing_eagle1_head, build_pair, memoryless_target
from support.sampling import (
    CHI2_999,
    chi_square,
    exact_marginals,
    partially_agreeing_pair,
    prompt,
    random_pair,
    sampling_pair,
)

from eagle_convert.kinds import EAGLE1, EAGLE3
from eagle_convert.runner.speculate import plain_generate, speculative_generate
from eagle_convert.runner.trees.shapes import MC_SIM_7B_63, dynamic_tree, static_tree
from eagle_convert.runner.trees.tree import DraftTree, accept_sampled_tree
from eagle_convert.runner.trees.tree_draft import draft_tree
from eagle_convert.runner.trees.tree_speculate import tree_generate

SHAPES = {
    "dynamic-3-4-16": dynamic_tree(3, 4, 16),
    "dynamic-2-3-9": dynamic_tree(2, 3, 9),
    "dynamic-0-5-6": dynamic_tree(0, 5, 6),  # one level: the root's top 5
    "mc_sim_7b_63": static_tree(MC_SIM_7B_63, "mc_sim_7b_63"),
    "static-uneven": static_tree([[0], [2], [0, 1], [2, 0], [2, 0, 3]], "test"),
}


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("kind", [EAGLE1, EAGLE3])
def test_random_head_tree_output_equals_plain_greedy(shape, kind):
    seed = len(shape) + (kind == EAGLE3)
    target, head = random_pair(seed, kind, model_type=("llama", "qwen2", "qwen3", "mistral")[seed % 4])
    ids = prompt(seed, 5, 80)
    expected = plain_generate(target, ids, max_new_tokens=24)
    result = tree_generate(target, head, ids, shape=SHAPES[shape], max_new_tokens=24)
    assert result.tokens == expected
    eos = expected[len(expected) // 2]
    stopped = tree_generate(target, head, ids, shape=SHAPES[shape], max_new_tokens=24, eos_ids=[eos])
    assert stopped.tokens == expected[: expected.index(eos) + 1]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("seed", range(2))
def test_partially_agreeing_head_tree_is_lossless_at_mixed_depths(shape, seed):
    target, head = partially_agreeing_pair(seed)
    ids = prompt(seed, 5, 64)
    result = tree_generate(target, head, ids, shape=SHAPES[shape], max_new_tokens=60)
    assert result.tokens == plain_generate(target, ids, max_new_tokens=60)
    assert max(result.accepted_per_round) >= 1
    assert result.nodes_per_round == [SHAPES[shape].nodes] * len(result.accepted_per_round)
    emitted = 1 + sum(a + 1 for a in result.accepted_per_round)
    assert emitted - (SHAPES[shape].levels + 1) < len(result.tokens) <= emitted


@pytest.mark.parametrize("k", [1, 3, 5])
def test_chain_shaped_trees_give_the_chain_runners_rounds(k):
    """A static chain [[0], [0,0], ...] and a dynamic tree of top-k 1 are the chain: same tokens, same rounds."""
    target, head = partially_agreeing_pair(k)
    ids = prompt(k, 6, 64)
    chain = speculative_generate(target, head, ids, k=k, max_new_tokens=50)
    assert len(set(chain.accepted_per_round)) >= 2
    for shape in (static_tree([[0] * d for d in range(1, k + 1)], "chain"), dynamic_tree(k - 1, 1, k + 1)):
        tree = tree_generate(target, head, ids, shape=shape, max_new_tokens=50)
        assert tree.tokens == chain.tokens
        assert tree.accepted_per_round == chain.accepted_per_round
        assert tree.drafted_per_round == [d[:a] for d, a in zip(chain.drafted_per_round, chain.accepted_per_round)]


@pytest.mark.parametrize("shape", ["mc_sim_7b_63", "static-uneven", "top-1 dynamic"])
def test_always_accepted_head_reaches_every_level(shape):
    """With a head that always agrees, a tree holding the all-rank-0 path accepts it whole every round: levels + 1
    tokens per round."""
    tree_shape = dynamic_tree(4, 1, 6) if shape == "top-1 dynamic" else SHAPES[shape]
    config, weights = memoryless_target(seed=3)
    spec, head_weights = agreeing_eagle1_head(config, weights, seed=3)
    target, head = build_pair(config, weights, spec, head_weights)
    ids = prompt(3, 7, config["vocab_size"])
    result = tree_generate(target, head, ids, shape=tree_shape, max_new_tokens=49)
    rounds = len(result.accepted_per_round)
    levels = 1 if shape == "static-uneven" else tree_shape.levels  # static-uneven's rank-0 path is one deep
    assert rounds > 3 and result.accepted_per_round == [levels] * rounds
    assert result.tokens == plain_generate(target, ids, max_new_tokens=49)


def test_head_tree_rows_equal_each_nodes_own_chain():
    """Every node's draft score equals the head's log-probs along its path computed as a plain chain of that path
    (fresh head, causal rows): so a tree row sees its ancestors and nothing else, at the right positions."""
    target, head = random_pair(5, EAGLE3)
    ids = prompt(5, 6, 80)
    n = len(ids)
    out = target(torch.tensor([ids]), range(n))
    root = out.logits[0, -1].argmax()
    context = torch.tensor([ids[1:] + [int(root)]])
    first = head(context, head.target_feature(out), range(n), from_target=True, last_logits_only=True)
    tree = draft_tree(head, first, root, n, SHAPES["dynamic-3-4-16"])
    assert tree.depths.max() == 4
    to_draft = {int(t): i for i, t in enumerate(head.draft_to_target.tolist())}
    for node in range(1, tree.size):
        path = tree.paths[(tree.paths == node).any(1)][0]
        path = path[: int((path == node).nonzero()) + 1].tolist()
        _, fresh = random_pair(5, EAGLE3)
        step = fresh(context, fresh.target_feature(out), range(n), from_target=True, last_logits_only=True)
        score = 0.0
        for depth, child in enumerate(path[1:], start=1):
            logp = torch.log_softmax(step.logits[0, -1].float(), -1)
            score += float(logp[to_draft[int(tree.tokens[child])]])
            step = fresh(tree.tokens[child].view(1, 1), step.hidden[:, -1:], range(n - 1 + depth, n + depth),
                         from_target=False)
        assert abs(score - float(tree.scores[node])) < 1e-4, node


def test_accept_sampled_tree_emits_the_target_distribution():
    """A root with 3 children (one of them with 2 children of its own): the first emitted token follows p[root],
    and the token after an accepted child follows p[child], whatever the drafted tokens are."""
    p = torch.tensor([[0.05, 0.40, 0.25, 0.20, 0.10], [0.3, 0.1, 0.2, 0.2, 0.2], [0.1, 0.2, 0.3, 0.25, 0.15],
                      [0.2, 0.2, 0.2, 0.2, 0.2], [0.6, 0.1, 0.1, 0.1, 0.1], [0.1, 0.1, 0.1, 0.1, 0.6]])
    tree = DraftTree(tokens=torch.tensor([0, 1, 4, 2, 0, 3]), parents=torch.tensor([-1, 0, 0, 0, 1, 1]),
                     scores=torch.zeros(6))
    g = torch.Generator().manual_seed(0)
    first, after_node1 = torch.zeros(5), torch.zeros(5)
    for _ in range(5000):
        nodes, next_token = accept_sampled_tree(tree, p, g)
        emitted = tree.tokens[nodes[1:]].tolist() + [next_token]
        first[emitted[0]] += 1
        if len(nodes) > 1 and nodes[1] == 1:
            after_node1[emitted[1]] += 1
    assert chi_square(first, p[0]) < CHI2_999[4]
    assert after_node1.sum() > 900 and chi_square(after_node1, p[1]) < CHI2_999[4]


@pytest.mark.parametrize("shape", ["dynamic-2-3-9", "static-uneven"])
def test_tree_sampling_matches_the_target_distribution(shape):
    """End to end at temperature 1.25 on an 8-token vocabulary: marginals of generated tokens 2..3 (accepted nodes,
    residual samples and bonus tokens) against exact target probabilities."""
    vocab, temperature, runs = 8, 1.25, 300
    tree_shape = SHAPES[shape] if shape != "static-uneven" else static_tree([[0], [2], [0, 1], [2, 0]], "test")
    target, head = sampling_pair(vocab)
    ids = [1, 5, 2]
    exact = exact_marginals(target, ids, temperature, 2, vocab)
    g = torch.Generator().manual_seed(11)
    counts = torch.zeros(2, vocab)
    accepted = []
    for _ in range(runs):
        result = tree_generate(target, head, ids, shape=tree_shape, max_new_tokens=3, temperature=temperature,
                               generator=g)
        accepted += result.accepted_per_round
        for position in range(2):
            counts[position, result.tokens[position + 1]] += 1
    assert 0 < sum(accepted) / len(accepted) < tree_shape.levels  # both accept and reject paths are exercised
    for position in range(2):
        assert chi_square(counts[position], exact[position]) < CHI2_999[7], (position, counts, exact)
