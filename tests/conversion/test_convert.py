"""convert --to vllm-v0 (issue 2): every input variant, the exact output layout, and values equal to their sources."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from support.convert import load_out, tree_fingerprint
from support.golden_sets import GOLDEN_SETS, golden

import eagle_convert
from eagle_convert.testing.tiny import TinyConfig


def golden_target_tensors(path):
    out = {}
    for f in sorted(path.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as st:
            out.update({k: st.get_tensor(k) for k in st.keys()})
    return out


@pytest.mark.parametrize("name", [n for n in GOLDEN_SETS if n.startswith("eagle1")])
def test_golden_eagle1_to_vllm_v0(name, tmp_path):
    root = golden(name)
    before = tree_fingerprint(root)
    out = tmp_path / "out"
    result = eagle_convert.convert(str(root / "draft"), str(root / "target"), out, check_embedding=True)
    cfg, tensors = load_out(out)
    draft_cfg = json.loads((root / "draft" / "config.json").read_text())
    target_cfg = json.loads((root / "target" / "config.json").read_text())
    draft = torch.load(root / "draft" / "pytorch_model.bin", weights_only=True)
    target = golden_target_tensors(root / "target")

    # The wrapper, exactly.
    assert cfg["model_type"] == "eagle" and "architectures" not in cfg
    assert cfg["eagle_fc_bias"] is ("fc.bias" in draft)
    inner = cfg["model"]
    assert "bias" not in inner and "bias" not in cfg
    qwen = "layers.0.self_attn.q_proj.bias" in draft
    assert inner["architectures"] == (["Qwen2ForCausalLM"] if qwen else ["LlamaForCausalLM"])
    assert inner["model_type"] == ("qwen2" if qwen else "llama")
    assert inner["vocab_size"] == target_cfg["vocab_size"]
    assert inner["max_position_embeddings"] == max(target_cfg["max_position_embeddings"],
                                                   draft_cfg["max_position_embeddings"])
    assert inner["rope_theta"] == draft_cfg["rope_theta"] and inner.get("rope_scaling") is None
    assert inner["torch_dtype"] == "float32" == target_cfg["torch_dtype"]  # auto = the target's
    assert inner["tie_word_embeddings"] is False and inner["num_hidden_layers"] == 1

    # Tensors: every draft tensor under its name, equal after the cast; the target's LM head; no norm.
    assert set(tensors) == set(draft) | {"lm_head.weight"}
    for k, v in draft.items():
        assert tensors[k].dtype == torch.float32
        assert torch.equal(tensors[k], v.to(torch.float32)), k
    lm = target.get("lm_head.weight", target["model.embed_tokens.weight"])  # qwen2 set is tied
    assert torch.equal(tensors["lm_head.weight"], lm)
    assert "norm.weight" not in tensors
    assert result.embedding_check["equal"] is True

    # Provenance and model card.
    prov = json.loads((out / "eagle_convert.json").read_text())
    assert prov["tensors"]["lm_head.weight"]["sources"][0]["name"] == (
        "lm_head.weight" if "lm_head.weight" in target else "model.embed_tokens.weight")
    assert set(prov["tensors"]) == set(tensors)
    assert "vllm serve" in (out / "README.md").read_text()
    assert tree_fingerprint(root) == before  # inputs untouched, contents and mtimes


def test_sharded_target_reads_only_the_lm_head_shard(pair, tmp_path, monkeypatch):
    target, draft, ttensors = pair(shards=3)
    from eagle_convert.io.source import LocalSource

    reads = []
    original = LocalSource.read_range

    def spy(self, rel, offset, length, *, key=None):
        if self.root == target.resolve() and rel.endswith(".safetensors"):
            reads.append((rel, key))
        return original(self, rel, offset, length, key=key)

    monkeypatch.setattr(LocalSource, "read_range", spy)
    out = tmp_path / "out"
    eagle_convert.convert(str(draft), str(target), out)
    tensor_reads = {key for _, key in reads if not key.startswith("__header")}
    assert tensor_reads == {"lm_head.weight"}  # and no other target tensor, ever
    assert {rel for rel, _ in reads} == {"model-00003-of-00003.safetensors"}
    _, tensors = load_out(out)
    assert torch.equal(tensors["lm_head.weight"], ttensors["lm_head.weight"])


@pytest.mark.parametrize("variant", ["tied", "bin-sharded", "qwen2", "no-fc-bias", "no-embed", "safetensors-draft"])
def test_input_variants(variant, pair, tmp_path):
    cfg = TinyConfig(tie_word_embeddings=variant == "tied", model_type="qwen2" if variant == "qwen2" else "llama")
    target, draft, ttensors = pair(
        cfg=cfg, shards=3 if variant == "bin-sharded" else 1,
        target_fmt="bin" if variant == "bin-sharded" else "safetensors",
        fc_bias=variant != "no-fc-bias", embed=variant != "no-embed",
        draft_fmt="safetensors" if variant == "safetensors-draft" else "bin")
    out = tmp_path / "out"
    eagle_convert.convert(str(draft), str(target), out, dtype="bfloat16")
    cfg_out, tensors = load_out(out)
    expected_lm = ttensors["model.embed_tokens.weight"] if variant == "tied" else ttensors["lm_head.weight"]
    assert torch.equal(tensors["lm_head.weight"], expected_lm.to(torch.bfloat16))
    assert torch.equal(tensors["embed_tokens.weight"], ttensors["model.embed_tokens.weight"].to(torch.bfloat16))
    assert cfg_out["eagle_fc_bias"] is (variant != "no-fc-bias")
    assert ("fc.bias" in tensors) is (variant != "no-fc-bias")
    assert cfg_out["model"]["torch_dtype"] == "bfloat16"
    assert all(t.dtype == torch.bfloat16 for t in tensors.values())
    if variant == "qwen2":
        assert cfg_out["model"]["architectures"] == ["Qwen2ForCausalLM"]
        assert {f"layers.0.self_attn.{p}_proj.bias" for p in "qkv"} <= set(tensors)


def test_bias_flag_and_tensors_disagree_tensors_win(pair, tmp_path):
    target, draft, _ = pair(fc_bias=False)
    cfg = json.loads((draft / "config.json").read_text())
    cfg["bias"] = True  # says there is an fc bias; there is none
    (draft / "config.json").write_text(json.dumps(cfg))
    result = eagle_convert.convert(str(draft), str(target), tmp_path / "out")
    assert result.plan.config["eagle_fc_bias"] is False
    assert any("following the tensors" in n for n in result.plan.notes)


def test_dry_run_writes_nothing_and_counts_bytes(pair, tmp_path):
    target, draft, ttensors = pair(shards=3)
    out = tmp_path / "out"
    result = eagle_convert.convert(str(draft), str(target), out, dry_run=True)
    assert not out.exists()
    assert result.plan.bytes_read()["target"] == ttensors["lm_head.weight"].nbytes
    names = {t.name for t in result.plan.tensors}
    assert "lm_head.weight" in names and "fc.bias" in names


def test_sharded_output_with_index(pair, tmp_path):
    target, draft, _ = pair()
    out = tmp_path / "out"
    eagle_convert.convert(str(draft), str(target), out, max_shard_size=40_000)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    files = set(index["weight_map"].values())
    assert len(files) > 1 and all((out / f).is_file() for f in files)
    _, tensors = load_out(out)
    assert set(tensors) == set(index["weight_map"])


def test_reconverting_vllm_v0_output_is_identical(pair, tmp_path):
    target, draft, _ = pair()
    first, second = tmp_path / "first", tmp_path / "second"
    eagle_convert.convert(str(draft), str(target), first)
    result = eagle_convert.convert(str(first), str(target), second)
    assert result.detected_layout == "vllm-v0"
    assert load_out(first)[0] == load_out(second)[0]
    a, b = load_out(first)[1], load_out(second)[1]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_drop_reports_each_tensor(pair, tmp_path):
    target, draft, _ = pair(draft_fmt="safetensors")
    from safetensors.torch import load_file, save_file

    tensors = load_file(draft / "model.safetensors")
    tensors["training_step"] = torch.tensor([7])
    save_file(tensors, draft / "model.safetensors")
    with pytest.raises(eagle_convert.errors.UnexpectedTensorError, match="training_step"):
        eagle_convert.convert(str(draft), str(target), tmp_path / "out")
    assert not (tmp_path / "out").exists()
    result = eagle_convert.convert(str(draft), str(target), tmp_path / "out", drop=("training_*",))
    assert result.plan.dropped == (("training_step", "dropped by --drop 'training_*'"),)


def test_differing_embedding_is_reported_with_its_max_difference(pair, tmp_path):
    target, draft, ttensors = pair(draft_fmt="safetensors")
    from safetensors.torch import load_file, save_file

    tensors = load_file(draft / "model.safetensors")
    tensors["embed_tokens.weight"][0, 0] += 0.5  # row 0 is always among the sampled rows
    save_file(tensors, draft / "model.safetensors")
    result = eagle_convert.convert(str(draft), str(target), tmp_path / "out")
    check = result.embedding_check
    assert check["equal"] is False and check["max_abs_diff"] == pytest.approx(0.5, abs=1e-6)
    # The draft's own embedding is what v0 loads: it is kept, not replaced.
    _, out = load_out(tmp_path / "out")
    assert torch.equal(out["embed_tokens.weight"], tensors["embed_tokens.weight"])
