"""Host-device syncs per greedy chain round, counted on CPU by patching every way a tensor's value reaches Python
(.tolist, .item, int(), float(), bool()): on a GPU each one drains the queue, and a round needs one."""

from __future__ import annotations

import torch
from support.sampling import partially_agreeing_pair, prompt

from eagle_convert.runner.speculate import plain_generate, speculative_generate

READS = ("tolist", "item", "__int__", "__float__", "__bool__")


def count_reads(monkeypatch) -> list[str]:
    seen: list[str] = []
    for name in READS:
        real = getattr(torch.Tensor, name)

        def counting(self, *args, _real=real, _name=name, **kwargs):
            seen.append(_name)
            return _real(self, *args, **kwargs)
        monkeypatch.setattr(torch.Tensor, name, counting)
    return seen


def test_a_greedy_chain_round_reads_the_device_once(monkeypatch):
    target, head = partially_agreeing_pair(seed=3)
    ids = prompt(3, 20, 64)
    expected = plain_generate(target, ids, max_new_tokens=40)
    target, head = partially_agreeing_pair(seed=3)
    seen = count_reads(monkeypatch)
    result = speculative_generate(target, head, ids, k=3, max_new_tokens=40)
    monkeypatch.undo()
    assert result.tokens == expected and sum(result.accepted_per_round) > 0
    rounds = len(result.accepted_per_round)
    assert len(seen) == rounds + 1, (rounds, seen)  # + the prefill's first token
