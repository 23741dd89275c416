"""The runner's target and heads against the EAGLE reference outputs in tests/golden (fp32, atol 1e-5)."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from support.golden_sets import GOLDEN, GOLDEN_SETS
from support.runner_fixtures import build_pair, read_golden_draft, read_target_dir

from eagle_convert.runner.heads import aux_layer_ids_for
from eagle_convert.runner.speculate import accept_greedy, draft_chain, verify

ATOL = RTOL = 1e-5


def close(actual: torch.Tensor, expected: torch.Tensor):
    torch.testing.assert_close(actual.float(), expected, atol=ATOL, rtol=RTOL)


@pytest.fixture(scope="module", params=GOLDEN_SETS)
def golden(request):
    root = GOLDEN / request.param
    config, target_tensors = read_target_dir(root / "target")
    spec, draft_tensors = read_golden_draft(root / "draft")
    aux_ids = aux_layer_ids_for(spec, config["num_hidden_layers"])
    expected = load_file(root / "expected.safetensors")
    if spec.is_eagle3:
        assert list(aux_ids) == expected["target.aux_layer_ids"].tolist()
    return dict(config=config, target_tensors=target_tensors, spec=spec, draft_tensors=draft_tensors,
                aux_ids=aux_ids, inputs=load_file(root / "inputs.safetensors"), expected=expected)


def fresh_pair(g):
    """New caches for each test: the target in fp32 from its fp32 files; the head from its fp16/bf16/fp32 storage,
    upcast to fp32 as the golden sets were computed."""
    return build_pair(g["config"], g["target_tensors"], g["spec"], g["draft_tensors"], aux_layer_ids=g["aux_ids"])


def run_prompt(target, g):
    inputs = g["inputs"]
    return target(inputs["prompt_ids"], inputs["positions"][0])


def test_target_logits_and_features(golden):
    target, head = fresh_pair(golden)
    out, expected = run_prompt(target, golden), golden["expected"]
    close(out.logits, expected["target.logits"])
    assert out.logits[0, -1].argmax().item() == expected["target.root_id"].item()
    if golden["spec"].is_eagle3:
        close(head.target_feature(out), expected["target.aux_hidden_states"])
    else:
        close(head.target_feature(out), expected["target.hidden_states"])


def test_draft_single_pass(golden):
    target, head = fresh_pair(golden)
    expected, inputs = golden["expected"], golden["inputs"]
    out = head(inputs["draft_input_ids"], head.target_feature(run_prompt(target, golden)), inputs["positions"][0],
               from_target=True)
    close(out.fc_out, expected["draft.fc_out"])
    close(out.hidden, expected["draft.hidden_states"])
    close(out.logits, expected["draft.logits"])
    head_argmax = out.logits.argmax(-1)
    assert torch.equal(head.to_target_ids(head_argmax), expected["draft.argmax_ids"])
    if golden["spec"].is_eagle3:
        assert torch.equal(head_argmax, expected["draft.argmax_draft_ids"])
    # the drafting loop's shortcut: the same rows again (rewriting the same cache positions), LM head on the last only
    last = head(inputs["draft_input_ids"], head.target_feature(run_prompt(target, golden)), inputs["positions"][0],
                from_target=True, last_logits_only=True)
    close(last.logits, expected["draft.logits"][:, -1:])


def test_chain_and_verify(golden):
    """The 5-step chain from row 11, then one target verify over prompt + root + d1..d5."""
    target, head = fresh_pair(golden)
    expected, inputs = golden["expected"], golden["inputs"]
    prompt_len = inputs["prompt_ids"].shape[1]
    first = head(inputs["draft_input_ids"], head.target_feature(run_prompt(target, golden)), inputs["positions"][0],
                 from_target=True)
    steps = []  # record what each chain step computes, by wrapping the head's forward
    forward = head.forward

    def recording_forward(token_ids, features, positions, *, from_target):
        out = forward(token_ids, features, positions, from_target=from_target)
        steps.append((token_ids.flatten().tolist(), list(positions), out))
        return out

    head.forward = recording_forward
    ids, probs = draft_chain(head, first, prompt_len, 5, vocab_size=golden["spec"].vocab_size)
    assert probs is None
    assert ids.tolist() == expected["chain.draft_ids"].tolist()
    root = expected["target.root_id"]
    assert [root.item()] + [s[0][0] for s in steps] == expected["chain.input_ids"].tolist()
    assert [prompt_len - 1] + [s[1][0] for s in steps] == expected["chain.positions"].tolist()
    chain_logits = torch.cat([first.logits[:, -1]] + [s[2].logits[:, -1] for s in steps])
    chain_hidden = torch.cat([first.hidden[:, -1]] + [s[2].hidden[:, -1] for s in steps])
    close(chain_logits, expected["chain.draft_logits"])
    close(chain_hidden, expected["chain.draft_hidden_states"])
    if golden["spec"].is_eagle3:
        assert chain_logits.argmax(-1).tolist() == expected["chain.draft_ids_draft_vocab"].tolist()

    checked = verify(target, root, ids, prompt_len)
    close(checked.logits[0], expected["verify.target_logits"])
    accepted, bonus = accept_greedy(ids, checked.logits[0])
    assert accepted == expected["verify.accept_length"].item()
    assert bonus == expected["verify.bonus_id"].item()


def test_golden_draft_embedding_equals_target(golden):
    """README promise the EAGLE-1 heads rely on: a shipped draft embedding is the target's, bit for bit."""
    draft_embedding = golden["draft_tensors"].get("embed_tokens.weight")
    if draft_embedding is None:
        pytest.skip("this head ships no embedding")
    assert torch.equal(draft_embedding.float(), golden["target_tensors"]["model.embed_tokens.weight"])
