"""Properties of the draft/verify loop: an agreeing head is always accepted, any head is lossless, the head's context
is the target's features with the right alignment, metrics arithmetic, and sampling matches the target distribution."""

from __future__ import annotations

import math

import pytest
import torch
from support.runner_fixtures import agreeing_eagle1_head, build_pair, memoryless_target
from support.sampling import CHI2_999, chi_square, exact_marginals, prompt, random_pair, sampling_pair

from eagle_convert.kinds import EAGLE1, EAGLE3
from eagle_convert.runner import speculate
from eagle_convert.runner.metrics import AcceptanceStats, merge_stats
from eagle_convert.runner.speculate import accept_sampled, plain_generate, speculative_generate


def stats(result) -> AcceptanceStats:
    return AcceptanceStats.from_accepted(result.k, result.accepted_per_round)


# --- always accepted / never accepted ------------------------------------------------------------------------------

@pytest.mark.parametrize("k", [1, 3, 5])
def test_agreeing_head_gives_tau_k_plus_one(k):
    config, weights = memoryless_target(seed=k)
    spec, head_weights = agreeing_eagle1_head(config, weights, seed=k)
    target, head = build_pair(config, weights, spec, head_weights)
    ids = prompt(k, 7, config["vocab_size"])
    result = speculative_generate(target, head, ids, k=k, max_new_tokens=41)
    summary = stats(result)
    assert summary.drafts > 0 and result.accepted_per_round == [k] * summary.drafts
    assert summary.mean_acceptance_length == k + 1 and summary.acceptance_rate == 1.0
    assert summary.per_position_rates == (1.0,) * k
    assert result.tokens == plain_generate(target, ids, max_new_tokens=41)


def test_wrong_lm_head_drops_tau_to_about_one():
    """The agreeing head, handed the target's input embedding instead of its LM head: a classic conversion mistake."""
    config, weights = memoryless_target(seed=0)
    spec, head_weights = agreeing_eagle1_head(config, weights, seed=0)
    target, head = build_pair(config, weights, spec, head_weights, lm_head=weights["model.embed_tokens.weight"])
    ids = prompt(0, 7, config["vocab_size"])
    result = speculative_generate(target, head, ids, k=3, max_new_tokens=60)
    assert stats(result).mean_acceptance_length < 1.2
    assert result.tokens == plain_generate(target, ids, max_new_tokens=60)


# --- lossless greedy -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [EAGLE1, EAGLE3])
@pytest.mark.parametrize("seed", range(4))
def test_random_head_output_equals_plain_greedy(kind, seed):
    target, head = random_pair(seed, kind, model_type=("llama", "qwen2", "qwen3", "mistral")[seed])
    k, length = 1 + seed % 4, 1 + 3 * seed
    ids = prompt(seed, length, 80)
    expected = plain_generate(target, ids, max_new_tokens=25)
    result = speculative_generate(target, head, ids, k=k, max_new_tokens=25)
    assert result.tokens == expected
    eos = expected[len(expected) // 2]  # stop at an EOS mid-way: both must stop at its first occurrence
    stopped = plain_generate(target, ids, max_new_tokens=25, eos_ids=[eos])
    assert stopped == expected[: expected.index(eos) + 1]
    assert speculative_generate(target, head, ids, k=k, max_new_tokens=25, eos_ids=[eos]).tokens == stopped


@pytest.mark.parametrize("seed", range(3))
def test_partially_agreeing_head_is_lossless(seed):
    """The agreeing head on a target given a little attention (o_proj = 0.1 * random): context now and then changes
    the target's choice, so rounds end at every acceptance length and rejected suffixes must be rolled back."""
    config, weights = memoryless_target(seed=seed, vocab=64)
    spec, head_weights = agreeing_eagle1_head(config, weights, seed=seed)
    hidden = config["hidden_size"]
    weights["model.layers.0.self_attn.o_proj.weight"] = 0.1 * torch.randn(
        hidden, hidden, generator=torch.Generator().manual_seed(seed))
    target, head = build_pair(config, weights, spec, head_weights)
    ids = prompt(seed, 5, 64)
    result = speculative_generate(target, head, ids, k=4, max_new_tokens=80)
    assert result.tokens == plain_generate(target, ids, max_new_tokens=80)
    assert len(set(result.accepted_per_round)) >= 3  # mixed acceptance really happens
    emitted = 1 + sum(a + 1 for a in result.accepted_per_round)  # the root token plus a + 1 per round
    assert emitted - (4 + 1) < len(result.tokens) <= emitted  # the last round may be cut at max_new_tokens


@pytest.mark.parametrize("kind", [EAGLE1, EAGLE3])
def test_head_context_is_the_targets_features_with_correct_alignment(kind, monkeypatch):
    """Every round's proposal equals a from-scratch recompute: fresh caches, the target run over the context so far,
    head rows pairing target feature i with token i+1 at position i, then the chain. So the loop's cached context holds
    the target's features (never the head's guesses) and stale rows of rejected drafts never leak."""
    target, head = random_pair(7, kind)
    rounds = []
    chain = speculate.draft_chain

    def recording_chain(head_, first, next_position, k, **kwargs):
        ids, probs = chain(head_, first, next_position, k, **kwargs)
        rounds.append((next_position, ids.tolist()))
        return ids, probs

    monkeypatch.setattr(speculate, "draft_chain", recording_chain)
    ids = prompt(7, 6, 80)
    result = speculative_generate(target, head, ids, k=3, max_new_tokens=40)
    monkeypatch.undo()
    assert len(rounds) > 5
    for next_position, proposed in rounds:
        context = ids + result.tokens[: next_position - len(ids) + 1]  # ends with the newest emitted token
        fresh_target, fresh_head = random_pair(7, kind)
        out = fresh_target(torch.tensor([context[:-1]]), range(len(context) - 1))
        first = fresh_head(torch.tensor([context[1:]]), fresh_head.target_feature(out), range(len(context) - 1),
                           from_target=True)
        recomputed, _ = chain(fresh_head, first, next_position, 3, vocab_size=80)
        assert recomputed.tolist() == proposed


def test_invalid_arguments():
    target, head = random_pair(0, EAGLE1)
    with pytest.raises(ValueError):
        speculative_generate(target, head, [1, 2], k=0, max_new_tokens=5)
    with pytest.raises(ValueError):
        speculative_generate(target, head, [], k=2, max_new_tokens=5)


# --- metrics ---------------------------------------------------------------------------------------------------------

def test_metrics_on_a_hand_made_histogram():
    s = AcceptanceStats(3, (2, 1, 0, 3))  # 6 rounds accepting 0,0,1,3,3,3
    assert (s.drafts, s.drafted, s.accepted) == (6, 18, 10)
    assert s.mean_acceptance_length == 1 + 10 / 6
    assert s.acceptance_rate == 10 / 18
    assert s.per_position_rates == (4 / 6, 3 / 6, 3 / 6)
    assert AcceptanceStats.from_accepted(3, [3, 0, 1, 3, 0, 3]) == s
    d = s.to_dict()
    assert d["histogram"] == [2, 1, 0, 3] and d["mean_acceptance_length"] == 1 + 10 / 6
    assert d["per_position_rates"] == [4 / 6, 0.5, 0.5]


def test_metrics_merge_pools_rounds_not_taus():
    a = AcceptanceStats.from_accepted(2, [2])  # tau 3
    b = AcceptanceStats.from_accepted(2, [0, 0, 0])  # tau 1
    total = merge_stats([a, b], k=2)
    assert total.histogram == (3, 0, 1) and total.mean_acceptance_length == 1.5  # not (3 + 1) / 2
    assert total.per_position_rates == (0.25, 0.25)
    with pytest.raises(ValueError):
        a.merge(AcceptanceStats.from_accepted(3, [1]))


def test_metrics_edge_cases():
    empty = AcceptanceStats(2, (0, 0, 0))
    assert math.isnan(empty.mean_acceptance_length) and math.isnan(empty.acceptance_rate)
    assert empty.to_dict()["mean_acceptance_length"] is None and empty.to_dict()["per_position_rates"] == [None, None]
    with pytest.raises(ValueError):
        AcceptanceStats.from_accepted(2, [3])
    with pytest.raises(ValueError):
        AcceptanceStats(2, (1, 1))


# --- sampling --------------------------------------------------------------------------------------------------------


def test_accept_sampled_emits_the_target_distribution():
    """k = 2 drafts drawn from q. Whatever q is, the first emitted token must follow p[0], and the bonus token (when
    both drafts are accepted) must follow p[2]."""
    p = torch.tensor([[0.05, 0.40, 0.25, 0.20, 0.10], [0.3, 0.1, 0.2, 0.2, 0.2], [0.1, 0.2, 0.3, 0.25, 0.15]])
    q = torch.tensor([[0.30, 0.10, 0.10, 0.20, 0.30], [0.1, 0.5, 0.1, 0.2, 0.1]])
    g = torch.Generator().manual_seed(0)
    first, bonus = torch.zeros(5), torch.zeros(5)
    for _ in range(6000):
        drafts = torch.multinomial(q, 1, generator=g).flatten()
        accepted, next_token = accept_sampled(drafts, q, p, g)
        first[drafts[0] if accepted else next_token] += 1
        if accepted == 2:
            bonus[next_token] += 1
    assert chi_square(first, p[0]) < CHI2_999[4]
    assert bonus.sum() > 500 and chi_square(bonus, p[2]) < CHI2_999[4]


def test_speculative_sampling_matches_the_target_distribution():
    """End to end at temperature 1.25 on an 8-token vocabulary: the marginals of generated tokens 2..4 (which come
    from accepted drafts, residual resamples and bonus tokens) against exact target probabilities."""
    vocab, temperature, k, runs = 8, 1.25, 2, 600
    target, head = sampling_pair(vocab)
    ids = [1, 5, 2]
    exact = exact_marginals(target, ids, temperature, 3, vocab)

    g = torch.Generator().manual_seed(11)
    counts = torch.zeros(3, vocab)
    histogram = AcceptanceStats(k, (0,) * (k + 1))
    for _ in range(runs):
        result = speculative_generate(target, head, ids, k=k, max_new_tokens=4, temperature=temperature, generator=g)
        histogram = histogram.merge(stats(result))
        for position in range(3):
            counts[position, result.tokens[position + 1]] += 1
    assert 0 < histogram.acceptance_rate < 0.9  # both accept and reject paths are exercised
    for position in range(3):
        assert chi_square(counts[position], exact[position]) < CHI2_999[7], (position, counts, exact)
