"""Our compact target against transformers (eager attention, fp32) on tiny random configs of each supported family:
logits, the final post-norm state and every HF hidden state, for a full pass and for cached incremental passes."""

from __future__ import annotations

import pytest
import torch
from support.hf_reference import hf_model
from support.runner_fixtures import random_target_weights, strict_getter, tiny_config

from eagle_convert.errors import EagleConvertError, UnsupportedModelError
from eagle_convert.runner.model import TargetConfig, TargetModel

transformers = pytest.importorskip("transformers")

SEQ = 14
LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  # small enough that the three llama3 regimes (kept, interpolated, divided) all occur at head_dim 8
                  "original_max_position_embeddings": 64}

CASES = {
    "llama": tiny_config("llama"),
    "llama-bias": tiny_config("llama", attention_bias=True, mlp_bias=True),
    "llama3-rope-scaling": tiny_config("llama", rope_theta=500000.0, rope_scaling=LLAMA3_SCALING),
    # transformers 5 writes RoPE into rope_parameters, with the theta inside
    "llama3-rope-parameters": tiny_config("llama", rope_parameters={**LLAMA3_SCALING, "rope_theta": 500000.0}),
    "llama-linear-rope": tiny_config("llama", rope_scaling={"type": "linear", "factor": 4.0}),
    "llama-tied": tiny_config("llama", tie_word_embeddings=True),
    "mistral": tiny_config("mistral", sliding_window=None),
    "mistral-sliding-window": tiny_config("mistral", sliding_window=5),
    "qwen2": tiny_config("qwen2", rope_theta=1e6),
    "qwen2-tied": tiny_config("qwen2", tie_word_embeddings=True),
    "qwen2-sliding-layers": tiny_config("qwen2", use_sliding_window=True, sliding_window=4, max_window_layers=1),
    "qwen3": tiny_config("qwen3", rope_theta=1e6),
    "qwen3-bias-tied": tiny_config("qwen3", attention_bias=True, tie_word_embeddings=True),
}


@pytest.mark.parametrize("name", CASES)
def test_matches_transformers(name):
    config = CASES[name]
    weights = random_target_weights(config, seed=len(name))
    layers = config["num_hidden_layers"]
    ours = TargetModel(config, strict_getter(weights), aux_layer_ids=range(layers))
    ids = torch.randint(0, config["vocab_size"], (1, SEQ), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf_model(config, weights)(ids, output_hidden_states=True)
    tol = dict(atol=2e-5, rtol=1e-5)

    full = ours(ids, range(SEQ))
    torch.testing.assert_close(full.logits, expected.logits, **tol)
    torch.testing.assert_close(full.hidden, expected.hidden_states[-1], **tol)
    # aux = cat(HF hidden_states[i] for i in 0..L-1): the inputs of every decoder layer
    torch.testing.assert_close(full.aux, torch.cat(expected.hidden_states[:layers], dim=-1), **tol)

    # The same sequence through the static cache: a prefill, a 4-token "verify" chunk, then single tokens. Writing
    # garbage at the chunk's later positions first checks that stale cache rows beyond the query are never read.
    ours(torch.randint(0, config["vocab_size"], (1, 6)), range(8, 14))
    pieces = [ours(ids[:, :6], range(6)), ours(ids[:, 6:10], range(6, 10))]
    pieces += [ours(ids[:, i:i + 1], range(i, i + 1)) for i in range(10, SEQ)]
    torch.testing.assert_close(torch.cat([p.logits for p in pieces], 1), expected.logits, **tol)
    torch.testing.assert_close(torch.cat([p.aux for p in pieces], 1), full.aux, **tol)


def test_cache_grows_past_its_initial_capacity():
    """The per-layer cache starts at 256 positions and doubles; positions beyond it must still match transformers."""
    config = tiny_config("qwen2", num_hidden_layers=1)
    weights = random_target_weights(config, 5)
    ours = TargetModel(config, strict_getter(weights))
    ids = torch.randint(0, config["vocab_size"], (1, 300), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = hf_model(config, weights)(ids).logits
    pieces = [ours(ids[:, :250], range(250)), ours(ids[:, 250:260], range(250, 260)),
              ours(ids[:, 260:], range(260, 300))]
    torch.testing.assert_close(torch.cat([p.logits for p in pieces], 1), expected, atol=2e-5, rtol=1e-5)


def test_last_logits_only():
    config = CASES["llama"]
    model = TargetModel(config, strict_getter(random_target_weights(config, 0)))
    ids = torch.arange(5).view(1, 5)
    out = model(ids, range(5), last_logits_only=True)
    assert out.logits.shape == (1, 1, config["vocab_size"]) and out.hidden.shape == (1, 5, config["hidden_size"])
    torch.testing.assert_close(out.logits, model(ids, range(5)).logits[:, -1:], atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("overrides, named", [
    ({"model_type": "gemma", "architectures": ["GemmaForCausalLM"]}, "'gemma'"),
    ({"architectures": ["LlamaForSequenceClassification"]}, "LlamaForSequenceClassification"),
    ({"rope_scaling": {"rope_type": "proportional", "rope_theta": 1e4}}, "'proportional'"),
    ({"hidden_act": "gelu"}, "'gelu'"),
])
def test_unsupported_architecture_is_a_typed_error(overrides, named):
    with pytest.raises(UnsupportedModelError) as info:
        TargetConfig.from_hf({**tiny_config("llama"), **overrides})
    message = str(info.value)
    assert named in message
    for supported in ("llama", "mistral", "qwen2", "qwen3", "LlamaForCausalLM", "Qwen3ForCausalLM"):
        assert supported in message
    assert isinstance(info.value, EagleConvertError) and isinstance(info.value, ValueError)


def test_batch_one_is_enforced():
    config = CASES["llama"]
    model = TargetModel(config, strict_getter(random_target_weights(config, 0)))
    with pytest.raises(ValueError, match="batch 1"):
        model(torch.zeros(2, 3, dtype=torch.int64), range(3))
