"""The bench runner's DFlash head (runner/dflash_block.py, runner/dflash_drafter.py) read through the format layer:
against the golden set (tests/golden/dflash-qwen3) at fp32 1e-5, against the reference forward
(tests/support/dflash_reference.py) on fresh random inputs, and verified as a chain (lossless, every round's block
equal to the reference's on the same verified prefix). Negative controls: causal vs non-causal, untranslated ids."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from support.dflash_pair import load_dflash_pair
from support.dflash_reference import dflash_step
from support.golden_sets import GOLDEN

from eagle_convert.runner.speculate import plain_generate, speculative_generate
from eagle_convert.testing.dflash import build_dflash_set, read_dflash

SET = GOLDEN / "dflash-qwen3"
TOL = {"atol": 1e-5, "rtol": 1e-5}


@pytest.fixture(scope="module")
def golden():
    return {"inputs": load_file(SET / "inputs.safetensors"), "expected": load_file(SET / "expected.safetensors"),
            "contexts": json.loads((SET / "manifest.json").read_text())["contexts"]}


def block_after(target, head, ids: list[int], bonus: int, k: int) -> torch.Tensor:
    """The head's block after the verified prefix `ids` (fresh caches written from position 0)."""
    out = target(torch.tensor([ids]), range(len(ids)))
    head(torch.tensor([ids[1:] + [bonus]]), head.target_feature(out), range(len(ids)), from_target=True)
    return head.draft_block(torch.tensor(bonus), len(ids), k)


@pytest.mark.parametrize("causal", [False, True])
def test_runner_reproduces_the_golden_blocks(golden, causal):
    target, head, spec = load_dflash_pair(SET / "draft", SET / "target", causal=causal)
    assert spec.aux_layer_ids == (1, 2)  # target_layer_ids [0, 1] count outputs: the inputs of layers 1 and 2
    tag = "causal" if causal else "noncausal"
    for n, c in enumerate(golden["contexts"]):
        out = target(torch.tensor([c["ids"]]), range(len(c["ids"])))
        torch.testing.assert_close(out.aux[0], golden["expected"][f"taps{n}"], **TOL)
        logits = block_after(target, head, c["ids"], c["bonus"], spec.block_size - 1)
        torch.testing.assert_close(logits, golden["expected"][f"logits{n}_{tag}"], **TOL)
        assert logits.argmax(-1).tolist() == golden["expected"][f"proposals{n}_{tag}"].tolist()


def test_untranslated_ids_and_causality_move_the_block(golden):
    # negative controls: the stored ids taken as our internal count (one layer shallower), and the causal flag
    exp = golden["expected"]
    c = golden["contexts"][1]
    target, head, _ = load_dflash_pair(SET / "draft", SET / "target", aux_layer_ids=(0, 1))
    assert (block_after(target, head, c["ids"], c["bonus"], 3) - exp["logits1_noncausal"]).abs().max() > 1e-2
    target, head, _ = load_dflash_pair(SET / "draft", SET / "target", causal=True)
    assert (block_after(target, head, c["ids"], c["bonus"], 3) - exp["logits1_noncausal"]).abs().max() > 1e-2


@pytest.fixture(scope="module")
def random_set(tmp_path_factory):
    return build_dflash_set(tmp_path_factory.mktemp("dflash-random"), layers=2)


@pytest.mark.parametrize("layout", ["zlab", "jetspec", "speculators"])
def test_runner_equals_the_reference_on_random_inputs(random_set, layout):
    """Random prompts' taps stored in two chunks, a random bonus (not the target's choice), blocks of 2 and 4."""
    info = read_dflash(random_set[layout])
    head_tensors = load_file(random_set[layout] / "model.safetensors")
    g = torch.Generator().manual_seed(11)
    for length, k in ((7, 2), (12, 4)):
        target, head, spec = load_dflash_pair(random_set[layout], random_set["target"])
        assert spec.causal == (layout == "jetspec")
        taps = target(torch.randint(0, spec.vocab_size, (1, length), generator=g), range(length)).aux[0]
        bonus = int(torch.randint(0, spec.vocab_size, (1,), generator=g))
        cut = length // 2
        for rows in (range(cut), range(cut, length)):  # the loop stores context in pieces (prefill, each round)
            head(torch.zeros(1, len(rows), dtype=torch.int64), taps[None, rows.start:rows.stop], rows,
                 from_target=True)
        ours = head.draft_block(torch.tensor(bonus), length, k)
        ref = dflash_step(head_tensors, info["config"], taps, bonus, embed=target.embed_weight,
                          lm_head=target.lm_head_weight, mask_token_id=info["mask_token_id"], block_size=k + 1,
                          causal=info["causal"])
        torch.testing.assert_close(ours, ref["logits"], **TOL)


@pytest.fixture(scope="module")
def agree_set(tmp_path_factory):
    return build_dflash_set(tmp_path_factory.mktemp("dflash-agree"), agree=True, layers=1)


def test_the_chain_is_lossless_and_each_block_is_the_references(agree_set):
    """Greedy speculative decoding with the DFlash head emits plain greedy's tokens; every round's drafts are the
    reference's block on the same verified prefix (taps of the target over prefix, the newest token as bonus)."""
    target, head, spec = load_dflash_pair(agree_set["zlab"], agree_set["target"])
    info = read_dflash(agree_set["zlab"])
    head_tensors = load_file(agree_set["zlab"] / "model.safetensors")
    prompt = [1, 17, 42, 99, 5]
    result = speculative_generate(target, head, prompt, k=3, max_new_tokens=24)
    plain, _, _ = load_dflash_pair(agree_set["zlab"], agree_set["target"])
    assert result.tokens == plain_generate(plain, prompt, max_new_tokens=24)
    assert sum(result.accepted_per_round) > 0  # the head agrees with its target: drafts are accepted
    ids = prompt + result.tokens
    fresh, _, _ = load_dflash_pair(agree_set["zlab"], agree_set["target"])
    taps = fresh(torch.tensor([ids]), range(len(ids))).aux[0]
    position = len(prompt)
    for drafted, accepted in zip(result.drafted_per_round, result.accepted_per_round):
        ref = dflash_step(head_tensors, info["config"], taps[:position], ids[position], embed=fresh.embed_weight,
                          lm_head=fresh.lm_head_weight, mask_token_id=info["mask_token_id"], block_size=4)
        assert drafted == ref["proposals"].tolist()
        position += accepted + 1
