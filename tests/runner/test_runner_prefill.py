"""Chunked prefill and the attention layouts behind it: a prompt run in chunks gives the same logits as one pass,
and chain, tree and plain generation give the same tokens and rounds whatever the chunk; SDPA is handed no mask where
causality suffices (counted by patching SDPA)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from support.runner_fixtures import random_target_weights, strict_getter, tiny_config
from support.sampling import partially_agreeing_pair, prompt

from eagle_convert.kinds import EAGLE1
from eagle_convert.runner import masks
from eagle_convert.runner.model import DEFAULT_PREFILL_CHUNK, TargetModel
from eagle_convert.runner.prefill import chunk_bounds, prefill
from eagle_convert.runner.speculate import plain_generate, speculative_generate
from eagle_convert.runner.trees.shapes import TreeOptions, resolve_tree
from eagle_convert.runner.trees.tree_speculate import tree_generate

TOL = dict(atol=2e-5, rtol=1e-5)


def test_chunk_bounds_cover_the_prompt_once():
    assert chunk_bounds(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert chunk_bounds(3, 1024) == [(0, 3)]
    with pytest.raises(ValueError):
        chunk_bounds(3, 0)
    assert 512 <= DEFAULT_PREFILL_CHUNK <= 2048


@pytest.mark.parametrize("model_type, extra", [("llama", {}), ("qwen2", dict(use_sliding_window=True,
                                                                              sliding_window=6, max_window_layers=1))])
def test_chunked_prefill_leaves_the_caches_and_last_logits_of_one_pass(model_type, extra):
    config = tiny_config(model_type, **extra)
    weights = random_target_weights(config, seed=2)
    ids = prompt(5, 40, config["vocab_size"])
    whole = TargetModel(config, strict_getter(weights), prefill_chunk=1024)
    chunked = TargetModel(config, strict_getter(weights), prefill_chunk=7)
    expected = whole(torch.tensor([ids]), range(40)).logits[0, -1]
    seen = []
    token, out, _ = prefill(chunked, None, ids, lambda logits: seen.append(logits) or logits.argmax(-1))
    torch.testing.assert_close(seen[0], expected, **TOL)
    assert int(token) == int(expected.argmax())
    for a, b in zip(whole.layers, chunked.layers):
        torch.testing.assert_close(a.attention.cache.k[:, :, :40], b.attention.cache.k[:, :, :40], **TOL)


@pytest.mark.parametrize("shape_name", ["chain", "dynamic", "mc_sim_7b_63"])
def test_generation_is_the_same_whatever_the_prefill_chunk(shape_name):
    ids = prompt(3, 61, 64)
    results = []
    for chunk in (1024, 16, 5):
        target, head = partially_agreeing_pair(seed=3)
        target.prefill_chunk = chunk
        shape = resolve_tree(TreeOptions(tree=shape_name), k=3, draft_kind=EAGLE1,
                             target_config={"architectures": ["LlamaForCausalLM"]})
        if shape.mode == "chain":
            result = speculative_generate(target, head, ids, k=3, max_new_tokens=40)
        else:
            result = tree_generate(target, head, ids, shape=shape, max_new_tokens=40)
        results.append((result.tokens, result.accepted_per_round, plain_generate(target, ids, max_new_tokens=40)))
    assert results[0] == results[1] == results[2]
    assert results[0][0] == results[0][2]  # lossless
    assert sum(results[0][1]) > 0


def test_sdpa_gets_no_mask_where_causality_suffices(monkeypatch):
    """One-token decode: no mask; rows from position 0: is_causal; a chunk at an offset: a mask, built once per forward
    however many layers read it."""
    calls, built = [], []
    real_sdpa, real_boolean = F.scaled_dot_product_attention, masks.ForwardMasks._boolean

    def spy(q, k, v, attn_mask=None, is_causal=False, **kwargs):
        calls.append((attn_mask is not None, is_causal))
        return real_sdpa(q, k, v, attn_mask=attn_mask, is_causal=is_causal, **kwargs)

    def counting_boolean(self, window):
        built.append(window)
        return real_boolean(self, window)

    monkeypatch.setattr(masks.F, "scaled_dot_product_attention", spy)
    monkeypatch.setattr(masks.ForwardMasks, "_boolean", counting_boolean)
    config = tiny_config("llama", num_hidden_layers=3)
    model = TargetModel(config, strict_getter(random_target_weights(config, 0)))
    model(torch.arange(6).view(1, 6), range(6))
    assert calls == [(False, True)] * 3 and built == []
    calls.clear()
    model(torch.arange(1).view(1, 1), range(6, 7))
    assert calls == [(False, False)] * 3 and built == []
    calls.clear()
    model(torch.arange(4).view(1, 4), range(7, 11))
    assert calls == [(True, False)] * 3 and built == [None]  # one mask for the three layers
