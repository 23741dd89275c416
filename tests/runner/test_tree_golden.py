"""Our dynamic tree against the EAGLE reference's own (`topK_genrate`) on every golden set, fp32: the same nodes in
the same order (tokens, parents, mask, positions, retrieve paths exactly; scores and target logits at 1e-5), and the
same greedy verdict (best path, accept length, bonus token)."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from support.golden_sets import ALL_GOLDEN_SETS as ALL_SETS
from support.golden_sets import GOLDEN
from support.runner_fixtures import build_pair, read_golden_draft, read_target_dir

from eagle_convert.runner.heads import aux_layer_ids_for
from eagle_convert.runner.trees.shapes import dynamic_tree
from eagle_convert.runner.trees.tree import accept_greedy_tree, best_path_row
from eagle_convert.runner.trees.tree_draft import draft_tree
from eagle_convert.runner.trees.verify import commit_path, verify_tree


@pytest.fixture(scope="module", params=ALL_SETS)
def golden(request):
    root = GOLDEN / request.param
    config, target_tensors = read_target_dir(root / "target")
    spec, draft_tensors = read_golden_draft(root / "draft")
    target, head = build_pair(config, target_tensors, spec, draft_tensors,
                              aux_layer_ids=aux_layer_ids_for(spec, config["num_hidden_layers"]))
    return dict(target=target, head=head, inputs=load_file(root / "inputs.safetensors"),
                expected=load_file(root / "expected.safetensors"), tree=load_file(root / "tree.safetensors"))


def drafted(g):
    """Prefill the prompt, run the head's context pass, draft the reference's tree shape (24 tokens, depth 4, k 3)."""
    target, head, inputs, ref = g["target"], g["head"], g["inputs"], g["tree"]
    prompt = inputs["prompt_ids"]
    n = prompt.shape[1]
    out = target(prompt, range(n))
    root = out.logits[0, -1].argmax()
    assert int(root) == int(g["expected"]["target.root_id"])
    first = head(inputs["draft_input_ids"], head.target_feature(out), range(n), from_target=True,
                 last_logits_only=True)
    shape = dynamic_tree(int(ref["tree.depth"]), int(ref["tree.top_k"]), int(ref["tree.total_tokens"]) + 1)
    return draft_tree(head, first, root, n, shape), n


def test_dynamic_tree_equals_the_reference(golden):
    tree, _ = drafted(golden)
    ref = golden["tree"]
    assert tree.tokens.tolist() == ref["tree.node_ids"].tolist()
    assert tree.parents.tolist() == ref["tree.parents"].tolist()
    assert tree.depths.tolist() == ref["tree.position_ids"].tolist()
    assert torch.equal(tree.mask, ref["tree.attention_mask"])
    assert tree.paths.tolist() == ref["tree.retrieve_indices"].tolist()
    tokens = torch.cat([tree.tokens, torch.tensor([-1])])
    assert tokens[tree.paths].tolist() == ref["tree.candidates"].tolist()
    torch.testing.assert_close(tree.scores, ref["tree.scores"], atol=1e-5, rtol=1e-5)


def test_tree_verify_and_greedy_verdict_equal_the_reference(golden):
    tree, n = drafted(golden)
    ref = golden["tree"]
    checked = verify_tree(golden["target"], tree, n)
    torch.testing.assert_close(checked.logits[0], ref["tree.target_logits"], atol=1e-5, rtol=1e-5)
    argmax = checked.logits[0].argmax(-1)
    assert argmax.tolist() == ref["tree.target_argmax"].tolist()
    nodes, bonus = accept_greedy_tree(tree, argmax)
    assert len(nodes) - 1 == int(ref["tree.accept_length"])
    assert bonus == int(ref["tree.bonus_id"])
    assert best_path_row(tree, argmax) == int(ref["tree.best_candidate"])
    assert nodes == ref["tree.retrieve_indices"][int(ref["tree.best_candidate"]), : len(nodes)].tolist()


def test_commit_leaves_the_cache_as_a_fresh_prefill_of_the_accepted_sequence(golden):
    """After verify + commit, the target's KV at slots 0..n+a equals a plain causal prefill of prompt + root + the
    accepted nodes, on every layer (the -agree sets accept 2 and 3 nodes off the first path, so rows really move)."""
    target, inputs = golden["target"], golden["inputs"]
    tree, n = drafted(golden)
    checked = verify_tree(target, tree, n)
    nodes, _ = accept_greedy_tree(tree, checked.logits[0].argmax(-1))
    commit_path(target, nodes, n)
    end = n + len(nodes)
    compacted = [(layer.attention.cache.k[:, :, :end].clone(), layer.attention.cache.v[:, :, :end].clone())
                 for layer in target.layers]
    sequence = torch.cat([inputs["prompt_ids"][0], tree.tokens[nodes]]).view(1, -1)
    for layer in target.layers:  # forget everything, then prefill the accepted sequence plainly
        layer.attention.cache.k.zero_()
        layer.attention.cache.v.zero_()
    target(sequence, range(end))
    for (k, v), layer in zip(compacted, target.layers):
        torch.testing.assert_close(k, layer.attention.cache.k[:, :, :end], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(v, layer.attention.cache.v[:, :, :end], atol=1e-5, rtol=1e-5)
