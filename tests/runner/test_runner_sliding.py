"""Sliding windows at long context: the target's windowed layers against transformers (Mistral: every layer; Qwen2:
per layer_types) through chunked prefill, verify chunks and one-token decodes, where the window cuts into keys the
masks must hide; and a draft head with its own window (layer_types / sliding_window in its config) that attends only
to the window, in one pass, in pieces and inside chain and tree generation."""

from __future__ import annotations

import pytest
import torch
from support.hf_reference import hf_model
from support.runner_fixtures import (
    build_pair,
    draft_spec_for,
    random_head_weights,
    random_target_weights,
    strict_getter,
    tiny_config,
)
from support.sampling import prompt

from eagle_convert.kinds import EAGLE1, EAGLE3
from eagle_convert.runner.model import TargetModel, draft_sliding_windows
from eagle_convert.runner.speculate import plain_generate, speculative_generate
from eagle_convert.runner.trees.shapes import TreeOptions, resolve_tree
from eagle_convert.runner.trees.tree_speculate import tree_generate

TOL = dict(atol=2e-5, rtol=1e-5)
WINDOWED_TARGETS = {
    "mistral": tiny_config("mistral", sliding_window=6),
    "qwen2-layer-types": tiny_config("qwen2", use_sliding_window=True, sliding_window=5,
                                     layer_types=["full_attention", "sliding_attention"]),
}


@pytest.mark.parametrize("name", WINDOWED_TARGETS)
def test_windowed_target_in_chunks_and_single_steps_equals_transformers(name):
    config = WINDOWED_TARGETS[name]
    weights = random_target_weights(config, seed=4)
    ids = torch.tensor([prompt(8, 44, config["vocab_size"])])
    with torch.no_grad():
        expected = hf_model(config, weights)(ids).logits
    ours = TargetModel(config, strict_getter(weights), prefill_chunk=9)
    pieces = [ours(ids[:, a:b], range(a, b)).logits for a, b in ((0, 9), (9, 18), (18, 27), (27, 36))]
    pieces += [ours(ids[:, i:i + 1], range(i, i + 1)).logits for i in range(36, 40)]  # decode, window cutting
    pieces.append(ours(ids[:, 40:], range(40, 44)).logits)  # a verify-sized chunk
    torch.testing.assert_close(torch.cat(pieces, 1), expected, **TOL)


@pytest.mark.parametrize("config, windows", [
    ({"sliding_window": 8, "layer_types": ["sliding_attention", "full_attention"]}, (8, None)),
    ({"model_type": "llama", "sliding_window": 8, "layer_types": ["sliding_attention"] * 2}, (8, 8)),
    ({"model_type": "mistral", "sliding_window": 8}, (8, 8)),
    ({"model_type": "qwen2", "sliding_window": 8, "use_sliding_window": False,
      "layer_types": ["sliding_attention"] * 2}, (None, None)),  # Qwen2's nominal window, switched off
    ({"model_type": "llama", "sliding_window": 8}, (None, None)),  # Llama without layer_types: no window
    ({"model_type": "qwen2", "sliding_window": None}, (None, None)),
])
def test_draft_windows_are_read_from_its_own_config(config, windows):
    assert draft_sliding_windows(config, 2) == windows


def windowed_head(kind: str, window: int | None, seed: int = 5):
    config = tiny_config("llama", num_hidden_layers=3)
    target_weights = random_target_weights(config, seed)
    extra = {} if window is None else {"sliding_window": window, "layer_types": ["sliding_attention"]}
    overrides = dict(aux_layer_ids=(0, 1, 2)) if kind == EAGLE3 else {}
    spec = draft_spec_for(config, kind, extra=extra, **overrides)
    return build_pair(config, target_weights, spec, random_head_weights(spec, seed + 1),
                      aux_layer_ids=overrides.get("aux_layer_ids", ()))


@pytest.mark.parametrize("kind", [EAGLE1, EAGLE3])
def test_a_windowed_head_sees_only_its_window(kind):
    """Changing the features of rows outside the last row's window leaves its logits alone; without the window the
    same change moves them (negative control). In pieces (a chunk, then single rows), the same logits as one pass."""
    rows, window = 20, 4
    results = {}
    for w in (window, None):
        target, head = windowed_head(kind, w)
        feature_width = head.fc.shape[1] - (head.spec.hidden_size if kind == EAGLE1 else 0)
        g = torch.Generator().manual_seed(9)
        tokens = torch.randint(0, head.spec.vocab_size, (1, rows), generator=g)
        features = torch.randn(1, rows, feature_width, generator=g)
        changed = features.clone()
        changed[:, : rows - window] += torch.randn(1, rows - window, feature_width, generator=g)
        first = head(tokens, features, range(rows), from_target=True).logits
        second = head(tokens, changed, range(rows), from_target=True).logits
        results[w] = (second[0, -1] - first[0, -1]).abs().max()
        # the same rows in pieces: a chunk at an offset and single rows, where the window cuts into the keys
        head(tokens[:, :12], features[:, :12], range(12), from_target=True)
        pieces = [head(tokens[:, i:i + 1], features[:, i:i + 1], range(i, i + 1), from_target=True).logits
                  for i in range(12, rows)]
        torch.testing.assert_close(torch.cat(pieces, 1), first[:, 12:], **TOL)
    assert results[window] == 0
    assert results[None] > 1e-3


@pytest.mark.parametrize("shape_name", ["chain", "dynamic", "mc_sim_7b_63"])
def test_generation_with_a_windowed_head_stays_lossless(shape_name):
    target, head = windowed_head(EAGLE1, 3)
    ids = prompt(6, 30, target.config.vocab_size)
    shape = resolve_tree(TreeOptions(tree=shape_name), k=3, draft_kind=EAGLE1,
                         target_config={"architectures": ["LlamaForCausalLM"]})
    if shape.mode == "chain":
        result = speculative_generate(target, head, ids, k=3, max_new_tokens=24)
    else:
        result = tree_generate(target, head, ids, shape=shape, max_new_tokens=24)
    assert result.tokens == plain_generate(target, ids, max_new_tokens=24)
