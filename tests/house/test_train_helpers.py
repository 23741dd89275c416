"""The trainers' shared code (scripts/train/eagle_train_data.py, eagle_train_loop.py, eagle3_head_model.py): the
aux-state capture against transformers' hidden_states, the unrolled attention against brute force, the chain metrics
on a hand-worked case, and a trained-layout EAGLE-3 head read back by our runner with the same logits.

Those modules are scripts, not the package: each check runs their code in a fresh Python whose working folder is
scripts/train (where they import each other by name, as when a trainer runs), and compares what it returns here."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

TRAIN = Path(__file__).resolve().parents[2] / "scripts" / "train"


def in_trainer(tmp_path: Path, code: str, **inputs) -> dict:
    """Run `code` in scripts/train with `inputs` bound as names; return the dict it leaves in `result`. Both ways
    through torch.save, so tensors come back exactly."""
    io = tmp_path / "trainer-io"
    io.mkdir(exist_ok=True)
    torch.save(inputs, io / "in.pt")
    program = (f"import torch\nglobals().update(torch.load({str(io / 'in.pt')!r}))\nresult = {{}}\n"
               f"{textwrap.dedent(code)}\ntorch.save(result, {str(io / 'out.pt')!r})\n")
    proc = subprocess.run([sys.executable, "-c", program], cwd=TRAIN, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return torch.load(io / "out.pt")


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=5,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                   rope_theta=10000.0, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    path = tmp_path_factory.mktemp("tiny_llama")
    model.save_pretrained(path)
    return model, path


def test_aux_states_are_the_inputs_of_the_aux_layers(tiny_llama, tmp_path):
    model, path = tiny_llama
    ids = torch.randint(0, 96, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        hs = model(ids, output_hidden_states=True).hidden_states
    got = in_trainer(tmp_path, """
        from eagle_train_data import BatchedTarget
        target = BatchedTarget(path, dtype=torch.float32)
        result["out"], result["aux"] = target.forward(ids, torch.arange(9).expand(2, 9), torch.arange(2),
                                                      target.new_cache(2, 9), 9, aux_layers=(1, 3, 4))
    """, ids=ids, path=str(path))
    out, aux = got["out"], got["aux"]
    assert aux.shape == (2, 9, 3 * 32)
    torch.testing.assert_close(aux, torch.cat([hs[1], hs[3], hs[4]], -1), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out, hs[-1], atol=1e-5, rtol=1e-4)  # post-norm, as before


def test_unrolled_attention_matches_brute_force(tmp_path):
    g = torch.Generator().manual_seed(0)
    B, nh, nkv, T, hd, steps = 1, 4, 2, 7, 8, 3
    q = [torch.randn(B, nh, T, hd, generator=g) for _ in range(steps)]
    ks = [torch.randn(B, nkv, T, hd, generator=g) for _ in range(steps)]
    vs = [torch.randn(B, nkv, T, hd, generator=g) for _ in range(steps)]
    unrolled = in_trainer(tmp_path, """
        from eagle_train_loop import unrolled_attention
        result["got"] = [unrolled_attention(q[s], ks[: s + 1], vs[: s + 1], groups) for s in range(len(q))]
    """, q=q, ks=ks, vs=vs, groups=nh // nkv)["got"]
    for s in range(steps):
        got = unrolled[s]
        for p in range(s, T):
            # keys of the chain started at row p - s: step 0 rows <= p - s, then step r at row p - s + r
            keys = [ks[0][:, :, j] for j in range(p - s + 1)] + [ks[r][:, :, p - s + r] for r in range(1, s + 1)]
            vals = [vs[0][:, :, j] for j in range(p - s + 1)] + [vs[r][:, :, p - s + r] for r in range(1, s + 1)]
            K = torch.stack(keys, 2).repeat_interleave(2, 1)
            V = torch.stack(vals, 2).repeat_interleave(2, 1)
            w = torch.softmax((q[s][:, :, p:p + 1] @ K.transpose(-1, -2)) / math.sqrt(hd), -1)
            torch.testing.assert_close(got[:, :, p], (w @ V)[:, :, 0], atol=1e-5, rtol=1e-5)


def test_chain_stats_hand_worked(tmp_path):
    # labels at rows 0..5 (row 5 outside the answer); step s at row p drafts label[p] of the chain from p - s
    label = torch.tensor([10, 11, 12, 13, 14, -1])
    step0 = torch.tensor([10, 0, 12, 13, 0, 0])  # first drafts right at rows 0, 2, 3
    step1 = torch.tensor([0, 11, 0, 13, 14, 0])  # second drafts right at rows 1, 3, 4
    r = in_trainer(tmp_path, """
        from eagle_train_loop import ChainStats
        stats = ChainStats(2)
        stats.add([step0, step1], label)
        result = stats.result()
    """, step0=step0, step1=step1, label=label)
    assert r["top1"] == pytest.approx(3 / 5)
    # chains from rows 0..4: row 0 accepts 2 (10, then 11 at row 1), row 2 accepts 2 (12, then 13 at row 3), row 3
    # accepts 2 (13, then 14 at row 4), rows 1 and 4 accept 0
    assert r["per_position"] == pytest.approx([3 / 5, 3 / 5])
    assert r["tau"] == pytest.approx([1.6, 2.2])
    # the bench walk at k = 2: round at row 0 accepts 2 -> next at row 3, accepts 2 -> row 6: done; 2 rounds
    assert r["bench_like_tau"][1] == pytest.approx(1 + 4 / 2)


def test_lr_schedule_warms_up_then_decays_to_the_floor(tmp_path):
    cases = [(1.0, 0, 10, 0.0, 0.1), (1.0, 50, 10, 0.0, 0.1), (1.0, 50, 10, 1.0, 0.1), (1.0, 50, 10, 0.5, 0.1)]
    lrs = in_trainer(tmp_path, """
        from eagle_train_loop import lr_at
        result["lr"] = [lr_at(*case) for case in cases]
    """, cases=cases)["lr"]
    assert lrs == pytest.approx([0.1, 1.0, 0.1, 0.55])


def test_draft_vocab_keeps_the_most_frequent_tokens_in_target_order(tmp_path):
    counts = torch.tensor([5, 0, 9, 1, 7, 0])
    ids, d2t, t2d = in_trainer(tmp_path, """
        from eagle3_head_model import draft_vocab
        result["vocab"] = draft_vocab(counts, 3)
    """, counts=counts)["vocab"]
    assert ids.tolist() == [0, 2, 4]
    assert (torch.arange(3) + d2t).tolist() == [0, 2, 4]
    assert t2d.tolist() == [True, False, True, False, True, False]


def test_trained_eagle3_layout_runs_identically_in_our_runner(tiny_llama, tmp_path):
    """The trainer's forward (steps 0 and 1 of the unrolled loss) = the runner's chain on the saved head."""
    from eagle_convert.checkpoint.open import open_input
    from eagle_convert.draft.load import load_draft, tensor_reader
    from eagle_convert.runner.heads import build_draft_head

    model, path = tiny_llama
    cfg = json.loads((path / "config.json").read_text())
    embed = model.model.embed_tokens.weight.detach().float()
    out = tmp_path / "head"
    T = 6
    g = torch.Generator().manual_seed(3)
    tok_next = torch.randint(0, 96, (1, T), generator=g)
    aux = torch.randn(1, T, 96, generator=g)
    trained = in_trainer(tmp_path, """
        from eagle3_head_model import Eagle3Head, draft_vocab, save_safeailab_eagle3
        torch.manual_seed(2)
        ids, _, _ = draft_vocab(torch.arange(96), 40)
        head = Eagle3Head(32, 4, 2, 8, 64, cfg["rms_norm_eps"], 10000.0, 3, embed, ids)
        with torch.no_grad():
            for p in (head.input_norm, head.hidden_norm, head.post_norm, head.norm):
                p.uniform_(0.5, 1.5)
        save_safeailab_eagle3(head, cfg, 10000.0, (1, 2, 3), out, {})
        with torch.no_grad():
            o0, o1 = head.unrolled(tok_next, aux, 2)
            result.update(ids=ids, want0=head.logits(o0), want1=head.logits(o1))
    """, cfg=cfg, embed=embed, out=str(out), tok_next=tok_next, aux=aux)
    ids, want0, want1 = trained["ids"], trained["want0"], trained["want1"]
    assert json.loads((out / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"] == [1, 2, 3]

    draft = load_draft(open_input(str(out), role="draft").checkpoint, cfg)
    assert draft.spec.aux_layer_ids == (1, 2, 3) and draft.spec.draft_vocab_size == 40

    def runner_head():
        return build_draft_head(draft.spec, tensor_reader(draft), target_embedding=embed, target_lm_head=embed)

    r = runner_head()
    got0 = r(tok_next, aux, range(T), from_target=True)
    torch.testing.assert_close(got0.logits, want0, atol=1e-4, rtol=1e-4)
    assert torch.equal(r.to_target_ids(got0.logits.argmax(-1)), ids[want0.argmax(-1)])
    for p in (1, 3, 5):  # the chain started at row p - 1: target rows 0..p-1, then one fed-back row at p
        r = runner_head()
        first = r(tok_next[:, :p], aux[:, :p], range(p), from_target=True)
        second = r(tok_next[:, p:p + 1], first.hidden[:, -1:], [p], from_target=False)
        torch.testing.assert_close(second.logits[:, 0], want1[:, p], atol=1e-4, rtol=1e-4)
