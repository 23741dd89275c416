"""Every target family, from checkpoints transformers itself saved (tests/support/target_families.py): convert
splices the LM head and embedding equal to transformers' own get_output_embeddings() / get_input_embeddings(),
reading only the shards that hold them; an unknown architecture is refused with the way to name the tensors."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file
from support.target_families import FAMILIES, HEADS, INTER, KV, LEGACY, H, V, save_family, saved_names, shard_of

import eagle_convert
from eagle_convert import errors
from eagle_convert.io.source import LocalSource
from eagle_convert.targets import FAMILIES as TABLES
from eagle_convert.testing.tiny import TinyConfig, make_eagle1_head

pytest.importorskip("transformers")

CASES = [(f, tied, orig) for f, (_, ties) in FAMILIES.items() for tied in ties
         for orig in ((True, False) if f in LEGACY else (True,))]


def _id(case) -> str:
    family, tied, orig = case
    return f"{family}-{'tied' if tied else 'untied'}" + ("" if family not in LEGACY else "-old" if orig else "-new")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Every fixture once per module: {case: (folder, transformers' embedding, transformers' LM head)}."""
    root = tmp_path_factory.mktemp("families")
    out = {}
    for case in CASES:
        family, tied, orig = case
        folder = root / _id(case)
        model = save_family(family, folder, tied=tied, original_format=orig)
        out[case] = (folder, model.get_input_embeddings().weight.detach().clone(),
                     model.get_output_embeddings().weight.detach().clone())
    return out


@pytest.fixture(scope="module")
def draft(tmp_path_factory):
    """An EAGLE-1 head for H=32, V=128 without its own embedding: --to vllm-v0 splices the target's LM head and
    embedding, the two tensors under test."""
    folder = tmp_path_factory.mktemp("draft") / "eagle1"
    cfg = TinyConfig(hidden_size=H, vocab_size=V, intermediate_size=INTER, num_attention_heads=HEADS,
                     num_key_value_heads=KV)
    make_eagle1_head(folder, cfg, {}, embed=False, fmt="safetensors")
    return folder


def test_every_family_has_a_table_and_a_fixture():
    assert set(TABLES) == set(FAMILIES)


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_convert_splices_transformers_own_embeddings_reading_only_their_shards(case, built, draft, tmp_path,
                                                                                monkeypatch):
    folder, embed, head = built[case]
    root = folder.resolve()
    reads = []
    original = LocalSource.read_range

    def spy(self, rel, offset, length, *, key=None):
        if self.root == root and rel.endswith(".safetensors"):
            reads.append((rel, key))
        return original(self, rel, offset, length, key=key)

    monkeypatch.setattr(LocalSource, "read_range", spy)
    out = tmp_path / "out"
    result = eagle_convert.convert(str(draft), str(folder), out, to="vllm-v0")
    monkeypatch.undo()
    written = load_file(out / "model.safetensors")
    assert torch.equal(written["lm_head.weight"], head)
    assert torch.equal(written["embed_tokens.weight"], embed)
    embed_name, head_name = saved_names(folder)
    wanted = {embed_name} | ({head_name} if head_name else set())
    assert {key for _, key in reads if not key.startswith("__header")} == wanted
    assert {rel for rel, _ in reads} == {shard_of(folder, n) for n in wanted}
    prov = json.loads((out / "eagle_convert.json").read_text())["tensors"]
    assert prov["lm_head.weight"]["sources"][0]["name"] == (head_name or embed_name)
    assert result.plan.to_dict()["bytes_to_read"]["target"] == len(wanted) * V * H * 4  # float32, each once


def test_pre_2025_names_are_the_ones_transformers_conversion_mapping_documents(built):
    old = {"mistral3": ("language_model.model.embed_tokens.weight", "language_model.lm_head.weight"),
           "gemma3": ("language_model.model.embed_tokens.weight", None),  # gemma3 ships tied
           "qwen2_5_vl": ("model.embed_tokens.weight", "lm_head.weight")}
    for family, names in old.items():
        tied = FAMILIES[family][1][0]
        assert saved_names(built[(family, tied, True)][0]) == names
        new_embed, _ = saved_names(built[(family, tied, False)][0])
        assert new_embed == "model.language_model.embed_tokens.weight"


def _renamed_family(src, dst, model_type: str):
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    config.update(model_type=model_type, architectures=["MysteryForConditionalGeneration"])
    (dst / "config.json").write_text(json.dumps(config))


def test_unknown_architecture_is_refused_with_the_overrides(built, draft, tmp_path):
    folder, embed, head = built[("mistral3", False, True)]
    target = tmp_path / "mystery"
    _renamed_family(folder, target, "mystery_vlm")
    with pytest.raises(errors.LayoutError) as exc:
        eagle_convert.convert(str(draft), str(target), tmp_path / "refused", to="vllm-v0")
    text = str(exc.value)
    assert "unknown architecture" in text and "'mystery_vlm'" in text
    assert all(name in text for name in TABLES) and "--target-lm-head" in text and "--target-embed" in text
    assert not (tmp_path / "refused").exists()
    out = tmp_path / "out"
    eagle_convert.convert(str(draft), str(target), out, to="vllm-v0", target_lm_head="language_model.lm_head.weight",
                          target_embed="language_model.model.embed_tokens.weight")
    written = load_file(out / "model.safetensors")
    assert torch.equal(written["lm_head.weight"], head) and torch.equal(written["embed_tokens.weight"], embed)


def test_unknown_architecture_with_causal_lm_names_converts_with_a_note(built, draft, tmp_path):
    folder, embed, head = built[("llama", False, True)]
    target = tmp_path / "phi"
    _renamed_family(folder, target, "phi3")
    result = eagle_convert.convert(str(draft), str(target), tmp_path / "out", to="vllm-v0")
    assert any("'phi3' is not a known family" in n for n in result.plan.notes)
    assert torch.equal(load_file(tmp_path / "out" / "model.safetensors")["lm_head.weight"], head)


def test_a_wrong_override_names_the_missing_tensor(built, draft, tmp_path):
    folder, _, _ = built[("llama", False, True)]
    with pytest.raises(errors.MissingTensorError, match="no tensor 'nope.weight'"):
        eagle_convert.convert(str(draft), str(folder), tmp_path / "out", to="vllm-v0", target_lm_head="nope.weight")


@pytest.mark.parametrize("family,bench", [("llama", "yes"), ("qwen3_moe", "yes"), ("mixtral", "yes"),
                                          ("qwen3_vl", "yes, text-only"), ("mistral3", "yes, text-only"),
                                          ("gpt_oss", "no"), ("deepseek_v3", "no"), ("llama4", "no"),
                                          ("gemma3", "no"), ("glm4_moe", "no")])
def test_inspect_target_names_family_tensors_and_bench(family, bench, built):
    tied = FAMILIES[family][1][0]
    folder, _, _ = built[(family, tied, True)]
    report = eagle_convert.inspect(str(folder))
    t = report.target
    embed_name, head_name = saved_names(folder)
    assert report.kind == "target" and t["family"] == family and not report.problems
    assert t["lm_head"]["name"] == (head_name or embed_name) and t["embedding"]["name"] == embed_name
    assert t["lm_head"]["file"] == shard_of(folder, head_name or embed_name)
    assert t["bench"].startswith(bench) and ("--engine vllm" in t["bench"]) == (bench == "no")
    assert t["num_hidden_layers"] == 2 and t["hidden_size"] == H


def test_inspect_cli_prints_the_target_section(built):
    import subprocess
    import sys

    folder, _, _ = built[("mistral3", False, True)]
    done = subprocess.run([sys.executable, "-m", "eagle_convert", "inspect", str(folder)], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    assert "target family: mistral3 (multimodal); sizes from text_config" in done.stdout
    assert "lm head: language_model.lm_head.weight in " in done.stdout
    assert "found by: before 2025 (language_model.model.*)" in done.stdout
    assert "bench runner: yes, text-only" in done.stdout


CONVERTED = "convert: LM head and embedding `torch.equal` to transformers', only their shards read"
RUNNER = "runner logits = transformers' (fp32), speculative greedy = plain decoding"
CHECKED = {  # how each family was checked, for docs/targets.md's target table (test_readme_target_table_matches)
    "llama": f"{CONVERTED} (tied, untied); runner: tests/runner/test_runner_transformers.py",
    "mistral": f"{CONVERTED}; runner: tests/runner/test_runner_transformers.py",
    "qwen2": f"{CONVERTED} (tied, untied); runner: tests/runner/test_runner_transformers.py",
    "qwen3": f"{CONVERTED} (tied, untied); runner: tests/runner/test_runner_transformers.py",
    "qwen3_moe": f"{CONVERTED}; {RUNNER} (per-expert and stacked experts); real vLLM 0.32: EAGLE-3 counters = bench's",
    "mixtral": f"{CONVERTED}; {RUNNER}",
    "gpt_oss": f"{CONVERTED}; runner refuses it",
    "deepseek_v3": f"{CONVERTED}; runner refuses it",
    "glm4_moe": f"{CONVERTED}; runner refuses it",
    "llama4": f"{CONVERTED}; runner refuses it",
    "qwen2_5_vl": f"{CONVERTED} (tied, untied; both namings); {RUNNER}, text-only",
    "qwen3_vl": f"{CONVERTED} (tied, untied); runner logits = transformers', text-only",
    "mistral3": f"{CONVERTED} (both namings); {RUNNER}, text-only",
    "gemma3": f"{CONVERTED} (tied; both namings); runner refuses it",
}


def test_readme_target_table_matches():
    from pathlib import Path

    from eagle_convert.targets.family_registry import markdown_table

    readme = (Path(__file__).resolve().parents[2] / "docs" / "targets.md").read_text()
    start = readme.index("<!-- targets-table")
    block = readme[readme.index("\n", start) + 1: readme.index("<!-- /targets-table -->")].strip()
    assert set(CHECKED) == set(TABLES)
    assert block == markdown_table(CHECKED)


def test_eagle3_defaults_come_from_a_multimodal_targets_text_config(tmp_path):
    """A wrapper keeps num_hidden_layers in text_config: the EAGLE-3 default aux layer ids (2, L//2, L-3) use it."""
    from eagle_convert.testing.tiny import make_eagle3_head

    target = tmp_path / "qwen3_vl-8"
    save_family("qwen3_vl", target, num_hidden_layers=8)
    assert "num_hidden_layers" not in json.loads((target / "config.json").read_text())
    cfg = TinyConfig(hidden_size=H, vocab_size=V, intermediate_size=INTER, num_attention_heads=HEADS,
                     num_key_value_heads=KV)
    make_eagle3_head(tmp_path / "draft", cfg, {}, draft_vocab=64)
    result = eagle_convert.convert(str(tmp_path / "draft"), str(target), tmp_path / "out", to="vllm")
    assert json.loads((tmp_path / "out" / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]
    assert any("8-layer target" in n for n in result.plan.notes)
