"""Every runner feature at any length the target allows: chains and trees past the caches' first 256 slots (each
cache, target's and head's, made to grow, and checked to have grown), through the library and through the CLI bench
with its defaults; and the refusals of what the target cannot run (too few layers for a head's default aux ids, a
prompt past max_position_embeddings), one paragraph each, exit 1."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from support.convert import run_cli
from support.sampling import partially_agreeing_pair, prompt

import eagle_convert
from eagle_convert.benchmark.prompts import BUILTIN_PROMPTS
from eagle_convert.errors import PromptTooLongError, ShapeMismatchError
from eagle_convert.kinds import EAGLE1
from eagle_convert.runner.speculate import plain_generate, speculative_generate
from eagle_convert.runner.trees.shapes import TreeOptions, resolve_tree
from eagle_convert.runner.trees.tree_draft import draft_tree
from eagle_convert.runner.trees.tree_speculate import tree_generate
from eagle_convert.runner.trees.verify import commit_path, verify_tree
from eagle_convert.testing.tiny import DEMO_CONFIG, TinyConfig, make_eagle1_head, make_eagle3_head, make_target

INITIAL_SLOTS = 256  # KVCache's first capacity: a run past it must grow every cache
SHAPES = ("chain", "dynamic", "sglang", "mc_sim_7b_63")


def shape_named(name: str, config: dict):
    return resolve_tree(TreeOptions(tree=name), k=3, draft_kind=EAGLE1, target_config=config)


def capacities(target, head) -> tuple[int, int]:
    return target.layers[0].attention.cache.k.shape[2], head.attention.cache.k.shape[2]


def generate(target, head, ids, shape, max_new_tokens):
    if shape.mode == "chain":
        return speculative_generate(target, head, ids, k=shape.k, max_new_tokens=max_new_tokens)
    return tree_generate(target, head, ids, shape=shape, max_new_tokens=max_new_tokens)


@pytest.mark.parametrize("name", SHAPES)
def test_a_prompt_near_the_first_capacity_grows_every_cache_and_stays_lossless(name):
    """A 250-token prompt fits the first 256 slots, so the first growth comes from a round's verify (tree rows or
    k+1 chain rows) and the head's drafting rows, inside the forwards, before a path commit."""
    target, head = partially_agreeing_pair(seed=3)
    shape = shape_named(name, {"architectures": ["LlamaForCausalLM"]})
    ids = prompt(3, 250, 64)
    result = generate(target, head, ids, shape, 64)
    assert capacities(target, head) == (2 * INITIAL_SLOTS, 2 * INITIAL_SLOTS)  # the growth path was reached
    assert result.tokens == plain_generate(target, ids, max_new_tokens=64)
    assert sum(result.accepted_per_round) > 0


@pytest.mark.parametrize("name", SHAPES)
def test_short_prompt_with_256_new_tokens_grows_every_cache_and_stays_lossless(name):
    target, head = partially_agreeing_pair(seed=4)
    shape = shape_named(name, {"architectures": ["LlamaForCausalLM"]})
    ids = prompt(4, 12, 64)
    result = generate(target, head, ids, shape, 256)
    assert len(result.tokens) == 256 and min(capacities(target, head)) > INITIAL_SLOTS
    assert result.tokens == plain_generate(target, ids, max_new_tokens=256)


@pytest.mark.parametrize("name", ["dynamic", "mc_sim_7b_63"])
def test_sampled_trees_run_past_the_first_capacity(name):
    target, head = partially_agreeing_pair(seed=6)
    shape = shape_named(name, {})
    result = tree_generate(target, head, prompt(6, 250, 64), shape=shape, max_new_tokens=64, temperature=0.8,
                           generator=torch.Generator().manual_seed(0))
    assert len(result.tokens) == 64 and min(capacities(target, head)) > INITIAL_SLOTS
    assert sum(result.accepted_per_round) > 0


def test_tree_rows_that_grow_the_caches_commit_like_a_sequential_pass():
    """The tree's own forwards grow both caches (target verify, head expansion); the committed path then holds
    exactly the KV a plain forward over the accepted tokens writes."""
    target, head = partially_agreeing_pair(seed=5)
    ids = prompt(5, 250, 64)
    out = target(torch.tensor([ids]), range(250), last_logits_only=True)
    root = out.logits[0, -1].argmax()
    first = head(torch.tensor([ids[1:] + [int(root)]]), head.target_feature(out), range(250), from_target=True,
                 last_logits_only=True)
    assert capacities(target, head) == (INITIAL_SLOTS, INITIAL_SLOTS)
    tree = draft_tree(head, first, root, 250, shape_named("mc_sim_7b_63", {}))
    assert capacities(target, head)[1] > INITIAL_SLOTS  # grown by the expansion rows
    verify_tree(target, tree, 250)
    assert capacities(target, head)[0] > INITIAL_SLOTS  # grown by the tree's rows
    grandchild = tree.parents.tolist().index(2)  # a child of node 2, the root's 2nd child
    path = [0, 2, grandchild]  # off the first path, so rows really move
    commit_path(target, path, 250)  # outside any inference mode, as a caller may
    end = 250 + len(path)
    moved = [(layer.attention.cache.k[:, :, :end].clone(), layer.attention.cache.v[:, :, :end].clone())
             for layer in target.layers]
    target(tree.tokens[path].view(1, -1), range(250, end))
    for (k, v), layer in zip(moved, target.layers):
        torch.testing.assert_close(k, layer.attention.cache.k[:, :, :end], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(v, layer.attention.cache.v[:, :, :end], atol=1e-5, rtol=1e-5)


# ---- the CLI bench with its defaults (256 new tokens) on the demo pair ---------------------------------------------

@pytest.fixture(scope="module")
def demo_pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo-pair")
    tensors = make_target(root / "target", DEMO_CONFIG, zero_attention=True)
    make_eagle1_head(root / "head", DEMO_CONFIG, tensors, agree=True, fc_bias=True)
    (root / "one.jsonl").write_text(json.dumps({"prompt": BUILTIN_PROMPTS[0].turns[0]}) + "\n")
    return root


@pytest.mark.parametrize("name", SHAPES[1:])  # trees; chains at these lengths: the library tests above
def test_cli_bench_with_default_new_tokens_runs_past_the_first_capacity(demo_pair, name):
    run = run_cli("bench", "-t", demo_pair / "target", "-d", demo_pair / "head", "--tree", name, "--json", "-q",
                  "--prompts", demo_pair / "one.jsonl")
    assert run.returncode == 0, run.stderr[-3000:]
    data = json.loads(run.stdout)
    item = data["prompts"][0]
    assert item["prompt_tokens"][0] + item["generated_tokens"] > INITIAL_SLOTS  # the growth path was reached
    assert data["overall"]["acceptance"]["accepted"] > 0 and data["lossless"]["identical"] is True


# ---- what the target cannot run ---------------------------------------------------------------------------------

def one_paragraph(text: str) -> str:
    return " ".join(text.split())


def test_eagle3_head_whose_default_aux_ids_the_target_lacks_is_one_paragraph_exit_1(tmp_path):
    cfg = TinyConfig(num_hidden_layers=1)
    tensors = make_target(tmp_path / "target", cfg)
    make_eagle3_head(tmp_path / "head", cfg, tensors)
    config = json.loads((tmp_path / "head" / "config.json").read_text())
    assert "eagle_aux_hidden_state_layer_ids" not in config  # the ids come from EAGLE-3's default
    with pytest.raises(ShapeMismatchError, match=r"default layers .* L = 1 are \[2, 0, -2\], but the target has 1 "):
        eagle_convert.bench(str(tmp_path / "target"), str(tmp_path / "head"), max_new_tokens=4, prompts=["t1 t2"])
    run = run_cli("bench", "-t", tmp_path / "target", "-d", tmp_path / "head", "--max-new-tokens", "4", "-q")
    assert run.returncode == 1 and "Traceback" not in run.stderr
    message = one_paragraph(run.stderr)
    assert "target has 1 layer(s)" in message and "eagle_aux_hidden_state_layer_ids" in message
    assert "aux layer ids (2, 0, -2)" not in message


def test_aux_ids_written_in_the_config_are_named_as_the_configs(tmp_path):
    cfg = TinyConfig(num_hidden_layers=2)
    tensors = make_target(tmp_path / "target", cfg)
    make_eagle3_head(tmp_path / "head", cfg, tensors, aux_layer_ids=[0, 1, 5])
    with pytest.raises(ShapeMismatchError, match=r"the layers its config names .* \[0, 1, 5\], but the target has 2"):
        eagle_convert.bench(str(tmp_path / "target"), str(tmp_path / "head"), max_new_tokens=4, prompts=["t1 t2"])


@pytest.fixture(scope="module")
def short_context(demo_pair, tmp_path_factory):
    """The demo's pair with a target that states a 64-position context."""
    root = tmp_path_factory.mktemp("short-context")
    shutil.copytree(demo_pair / "target", root / "target")
    config = json.loads((root / "target" / "config.json").read_text())
    (root / "target" / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 64}))
    (root / "long.jsonl").write_text(json.dumps({"id": "long", "prompt_ids": list(range(10, 50))}) + "\n")
    return root


def test_prompt_plus_new_tokens_past_max_position_embeddings_is_refused(demo_pair, short_context):
    run = run_cli("bench", "-t", short_context / "target", "-d", demo_pair / "head", "--prompts",
                  short_context / "long.jsonl", "--max-new-tokens", "25", "-q")
    assert run.returncode == 1 and "Traceback" not in run.stderr and run.stdout == ""
    message = one_paragraph(run.stderr)
    assert "Prompt 'long' is 40 tokens long" in message and "65 positions" in message
    assert "max_position_embeddings (64)" in message and "--max-new-tokens to at most 24" in message


def test_prompt_that_exactly_fills_the_context_is_benched(demo_pair, short_context):
    report = eagle_convert.bench(str(short_context / "target"), str(demo_pair / "head"), max_new_tokens=24,
                                 prompts=short_context / "long.jsonl", progress=False)
    assert report.prompts[0].prompt_tokens == [40] and report.to_dict()["overall"]["generated_tokens"] == 24
    with pytest.raises(PromptTooLongError, match="shorten the prompt"):
        eagle_convert.bench(str(short_context / "target"), str(demo_pair / "head"), max_new_tokens=25,
                            prompts=short_context / "long.jsonl", progress=False)
