"""`bench --token-map` (FR-Spec hot-token maps, SGLang's --speculative-token-map): an EAGLE-1 head whose LM head keeps
only the map's rows. The output stays the target's own, a full-vocabulary map changes nothing, a restricted one
changes the counters (negative control), the head proposes only mapped ids, and bad maps are refused."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
import torch
from click.testing import CliRunner

import eagle_convert
from eagle_convert.cli.main import main
from eagle_convert.errors import UnsupportedConversionError
from eagle_convert.runner.heads import build_draft_head
from eagle_convert.runner.hot_tokens import restrict_lm_head
from eagle_convert.runner.trees.shapes import TreeOptions
from eagle_convert.testing.tiny import (
    TinyConfig,
    eagle1_head_tensors,
    eagle1_release_config,
    make_eagle1_head,
    make_eagle3_head,
    make_target,
    save_checkpoint,
)
from eagle_convert.vocab.formats import FORMATS
from eagle_convert.vocab.map import VocabMap
from eagle_convert.vocab.rules import VocabMapError

PROMPTS = ["t10 t11 t12", "t40 t7 t99 t3", "t5 t6 t7 t8 t9"]
VOCAB = TinyConfig().vocab_size
TREES = [None, TreeOptions(tree="dynamic", depth=3, top_k=3, tokens=8),
         TreeOptions(tree="mc_sim_7b_63")]


def cli(*args):
    """The CLI in this process (an interpreter start per call would cost most of these tests' time); an unexpected
    exception is raised, not counted as exit 1."""
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return SimpleNamespace(returncode=result.exit_code, stdout=result.stdout, stderr=result.stderr)


@pytest.fixture(scope="module")
def heads(tmp_path_factory):
    """On a target that is a function of the current token: an EAGLE-1 head that always agrees with it, the same
    head with noise in fc (it accepts some first drafts, not all: `partial`); and an EAGLE-3 head on its own target."""
    root = tmp_path_factory.mktemp("token_map")
    cfg = TinyConfig(num_hidden_layers=1)
    tensors = make_target(root / "target", cfg, zero_attention=True)
    make_eagle1_head(root / "agree", cfg, tensors, agree=True)
    partial = eagle1_head_tensors(cfg, tensors, agree=True)
    noise = torch.randn(partial["fc.weight"].shape, generator=torch.Generator().manual_seed(5))
    partial["fc.weight"] += 0.6 * noise / cfg.hidden_size ** 0.5
    save_checkpoint(root / "partial", eagle1_release_config(cfg, fc_bias=True), partial, fmt="bin")
    eight = TinyConfig(num_hidden_layers=8)
    make_eagle3_head(root / "eagle3", eight, make_target(root / "target8", eight))
    return root


def save_map(path, ids) -> str:
    torch.save(ids, path)
    return str(path)


def bench(heads, head="partial", target="target", **kw) -> dict:
    return eagle_convert.bench(str(heads / target), str(heads / head), k=3, max_new_tokens=16, prompts=PROMPTS,
                               **kw).to_dict()


def counters(data: dict, *, predicted: bool = True) -> dict:
    """Acceptance and output, without timings or settings. `predicted` False: without a tree's predicted τ (a sum of
    exp(log-softmax) that a permuted vocabulary rounds differently in the last bits; not a counter)."""
    def acceptance(block: dict) -> dict:
        if predicted or "tree" not in block:
            return block
        return {**block, "tree": {k: v for k, v in block["tree"].items() if k != "predicted_mean_acceptance_length"}}

    return {"overall": acceptance(data["overall"]["acceptance"]), "lossless": data["lossless"],
            "prompts": [(acceptance(p["acceptance"]), p["output_token_ids"], p["accepted_per_round"])
                        for p in data["prompts"]]}


@pytest.mark.parametrize("tree", TREES, ids=["chain", "dynamic", "static"])
def test_full_vocab_map_gives_the_counters_of_no_map(heads, tmp_path, tree):
    plain = bench(heads, tree=tree)
    drafted, accepted = (plain["overall"]["acceptance"][key] for key in ("drafted", "accepted"))
    assert 0 < accepted < drafted  # partial acceptance: a wrong mapping of head ids would show
    ascending = save_map(tmp_path / "full.pt", list(range(VOCAB)))
    mapped = bench(heads, tree=tree, token_map=ascending)
    assert counters(mapped) == counters(plain)  # the same rows in the same order: bit for bit
    assert mapped["settings"]["token_map"] == {"path": ascending, "hot_tokens": VOCAB, "vocab_size": VOCAB}
    assert "token_map" not in plain["settings"]
    # in another order, head id i is target id map[i]: the same drafts, so the same counters
    shuffled = save_map(tmp_path / "shuffled.pt", torch.randperm(VOCAB, generator=torch.Generator().manual_seed(3)))
    permuted = bench(heads, tree=tree, token_map=shuffled)
    assert counters(permuted, predicted=False) == counters(plain, predicted=False)
    if tree is not None:
        assert permuted["overall"]["acceptance"]["tree"]["predicted_mean_acceptance_length"] == pytest.approx(
            plain["overall"]["acceptance"]["tree"]["predicted_mean_acceptance_length"], rel=1e-6)


@pytest.mark.parametrize("tree", TREES, ids=["chain", "dynamic", "static"])
def test_restricted_map_keeps_the_output_and_changes_the_counters(heads, tmp_path, tree):
    """The agreeing head accepts every draft; a map without half of the tokens the target emits must cost acceptance
    (the negative control) while the output stays plain greedy decoding's, token for token."""
    plain = bench(heads, "agree", tree=tree)
    emitted = sorted({t for p in plain["prompts"] for turn in p["output_token_ids"] for t in turn})
    dropped = set(emitted[::2])
    restricted = save_map(tmp_path / "hot.pt", [i for i in range(VOCAB) if i not in dropped])
    mapped = bench(heads, "agree", tree=tree, token_map=restricted)
    assert mapped["lossless"] == {"mode": "exact", "identical": True, "diverged_prompts": []}
    assert [p["output_token_ids"] for p in mapped["prompts"]] == [p["output_token_ids"] for p in plain["prompts"]]
    full_tau, mapped_tau = (d["overall"]["acceptance"]["mean_acceptance_length"] for d in (plain, mapped))
    assert full_tau == 4.0 if tree is None else full_tau > 3.0
    assert mapped_tau < full_tau


def test_restricted_head_proposes_only_mapped_ids(heads):
    from eagle_convert.benchmark.session import load_target
    from eagle_convert.checkpoint.open import open_input
    from eagle_convert.draft.load import load_draft, tensor_reader
    from eagle_convert.runner.speculate import speculative_generate
    from eagle_convert.runner.trees.shapes import dynamic_tree
    from eagle_convert.runner.trees.tree_draft import draft_tree

    target = load_target(str(heads / "target"), dtype=torch.float32, device="cpu")
    draft = load_draft(open_input(str(heads / "partial"), role="draft").checkpoint,
                       TinyConfig(num_hidden_layers=1).hf_config())
    hot = torch.arange(7, VOCAB, 5)  # every 5th id from 7: 50 ids, none below 7
    head = build_draft_head(draft.spec, tensor_reader(draft), target_embedding=target.embed_weight,
                            target_lm_head=target.lm_head_weight, hot_token_ids=hot)
    assert head.lm_head.shape == (len(hot), TinyConfig().hidden_size)
    assert torch.equal(head.lm_head, target.lm_head_weight[hot])  # sliced once, at load
    result = speculative_generate(target, head, [5, 9, 13, 40], k=3, max_new_tokens=24)
    drafted = {t for round_ in result.drafted_per_round for t in round_}
    assert drafted and drafted <= set(hot.tolist())
    # a tree over the same head: every node but the root is a mapped id
    prompt = torch.tensor([[5, 9, 13, 40]])
    out = target(prompt, range(4))
    first = head(torch.tensor([[9, 13, 40, 3]]), head.target_feature(out), range(4), from_target=True,
                 last_logits_only=True)
    tree = draft_tree(head, first, torch.tensor(3), 4, dynamic_tree(depth=3, top_k=4, tokens=12))
    assert tree.size == 12 and set(tree.tokens[1:].tolist()) <= set(hot.tolist())


def test_sampling_with_a_map_stays_in_the_target_vocab(heads, tmp_path):
    """temperature > 0: q is scattered back to target ids (mapped tokens only), so speculative sampling still runs."""
    hot = save_map(tmp_path / "hot.pt", torch.arange(0, VOCAB, 2))
    data = bench(heads, temperature=0.8, token_map=hot, seed=1)
    assert data["overall"]["generated_tokens"] > 0
    assert all(0 <= t < VOCAB for p in data["prompts"] for turn in p["output_token_ids"] for t in turn)


FINDINGS = {  # a file, the error finding the one map check (vocab/check.py) names for it
    "out_of_range": (lambda: torch.tensor([0, 5, VOCAB]), "out-of-range"),
    "negative": (lambda: [3, -1, 4], "out-of-range"),
    "duplicates": (lambda: torch.tensor([4, 9, 4, 10]), "duplicates"),
    "float": (lambda: torch.tensor([1.0, 2.0, 3.5]), "bad-dtype"),
    "bool_t2d": (lambda: torch.ones(VOCAB, dtype=torch.bool), "bad-dtype"),
    "two_dims": (lambda: torch.arange(6).view(2, 3), "bad-dtype"),
    "empty": (lambda: [], "empty"),
}
UNREADABLE = {  # a file the reader refuses before any check, what it says
    "dict_without_d2t": (lambda: {"ids": torch.arange(3)}, "holds no {'d2t', 't2d'} dict"),
    "float_list": (lambda: [1.0, 2.5], "2 of them float (e.g. 1.0): a list of integer target ids was expected"),
    "zero_bytes": (None, "is empty (0 bytes)"),
}
BAD_MAPS = {**{k: (make, f"{name}: ") for k, (make, name) in FINDINGS.items()}, **UNREADABLE}


def save_bad_map(tmp_path, name: str) -> str:
    """token_map_NAME.pt: the name says SGLang's format, so `vocab-map check` reads it as bench and convert do."""
    make = BAD_MAPS[name][0]
    path = tmp_path / f"token_map_{name}.pt"
    if make is None:
        path.write_bytes(b"")
        return str(path)
    return save_map(path, make())


@pytest.mark.parametrize("name", list(BAD_MAPS))
def test_bad_map_files_are_refused_before_the_bench(heads, tmp_path, name):
    with pytest.raises(VocabMapError, match=re.escape(BAD_MAPS[name][1])):
        bench(heads, token_map=save_bad_map(tmp_path, name))


@pytest.mark.parametrize("name", list(BAD_MAPS))
def test_check_bench_and_convert_give_one_verdict(heads, tmp_path, name):
    """`vocab-map check --target-vocab-size V` (and without a target), `bench --token-map` and `convert --token-map`
    refuse the same map for the same reason: one rule set (the empty map passed `check` before)."""
    path, says = save_bad_map(tmp_path, name), BAD_MAPS[name][1]
    with pytest.raises(VocabMapError) as refused:
        bench(heads, token_map=path)
    out = tmp_path / "out"
    converted = cli("convert", heads / "partial", "-t", heads / "target", "--to", "sglang", "-o", out,
                    "--token-map", path)
    assert converted.returncode == 1 and not out.exists()
    targets = (["--target-vocab-size", VOCAB],) + (() if name == "out_of_range" else ([],))  # VOCAB: in range alone
    for vocab in targets:
        check = cli("vocab-map", "check", path, *vocab)
        assert check.returncode == 1, (vocab, check.stdout)
        said = " ".join((check.stdout + check.stderr).split())
        assert says in said and says in str(refused.value) and says in " ".join(converted.stderr.split())
    if name in FINDINGS:  # the same error findings, by name, everywhere
        check = json.loads(cli("vocab-map", "check", path, "--target-vocab-size", VOCAB, "--json").stdout)
        errors = [f["name"] for f in check["findings"] if f["error"]]
        assert errors == [FINDINGS[name][1]]
        assert all(f"{e}: " in str(refused.value) and f"{e}: " in converted.stderr for e in errors)


def test_a_good_map_passes_check_and_bench_alike(heads, tmp_path):  # negative control of the verdict test
    path = save_map(tmp_path / "token_map.pt", [3, 4, 9])
    assert cli("vocab-map", "check", path, "--target-vocab-size", VOCAB).returncode == 0
    assert bench(heads, token_map=path)["settings"]["token_map"]["hot_tokens"] == 3


@pytest.mark.parametrize("ids,says", [
    (torch.tensor([0, 5, VOCAB]), f"out-of-range: d2t maps 1 draft ids outside the target vocabulary [0, {VOCAB})"),
    (torch.tensor([4, 9, 4]), "duplicates: "),
    (torch.tensor([1.0, 2.0]), "bad-dtype: d2t (the map's ids) is torch.float32"),
    (torch.ones(3, dtype=torch.bool), "bad-dtype: d2t (the map's ids) is torch.bool of shape [3] (a mask"),
    (torch.zeros(0, dtype=torch.int64), "empty: the map holds no draft ids"),
])
def test_the_runner_refuses_bad_ids_given_directly(ids, says):
    """By the same check (vocab/check.py) as a map file: a Python caller gets the findings `vocab-map check` names."""
    with pytest.raises(VocabMapError, match=re.escape(says)):
        restrict_lm_head(torch.zeros(VOCAB, 8), ids)
    lm_head, mapped = restrict_lm_head(torch.arange(VOCAB * 2.0).view(VOCAB, 2), torch.tensor([7, 3]))
    assert mapped.tolist() == [7, 3] and lm_head[:, 0].tolist() == [14.0, 6.0]  # negative control


def test_every_stored_format_is_a_token_map(heads, tmp_path):
    """The formats registry's files give the same head as SGLang's list of the same ids (ascending, so every format
    can hold them)."""
    ids = list(range(0, VOCAB, 3))
    reference = counters(bench(heads, token_map=save_map(tmp_path / "hot.pt", ids)))
    vmap = VocabMap.from_ids(ids, VOCAB)
    for name in ("specforge", "speculators", "safetensors"):
        folder = tmp_path / name
        folder.mkdir()
        FORMATS[name].write(vmap, folder)
        first = sorted(folder.iterdir())[0]
        assert counters(bench(heads, token_map=str(first))) == reference, name
    plain = counters(bench(heads))
    assert reference != plain  # the map matters here: the comparisons above could not pass by ignoring it


def test_bad_maps_and_eagle3_heads_exit_1_with_one_paragraph(heads, tmp_path):
    dup = save_map(tmp_path / "dup.pt", torch.tensor([4, 9, 4]))
    ok = save_map(tmp_path / "ok.pt", torch.arange(64))
    not_torch = tmp_path / "map.pt"
    not_torch.write_text("1 2 3\n")
    cases = [("partial", "target", dup, "duplicates"), ("partial", "target", str(not_torch), "cannot be read"),
             ("eagle3", "target8", ok, "EAGLE-3 head does not draft with")]
    for head, target, path, says in cases:
        out = cli("bench", "--target", heads / target, "--draft", heads / head, "--max-new-tokens", "4",
                      "--token-map", path, "-q")
        assert out.returncode == 1, (head, path, out.stderr)
        assert out.stdout == ""
        assert out.stderr.startswith("error: ") and out.stderr.count("error:") == 1 and "\n\n" not in out.stderr
        assert says in " ".join(out.stderr.split()), out.stderr
        assert "Traceback" not in out.stderr
    with pytest.raises(UnsupportedConversionError, match="ignores --speculative-token-map for EAGLE3"):
        bench(heads, "eagle3", "target8", token_map=ok)


def test_cli_token_map_json_and_human_line(heads, tmp_path):
    hot = save_map(tmp_path / "hot.pt", list(range(0, VOCAB, 2)))
    out = cli("bench", "--target", heads / "target", "--draft", heads / "partial", "--max-new-tokens", "6",
                  "--token-map", hot, "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["settings"]["token_map"]["hot_tokens"] == VOCAB // 2
    assert data["lossless"]["identical"] is True
    human = cli("bench", "--target", heads / "target", "--draft", heads / "partial", "--max-new-tokens", "6",
                    "--token-map", hot, "-q")
    assert f"restricted to {VOCAB // 2} of {VOCAB} target tokens" in human.stdout
    engine = cli("bench", "--target", heads / "target", "--draft", heads / "partial", "--token-map", hot,
                     "--engine", "vllm")
    assert engine.returncode == 2 and "--token-map" in engine.stderr


def test_convert_to_sglang_copies_the_checked_map_and_prints_the_flag(heads, tmp_path):
    hot = list(range(0, VOCAB, 2))
    source = tmp_path / "specforge"
    source.mkdir()
    FORMATS["specforge"].write(VocabMap.from_ids(hot, VOCAB), source)  # any registry format: written as SGLang's
    out = tmp_path / "out"
    done = cli("convert", heads / "partial", "-t", heads / "target", "--to", "sglang", "-o", out, "--token-map",
                   next(source.iterdir()), "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    written = out / f"token_map-{len(hot)}.pt"
    assert data["token_map"]["file"] == written.name and data["token_map"]["hot_tokens"] == len(hot)
    assert data["serve_command"].endswith(f"--speculative-token-map {written.resolve()}")
    ids = torch.load(written, weights_only=True)
    assert ids.dtype == torch.int64 and ids.tolist() == hot  # what SGLang's load_token_map reads
    assert json.loads((out / "eagle_convert.json").read_text())["token_map"]["file"] == written.name
    assert f"--speculative-token-map {written.resolve()}" in (out / "README.md").read_text()
    # the converted head with its copied map drafts exactly as the raw head with the map it was given
    assert counters(bench(heads, token_map=str(written))) == counters(
        eagle_convert.bench(str(heads / "target"), str(out), k=3, max_new_tokens=16, prompts=PROMPTS,
                            token_map=str(written)).to_dict())
    assert "--speculative-token-map" not in eagle_convert.convert(
        str(heads / "partial"), str(heads / "target"), tmp_path / "plain", to="sglang").plan.serve_command


@pytest.mark.parametrize("case", ["vllm", "eagle3", "out_of_range"])
def test_convert_token_map_refusals_write_nothing(heads, tmp_path, case):
    good, bad = save_map(tmp_path / "hot.pt", [1, 2, 3]), save_map(tmp_path / "bad.pt", [1, VOCAB + 5])
    draft, target, to, path, says = {
        "vllm": ("partial", "target", "vllm", good, "the vllm layout's engine has no hot-token map"),
        "eagle3": ("eagle3", "target8", "sglang", good, "EAGLE-3 head does not draft with"),
        "out_of_range": ("partial", "target", "sglang", bad, "out-of-range"),
    }[case]
    out = tmp_path / "out"
    done = cli("convert", heads / draft, "-t", heads / target, "--to", to, "-o", out, "--token-map", path)
    assert done.returncode == 1 and done.stdout == ""
    assert says in " ".join(done.stderr.split())
    assert not out.exists() and not list(tmp_path.glob(".out*"))
