"""What the draft/verify tests share: random prompts and pairs, tiny pairs for sampling, the exact marginals a sampler
must reproduce and the chi-square test that compares them."""

from __future__ import annotations

import torch

from eagle_convert.kinds import EAGLE1, EAGLE3
from support.runner_fixtures import (
    agreeing_eagle1_head,
    build_pair,
    draft_spec_for,
    memoryless_target,
    random_head_weights,
    random_target_weights,
    tiny_config,
)


def prompt(seed: int, length: int, vocab: int) -> list[int]:
    return torch.randint(0, vocab, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


def random_pair(seed: int, kind: str, model_type: str = "llama"):
    """A random 3-layer target and a random head; EAGLE-3 with a random draft vocab subset and d2t."""
    config = tiny_config(model_type, num_hidden_layers=3, vocab_size=80)
    weights = random_target_weights(config, seed)
    if kind == EAGLE1:
        spec = draft_spec_for(config, EAGLE1, fc_bias=True)
        return build_pair(config, weights, spec, random_head_weights(spec, seed + 100))
    spec = draft_spec_for(config, EAGLE3, draft_vocab_size=48, aux_layer_ids=(0, 1, 2))
    head_weights = random_head_weights(spec, seed + 100)
    used = torch.randperm(80, generator=torch.Generator().manual_seed(seed))[:48].sort().values
    head_weights["d2t"] = used - torch.arange(48)
    return build_pair(config, weights, spec, head_weights, aux_layer_ids=spec.aux_layer_ids)

CHI2_999 = {4: 18.47, 7: 24.32}  # chi-square critical values at p = 0.001 by degrees of freedom


def chi_square(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = counts.sum() * probs
    return float(((counts - expected) ** 2 / expected).sum())


def sampling_pair(vocab: int = 8):
    """A tiny pair on an 8-token vocabulary with a flat target distribution (every token matters to the test)."""
    config = tiny_config(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_attention_heads=2,
                         num_key_value_heads=1)
    weights = random_target_weights(config, seed=3)
    weights["lm_head.weight"] *= 0.5  # a flatter target distribution makes the test sensitive to every token
    spec = draft_spec_for(config, EAGLE1)
    return build_pair(config, weights, spec, random_head_weights(spec, seed=4))


def exact_marginals(target, ids: list[int], temperature: float, positions: int, vocab: int) -> list[torch.Tensor]:
    """The exact marginal distribution of generated tokens 2..positions+1, by enumerating every prefix."""
    def next_probs(context):
        logits = target(torch.tensor([context]), range(len(context)), last_logits_only=True).logits[0, -1]
        return torch.softmax(logits / temperature, -1)

    exact = [torch.zeros(vocab) for _ in range(positions)]

    def walk(context, weight, depth):
        p = next_probs(context) * weight
        if depth > 0:
            exact[depth - 1] += p
        if depth < positions:
            for token in range(vocab):
                walk(context + [token], p[token], depth + 1)

    walk(ids, torch.tensor(1.0), 0)
    return exact


def partially_agreeing_pair(seed: int, **placement):
    """The agreeing head on a target given a little attention: rounds end at every depth, off the first path too."""
    config, weights = memoryless_target(seed=seed, vocab=64)
    spec, head_weights = agreeing_eagle1_head(config, weights, seed=seed)
    hidden = config["hidden_size"]
    weights["model.layers.0.self_attn.o_proj.weight"] = 0.1 * torch.randn(
        hidden, hidden, generator=torch.Generator().manual_seed(seed))
    return build_pair(config, weights, spec, head_weights, **placement)  # placement: dtype, device
