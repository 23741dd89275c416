"""`vocab-map coverage`'s counting (benchmark/coverage.py): the share of the target's tokens a draft vocabulary
cannot propose, on a case small enough to count by hand."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from click.testing import CliRunner

from eagle_convert.benchmark.chat import ChatTokenizer
from eagle_convert.benchmark.coverage import coverage
from eagle_convert.benchmark.session import load_target
from eagle_convert.cli.main import main
from eagle_convert.runner.speculate import plain_generate
from eagle_convert.testing.tiny import TinyConfig, make_eagle1_head, make_eagle3_head, make_target


def cli(*args):
    """The CLI in this process (an interpreter start per call would cost most of these tests' time); an unexpected
    exception is raised, not counted as exit 1."""
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return SimpleNamespace(returncode=result.exit_code, stdout=result.stdout, stderr=result.stderr)


def test_coverage_counts_every_occurrence_on_a_hand_counted_stream():
    # stream: 7 x3, 50 x2, 3, 9, 11 (8 tokens, 5 distinct); vocabulary {3, 7, 42}
    stream = [7, 50, 7, 3, 9, 50, 7, 11]
    c = coverage(stream, [42, 7, 3], label="N=3")
    # outside: 50, 50, 9, 11 -> 4 of 8 occurrences; distinct outside: 50, 9, 11 -> 3 of 5
    assert (c.stream_tokens, c.outside_tokens, c.stream_distinct, c.outside_distinct) == (8, 4, 5, 3)
    assert c.outside_share == 0.5 and c.ceiling == 0.5 and c.draft_vocab_size == 3
    assert c.to_dict() == {"label": "N=3", "draft_vocab_size": 3, "stream_tokens": 8, "outside_tokens": 4,
                           "outside_share": 0.5, "acceptance_ceiling": 0.5, "stream_distinct": 5,
                           "outside_distinct": 3}


def test_coverage_of_a_larger_vocabulary_and_edge_cases():
    stream = torch.tensor([[7, 50, 7, 3], [9, 50, 7, 11]])  # any shape: every element is one token
    assert coverage(stream, [3, 7, 9, 50, 11]).outside_tokens == 0  # the whole stream: ceiling 1
    c = coverage(stream, torch.tensor([50, 7, 7]))  # a duplicate counts once
    assert (c.draft_vocab_size, c.outside_tokens) == (2, 3)  # 3, 9, 11 outside
    assert c.ceiling == pytest.approx(5 / 8)
    empty = coverage([], [1, 2])
    assert empty.outside_share is None and empty.ceiling is None and empty.stream_tokens == 0


# `vocab-map coverage` end to end, on a tiny target with a chat template (role markers are words of the tiny
# word-level tokenizer: t3 user, t4 assistant, t5 end of turn).
TEMPLATE = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}t3 {{ m['content'] }} t5 "
            "{% else %}t4 {{ m['content'] }} t5 {% endif %}{% endfor %}{% if add_generation_prompt %}t4 {% endif %}")
PROMPTS = [{"turns": ["t10 t11 t12"]}, {"turns": ["t40 t7 t99", "t8"]}, {"prompt": "t5 t6 t60"}]
CORPUS = [{"conversations": [{"from": "human", "value": "t10"}, {"from": "gpt", "value": "t20 t21 t20 t22"}]},
          {"messages": [{"role": "user", "content": "t11"}, {"role": "assistant", "content": "t20 t23 t24 t25"}]}]


@pytest.fixture(scope="module")
def coverage_pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("coverage")
    cfg = TinyConfig(num_hidden_layers=1)
    tensors = make_target(root / "target", cfg)
    config = json.loads((root / "target" / "tokenizer_config.json").read_text())
    (root / "target" / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": TEMPLATE}))
    make_eagle1_head(root / "eagle1", cfg, tensors)
    make_eagle3_head(root / "eagle3", cfg, tensors, draft_vocab=64)
    for name, rows in (("prompts", PROMPTS), ("corpus", CORPUS)):
        (root / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def greedy_ids(target, max_new_tokens: int) -> list[int]:
    """The stream, computed here from the runner directly: each row's first user turn, greedy."""
    chat = ChatTokenizer.from_dir(target)
    model = load_target(target, dtype=torch.float32, device="cpu")
    firsts = [[{"role": "user", "content": (row.get("turns") or [row.get("prompt")])[0]}] for row in PROMPTS]
    return [t for m in firsts for t in plain_generate(model, chat.encode_chat(m), max_new_tokens=max_new_tokens,
                                                      eos_ids=chat.eos_token_ids)]


def test_coverage_cli_rows_equal_counts_over_the_targets_own_stream(coverage_pair, tmp_path):
    root = coverage_pair
    stream = greedy_ids(root / "target", 8)
    hot = sorted(set(stream))[::2]  # half of the ids the target emits: a map that must lose tokens
    torch.save(hot, tmp_path / "hot.pt")
    built = cli("vocab-map", "build", "--target", root / "target", "--prompts", root / "corpus.jsonl", "-n", "4",
                    "-n", "16", "--compat", "specforge", "--format", "sglang", "-o", tmp_path / "maps",
                    "--cache-dir", tmp_path / "cache")
    assert built.returncode == 0, built.stderr
    maps = {n: torch.load(tmp_path / "maps" / f"token_map-{n}.pt", weights_only=True).tolist() for n in (4, 16)}
    out = cli("vocab-map", "coverage", "--target", root / "target", "--prompts", root / "prompts.jsonl",
                  "--corpus", root / "corpus.jsonl", "-n", "4", "-n", "16", "--compat", "specforge",
                  "--map", tmp_path / "hot.pt", "--max-new-tokens", "8", "--cache-dir", tmp_path / "cache", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["stream"]["prompts"] == 3 and data["stream"]["generated_tokens"] == len(stream) > 0
    rows = {r["label"]: r for r in data["rows"]}

    def outside(ids):
        return sum(t not in set(ids) for t in stream)

    assert rows["specforge N=4"]["outside_tokens"] == outside(maps[4])
    assert rows["specforge N=16"]["outside_tokens"] == outside(maps[16])
    hot_row = rows[f"map {tmp_path / 'hot.pt'}"]
    assert hot_row["outside_tokens"] == outside(hot) > 0  # the negative control: a map without half the ids
    assert hot_row["outside_share"] == pytest.approx(outside(hot) / len(stream))
    assert data["counts"]["tokens"] > 0 and data["counts"]["compat"] == "specforge"


def test_coverage_of_a_heads_own_map_and_the_table(coverage_pair):
    root = coverage_pair
    stream = greedy_ids(root / "target", 6)
    from eagle_convert import api

    eagle3 = api.vocab_coverage(str(root / "target"), str(root / "prompts.jsonl"),
                                api.CoverageSources(head=str(root / "eagle3")), max_new_tokens=6)
    from safetensors.torch import load_file

    ids = set((load_file(root / "eagle3" / "model.safetensors")["d2t"] + torch.arange(64)).tolist())
    (row,) = eagle3.rows
    assert row.draft_vocab_size == 64 and row.outside_tokens == sum(t not in ids for t in stream)
    eagle1 = api.vocab_coverage(str(root / "target"), str(root / "prompts.jsonl"),
                                api.CoverageSources(head=str(root / "eagle1")), max_new_tokens=6)
    assert eagle1.rows[0].outside_tokens == 0 and eagle1.rows[0].draft_vocab_size == TinyConfig().vocab_size
    human = cli("vocab-map", "coverage", "--target", root / "target", "--prompts", root / "prompts.jsonl",
                    "--head", root / "eagle3", "--max-new-tokens", "6", "-q")
    assert human.returncode == 0, human.stderr
    assert f"stream: {len(stream)} tokens the target generated greedily over 3 prompts" in human.stdout
    assert f"head {root / 'eagle3'} (d2t)" in human.stdout


def test_coverage_refusals(coverage_pair, tmp_path):
    root = coverage_pair
    nothing = cli("vocab-map", "coverage", "--target", root / "target", "--prompts", root / "prompts.jsonl")
    assert nothing.returncode == 2 and "Nothing to measure" in nothing.stderr
    prompt_only = cli("vocab-map", "coverage", "--target", root / "target", "--prompts", root / "prompts.jsonl",
                          "-n", "4", "--compat", "specforge", "--cache-dir", tmp_path / "cache", "-q")
    assert prompt_only.returncode == 1 and prompt_only.stderr.startswith("error: ")
    assert "counted no token" in " ".join(prompt_only.stderr.split())
    torch.save([1, 1, 2], tmp_path / "dup.pt")
    dup = cli("vocab-map", "coverage", "--target", root / "target", "--prompts", root / "prompts.jsonl",
                  "--map", tmp_path / "dup.pt")
    assert dup.returncode == 1 and "duplicates" in dup.stderr and dup.stdout == ""
