"""`bench --tree` through the format layer and the CLI: the report's tree fields, SGLang's names for the same shape,
chain == today's chain, and the refusals (one paragraph, exit 1, before any bench)."""

from __future__ import annotations

import json

import pytest
from support.convert import run_cli

import eagle_convert
from eagle_convert.errors import IncomparableReportError, TreeShapeError
from eagle_convert.runner.trees.shapes import TreeOptions
from eagle_convert.testing.tiny import TinyConfig, make_eagle1_head, make_eagle3_head, make_target

PROMPTS = ["t10 t11 t12", "t40 t7 t99 t3"]


@pytest.fixture(scope="module")
def agree(tmp_path_factory):
    """A target that is a function of the current token and an EAGLE-1 head that always agrees with it."""
    root = tmp_path_factory.mktemp("agree")
    cfg = TinyConfig(num_hidden_layers=1)
    tensors = make_target(root / "target", cfg, zero_attention=True)
    make_eagle1_head(root / "head", cfg, tensors, agree=True)
    return root


def bench(root, tree: TreeOptions | None = None, **kw):
    return eagle_convert.bench(str(root / "target"), str(root / "head"), max_new_tokens=20, prompts=PROMPTS,
                               tree=tree, **kw).to_dict()


def test_static_tree_report_on_an_agreeing_head(agree):
    data = bench(agree, TreeOptions(tree="mc_sim_7b_63"))
    assert data["schema_version"] == 4
    assert data["settings"]["k"] == 5 and data["settings"]["tree"]["mode"] == "static"
    assert data["settings"]["tree"]["nodes"] == 25 and len(data["settings"]["tree"]["choices"]) == 25
    acc = data["overall"]["acceptance"]
    assert acc["mean_acceptance_length"] == 6.0 and acc["per_position_rates"] == [1.0] * 5
    assert acc["histogram"][:5] == [0] * 5 and acc["drafted"] == 25 * acc["drafts"]
    assert acc["acceptance_rate"] == pytest.approx(5 / 25)  # accepted / nodes verified, vLLM's tree rate
    assert acc["tree"]["nodes_per_round"] == 25.0
    assert 1.0 < acc["tree"]["predicted_mean_acceptance_length"] <= 26.0
    assert data["lossless"]["identical"] is True
    json.dumps(data, allow_nan=False)


def test_sglang_names_and_eagle_names_are_one_shape(agree):
    sglang = bench(agree, TreeOptions(tree="dynamic", num_steps=3, eagle_topk=2, num_draft_tokens=6), baseline=False)
    eagle = bench(agree, TreeOptions(tree="dynamic", depth=2, top_k=2, tokens=6), baseline=False)
    assert sglang["settings"]["tree"] == eagle["settings"]["tree"] == {
        "mode": "dynamic", "source": "dynamic", "levels": 3, "nodes": 5, "depth": 2, "top_k": 2, "tokens": 6}
    assert sglang["overall"]["acceptance"] == eagle["overall"]["acceptance"]
    assert [p["output_token_ids"] for p in sglang["prompts"]] == [p["output_token_ids"] for p in eagle["prompts"]]
    # --tree sglang on a LlamaForCausalLM target: SGLang's Llama default (5, 4, 8)
    default = bench(agree, TreeOptions(tree="sglang"), baseline=False)["settings"]["tree"]
    assert (default["depth"], default["top_k"], default["tokens"], default["source"]) == (4, 4, 8, "sglang")


def test_tree_chain_is_todays_chain(agree, tmp_path):
    cfg = TinyConfig(num_hidden_layers=8)
    tensors = make_target(tmp_path / "target", cfg)
    make_eagle3_head(tmp_path / "head", cfg, tensors, draft_vocab=96)
    default, chain = bench(tmp_path, k=4), bench(tmp_path, TreeOptions(tree="chain"), k=4)
    for data in (default, chain):
        for p in data["prompts"]:
            p.pop("wall_time_s"), p.pop("baseline_wall_time_s"), p.pop("tokens_per_s"), p.pop("baseline_tokens_per_s")
            p.pop("speedup")
    assert chain["prompts"] == default["prompts"]
    assert chain["settings"]["tree"] == {"mode": "chain", "source": "chain", "levels": 4, "nodes": 4}


def test_refusals_in_the_library(agree, tmp_path):
    with pytest.raises(TreeShapeError, match="holds at most 6 drafted nodes"):
        bench(agree, TreeOptions(tree="dynamic", depth=1, top_k=2, tokens=10))
    with pytest.raises(TreeShapeError, match="vocabulary of 256"):
        bench(agree, TreeOptions(tree="dynamic", depth=1, top_k=300, tokens=10))
    with pytest.raises(TreeShapeError, match=r"not prefix-closed: \[1\] is missing"):
        bench(agree, TreeOptions(tree="[(0,), (1, 0)]"))
    with pytest.raises(TreeShapeError, match="listing a path twice|lists a path twice"):
        bench(agree, TreeOptions(tree="[[0], [0]]"))
    with pytest.raises(TreeShapeError, match="all three"):
        bench(agree, TreeOptions(tree="dynamic", num_steps=3))
    with pytest.raises(TreeShapeError, match="Both the EAGLE"):
        bench(agree, TreeOptions(tree="dynamic", depth=2, num_steps=3, eagle_topk=2, num_draft_tokens=4))
    with pytest.raises(TreeShapeError, match="takes no depth"):
        bench(agree, TreeOptions(tree="mc_sim_7b_63", depth=2))
    with pytest.raises(TreeShapeError, match="neither a tree kind"):
        bench(agree, TreeOptions(tree=str(tmp_path / "missing.json")))
    with pytest.raises(IncomparableReportError, match="does not take a tree"):
        bench(agree, TreeOptions(tree="mc_sim_7b_63"), reference_draft=str(agree / "head"))


def test_cli_json_file_tree_and_refusal(agree, tmp_path):
    tree = tmp_path / "tree.json"
    tree.write_text(json.dumps([[0], [1], [0, 0], [0, 1], [0, 0, 0]]))
    common = ["bench", "--target", agree / "target", "--draft", agree / "head", "--max-new-tokens", "12",
              "--no-baseline", "--quiet"]
    good = run_cli(*common, "--tree", tree, "--json")
    assert good.returncode == 0, good.stderr
    data = json.loads(good.stdout)
    assert data["settings"]["tree"]["choices"] == [[0], [1], [0, 0], [0, 1], [0, 0, 0]]
    assert data["overall"]["acceptance"]["mean_acceptance_length"] == 4.0
    human = run_cli(*common, "--tree", tree)
    assert human.returncode == 0 and "5 nodes verified per round" in human.stdout
    bad = run_cli(*common, "--tree", "dynamic", "--tree-depth", "1", "--tree-top-k", "2", "--tree-tokens", "9")
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr.startswith("error: A dynamic tree of depth 1 and top-k 2 holds at most 6 drafted nodes")
    assert "Lower --tree-tokens to at most 7" in bad.stderr and "Traceback" not in bad.stderr


def test_uniform_trees_and_the_sweep_grid():
    from eagle_convert.benchmark.sweep import sweep_shapes, uniform_tree

    tree = uniform_tree((2, 4))
    assert tree.choices == ((0,), (1,), (0, 0), (0, 1), (1, 0), (1, 1))
    assert tree.serve_flags()["vllm"] == ('"num_speculative_tokens": 6, "speculative_token_tree": '
                                          '"[(0,), (1,), (0, 0), (0, 1), (1, 0), (1, 1)]"')
    with pytest.raises(ValueError, match="multiple"):
        uniform_tree((2, 3))
    shapes = sweep_shapes()
    dynamic = [(s.tokens, s.depth, s.top_k) for s in shapes if s.mode == "dynamic"]
    assert (64, 3, 4) not in dynamic and (64, 3, 8) in dynamic  # 63 nodes do not fit 4 + 3 * 16
    assert all(s.tokens - 1 <= s.top_k + s.depth * s.top_k ** 2 for s in shapes if s.mode == "dynamic")


def test_sweep_ranks_shapes_and_names_serve_flags(agree):
    from eagle_convert.benchmark.sweep import run_sweep, sweep_table, uniform_tree
    from eagle_convert.runner.trees.shapes import dynamic_tree

    result = run_sweep(str(agree / "target"), str(agree / "head"), k=2, prompts=PROMPTS, num_prompts=1,
                       max_new_tokens=12, shapes=[dynamic_tree(3, 2, 5), uniform_tree((1, 1, 1, 1))])
    assert [r["tau"] for r in result["rows"]] == [3.0, 5.0, 5.0]  # the agreeing head fills every level
    assert result["best"]["shape"] in {r["shape"] for r in result["rows"]}
    assert result["rows"][1]["tree"]["depth"] == 3
    assert result["best_for_vllm"]["shape"] in ("chain k=2", "static uniform 1-1-1-1 (4 nodes)")
    assert result["best_for_vllm"]["serve_flags"]["vllm"].startswith('"num_speculative_tokens": ')
    line = next(x for x in sweep_table(result).splitlines() if "vLLM speculative_config" in x)
    config = json.loads(line.split("speculative_config: ", 1)[1])  # a whole config, the method named (issue 29)
    assert config["method"] == "eagle" and config["num_speculative_tokens"] >= 2


def test_sweep_loads_the_target_once(agree, monkeypatch):
    from eagle_convert.benchmark import our_bench
    from eagle_convert.benchmark.sweep import run_sweep, uniform_tree

    loads = []
    real = our_bench.load_target
    monkeypatch.setattr(our_bench, "load_target", lambda *a, **kw: loads.append(1) or real(*a, **kw))
    result = run_sweep(str(agree / "target"), str(agree / "head"), k=2, prompts=PROMPTS, num_prompts=1,
                       max_new_tokens=8, shapes=[uniform_tree((1, 1)), uniform_tree((2, 2))])
    assert len(result["rows"]) == 3 and len(loads) == 1
    assert [r["tau"] for r in result["rows"]] == [3.0, 3.0, 3.0]  # a shared target still decodes every shape right
