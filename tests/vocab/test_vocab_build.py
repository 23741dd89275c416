"""`vocab-map build` end to end: one pass over the corpus for every -n (the cache says so on the next run), the
producer's own files, what happens to prompt-only rows, and refusals with nothing written."""

from __future__ import annotations

import json
from collections import Counter

import torch
from click.testing import CliRunner
from support.producers import producer_function

from eagle_convert.cli.main import main
from eagle_convert.testing.tiny import TinyConfig, make_eagle3_head, make_target
from eagle_convert.vocab.formats import read_stored

CFG = TinyConfig(vocab_size=128, num_hidden_layers=8)
TEMPLATE = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}t3 {{ m['content'] }} t5 "
            "{% else %}t4 {{ m['content'] }} t5 {% endif %}{% endfor %}{% if add_generation_prompt %}t4 {% endif %}")
ROWS = [{"conversations": [{"from": "human", "value": "t10 t11"}, {"from": "gpt", "value": "t20 t21 t20 t22"}]},
        {"messages": [{"role": "user", "content": "t12"}, {"role": "assistant", "content": "t23 t21 t24"}]},
        {"prompt": "t13 t14"}]


def _setup(tmp_path):
    weights = make_target(tmp_path / "target", CFG)
    config = json.loads((tmp_path / "target" / "tokenizer_config.json").read_text())
    (tmp_path / "target" / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": TEMPLATE}))
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return weights


def build(tmp_path, *args):
    return CliRunner().invoke(main, ["vocab-map", "build", "-t", str(tmp_path / "target"), "--prompts",
                                     str(tmp_path / "c.jsonl"), "--cache-dir", str(tmp_path / "cache"),
                                     *map(str, args)], catch_exceptions=False)


def test_one_pass_serves_every_n_and_the_cache_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE_CONVERT_PROGRESS_EVERY", "0")  # progress lines even for a count this short
    _setup(tmp_path)
    first = build(tmp_path, "-n", 3, "-n", 10, "--compat", "specforge", "-o", tmp_path / "a")
    assert first.exit_code == 0 and "counted now" in first.output and "counting tokens" in first.stderr
    assert "9 tokens counted in 3 samples" in first.output  # answers + end-of-turn markers; the prompt row: none
    assert "1 rows have no assistant turn: nothing of them is counted" in first.output
    counts = Counter({20: 2, 21: 2, 22: 1, 5: 2, 23: 1, 24: 1})
    for n in (3, 10):
        stored = read_stored(tmp_path / "a" / f"vocab_mapping-{n}.pt")
        d2t, t2d = producer_function("process_token_dict_to_mappings")(Counter(dict(sorted(counts.items()))), n,
                                                                        CFG.vocab_size)
        assert stored.d2t.shape == (n,) and stored.t2d.shape == (CFG.vocab_size,)
        assert set((stored.d2t + torch.arange(n)).tolist()) >= ({5, 20, 21} if n == 3 else set(counts))
        if n == 10:
            assert torch.equal(stored.d2t, d2t) and torch.equal(stored.t2d, t2d)
    again = build(tmp_path, "-n", 5, "--compat", "specforge", "-o", tmp_path / "b", "-q", "--format", "speculators")
    assert again.exit_code == 0 and "cached counts" in again.output and "counting tokens" not in again.stderr
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["d2t-5.npy", "t2d-5.npy"]


def test_modelopt_counts_prompt_only_rows_and_keeps_frequency_order(tmp_path):
    _setup(tmp_path)
    run = build(tmp_path, "-n", 4, "--compat", "modelopt", "-o", tmp_path / "m", "--json")
    assert run.exit_code == 0
    report = json.loads(run.stdout)
    assert report["counts"]["prompt_only_rows"] == 1 and report["maps"][0]["ascending"] is False
    ids = (read_stored(tmp_path / "m" / "d2t-4.pt").d2t + torch.arange(4)).tolist()
    assert ids[0] in (3, 5)  # the most frequent template tokens (user marker t3 / end of turn t5) come first


def test_build_refusals_write_nothing(tmp_path):
    weights = _setup(tmp_path)
    big = build(tmp_path, "-n", 129, "--compat", "specforge", "-o", tmp_path / "x")
    assert big.exit_code == 1 and "exceeds the target vocabulary" in big.stderr and not (tmp_path / "x").exists()
    few = build(tmp_path, "-n", 50, "--compat", "modelopt", "-o", tmp_path / "x")
    assert few.exit_code == 1 and "refuses to pad" in few.stderr and not (tmp_path / "x").exists()
    make_eagle3_head(tmp_path / "head", CFG, weights, draft_vocab=16)
    prune = build(tmp_path, "-n", 16, "--compat", "specforge", "--apply-to", tmp_path / "head", "-o", tmp_path / "x")
    assert prune.exit_code == 1 and "fixed by training" in prune.stderr and not (tmp_path / "x").exists()
    (tmp_path / "x").mkdir()
    exists = build(tmp_path, "-n", 4, "--compat", "specforge", "-o", tmp_path / "x")
    assert exists.exit_code == 1 and "--force" in exists.stderr and list((tmp_path / "x").iterdir()) == []


def test_t2d_is_sized_by_the_config_vocab_text_config_included(tmp_path):
    _setup(tmp_path)
    config_path = tmp_path / "target" / "config.json"
    config = json.loads(config_path.read_text())
    # a VLM: the text model's vocabulary (padded past the 128 tokenizer entries) sizes t2d, not the top level's
    config_path.write_text(json.dumps({**config, "vocab_size": 999, "text_config": {"vocab_size": 160}}))
    run = build(tmp_path, "-n", 4, "--compat", "speculators", "-o", tmp_path / "v", "-q")
    assert run.exit_code == 0, run.output
    stored = read_stored(tmp_path / "v" / "d2t-4.npy")
    assert stored.t2d.shape == (160,) and int(stored.t2d.sum()) == 4
    d2t, t2d = producer_function("build_vocab_mappings_from_distribution")({20: 2, 21: 2, 22: 1, 5: 2, 23: 1,
                                                                             24: 1}, 4, 160)
    assert torch.equal(stored.d2t, d2t) and torch.equal(stored.t2d, t2d)
