"""RoPE scaling in the runner against transformers (eager, fp32) on prompts LONGER than the original context: every
scaling type the runner implements, written as `rope_scaling` and as transformers 5's `rope_parameters`, with a
negative control (the same model with its scaling dropped must differ), and refusals by name."""

from __future__ import annotations

import pytest
import torch
from support.hf_reference import hf_model
from support.runner_fixtures import random_target_weights, strict_getter, tiny_config

from eagle_convert.errors import UnsupportedModelError
from eagle_convert.runner.model import TargetConfig, TargetModel

transformers = pytest.importorskip("transformers")

ORIGINAL = 32  # the "pretraining" context of every scaled config below
LONG = 80  # the prompt: well past ORIGINAL
TOL = dict(atol=2e-5, rtol=1e-5)  # as tests/runner/test_runner_transformers.py
# head_dim 16 (hidden 64 / 4 heads): enough frequencies that every scaling regime occurs
WIDE = dict(hidden_size=64, intermediate_size=64, max_position_embeddings=128)

SCALINGS = {
    "linear": {"rope_type": "linear", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 3.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": ORIGINAL},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": ORIGINAL},
    "yarn-mscale": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": ORIGINAL,
                    "mscale": 0.707, "mscale_all_dim": 1.0, "beta_fast": 16, "beta_slow": 2},
    "yarn-attention-factor-untruncated": {"rope_type": "yarn", "factor": 2.0, "attention_factor": 1.3,
                                          "original_max_position_embeddings": ORIGINAL, "truncate": False},
    "longrope": {"rope_type": "longrope", "original_max_position_embeddings": ORIGINAL,
                 "short_factor": [1.0, 1.1, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0],
                 "long_factor": [1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0]},
}


def scaled_config(name: str, as_parameters: bool = False) -> dict:
    scaling = SCALINGS[name]
    # dynamic scales past max_position_embeddings itself: give it the short limit
    sizes = WIDE | ({"max_position_embeddings": ORIGINAL} if scaling["rope_type"] == "dynamic" else {})
    if as_parameters:  # transformers 5's layout: theta inside the dict, no rope_scaling
        return tiny_config("llama", **sizes, rope_parameters={**scaling, "rope_theta": 10000.0})
    return tiny_config("llama", **sizes, rope_scaling=scaling)


def long_ids(config: dict, length: int = LONG) -> torch.Tensor:
    return torch.randint(0, config["vocab_size"], (1, length), generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("as_parameters", [False, True], ids=["rope_scaling", "rope_parameters"])
@pytest.mark.parametrize("name", SCALINGS)
def test_long_prompt_logits_equal_transformers(name, as_parameters):
    config = scaled_config(name, as_parameters)
    weights = random_target_weights(config, seed=7)
    ids = long_ids(config)
    with torch.no_grad():
        expected = hf_model(config, weights)(ids).logits
    ours = TargetModel(config, strict_getter(weights))(ids, range(LONG)).logits
    torch.testing.assert_close(ours, expected, **TOL)
    # negative control: the same weights with plain RoPE differ visibly past the original context
    plain = {k: v for k, v in config.items() if k not in ("rope_scaling", "rope_parameters")}
    dropped = TargetModel(plain, strict_getter(weights))(ids, range(LONG)).logits
    assert (dropped - expected).abs().max() > 1e-2


@pytest.mark.parametrize("name", ["dynamic", "longrope", "yarn"])
def test_cached_pieces_equal_transformers_with_its_cache(name):
    """A prefill inside the original context, then pieces that cross it: the length-dependent types (dynamic NTK,
    longrope) choose their frequencies per forward, and cached keys keep the rotation they were written with,
    exactly as transformers' own cache does."""
    config = scaled_config(name)
    weights = random_target_weights(config, seed=11)
    ids = long_ids(config, 48)
    model, ours = hf_model(config, weights), TargetModel(config, strict_getter(weights))
    cuts = [0, 20, 30, 36, 37, 38, 48]
    cache = transformers.DynamicCache(config=model.config)
    expected, got = [], []
    with torch.no_grad():
        for start, stop in zip(cuts, cuts[1:]):
            out = model(ids[:, start:stop], cache=cache, use_cache=True,
                        position_ids=torch.arange(start, stop).view(1, -1))
            expected.append(out.logits)
            got.append(ours(ids[:, start:stop], range(start, stop)).logits)
    torch.testing.assert_close(torch.cat(got, 1), torch.cat(expected, 1), **TOL)


def test_yarn_fills_its_factor_and_original_length_as_transformers_does():
    """A top-level original_max_position_embeddings wins, and a missing factor is max / original."""
    config = TargetConfig.from_hf(tiny_config("llama", max_position_embeddings=4096, rope_scaling={"rope_type": "yarn"},
                                              original_max_position_embeddings=1024))
    assert config.rope_scaling["original_max_position_embeddings"] == 1024 and config.rope_scaling["factor"] == 4.0


@pytest.mark.parametrize("scaling, named", [
    ({"rope_type": "proportional", "rope_theta": 1e4}, "'proportional'"),
    ({"rope_type": "su", "short_factor": [1.0], "long_factor": [1.0]}, "'su'"),
    ({"rope_type": "dynamic"}, "factor"),
    ({"rope_type": "llama3", "factor": 8.0}, "low_freq_factor"),
])
def test_unimplemented_or_incomplete_scaling_is_refused_by_name(scaling, named):
    with pytest.raises(UnsupportedModelError) as info:
        TargetConfig.from_hf(tiny_config("llama", rope_scaling=scaling))
    assert named in str(info.value) and "--engine vllm" in info.value.hint
