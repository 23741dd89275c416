"""`convert --to gguf` of a DFlash head (layouts/gguf_dflash.py), offline: the keys llama.cpp b11434's converter
writes (values written out by hand from conversion/qwen.py DFlashModel, not computed from the module), llama.cpp's
tensor names with the values bit-equal to the head's, the taps counted as llama.cpp reads them, causal always stated,
refusals by name, and inspect naming the output. The llama.cpp tier (test_gguf_dflash_llamacpp.py) compares with the
converter itself and runs the file."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

import eagle_convert
from eagle_convert.errors import EagleConvertError
from eagle_convert.io.gguf_file import read_gguf
from eagle_convert.testing.dflash import build_dflash_set


@pytest.fixture(scope="module")
def heads(tmp_path_factory):
    return build_dflash_set(tmp_path_factory.mktemp("dflash-gguf"), layers=2)


def convert(heads, name, out):
    eagle_convert.convert(str(heads[name]), str(heads["target"]), out, to="gguf", dtype="float32")
    return read_gguf(out / "dflash.gguf")


def test_the_keys_llamacpps_converter_writes(heads, tmp_path):
    meta = convert(heads, "zlab", tmp_path / "out").metadata
    assert {k: v for k, v in meta.items() if k != "general.name"} == {
        "general.architecture": "dflash", "general.type": "model", "dflash.block_count": 2,
        "dflash.context_length": 4096, "dflash.embedding_length": 128, "dflash.feed_forward_length": 256,
        "dflash.attention.head_count": 4, "dflash.attention.head_count_kv": 4, "dflash.rope.freq_base": 1e6,
        "dflash.attention.layer_norm_rms_epsilon": pytest.approx(1e-6), "dflash.attention.key_length": 32,
        "dflash.attention.value_length": 32, "general.file_type": 0, "dflash.block_size": 4,
        "dflash.target_layers": [1, 3],  # z-lab's [0, 2] count outputs; llama.cpp reads inputs (+1)
        "dflash.attention.causal": False, "general.quantization_version": 2, "tokenizer.ggml.model": "none",
        "tokenizer.ggml.mask_token_id": 255}


def test_tensor_names_and_bit_equal_values(heads, tmp_path):
    gguf = convert(heads, "zlab", tmp_path / "out")
    source = load_file(heads["zlab"] / "model.safetensors")
    pairs = {"fc.weight": "fc.weight", "enc.output_norm.weight": "hidden_norm.weight",
             "output_norm.weight": "norm.weight", "blk.1.attn_q.weight": "layers.1.self_attn.q_proj.weight",
             "blk.0.attn_k_norm.weight": "layers.0.self_attn.k_norm.weight",
             "blk.1.ffn_norm.weight": "layers.1.post_attention_layernorm.weight",
             "blk.0.attn_output.weight": "layers.0.self_attn.o_proj.weight"}
    assert len(gguf.tensors) == 3 + 2 * 11
    for ours, theirs in pairs.items():  # no q/k permutation: Qwen3 is NeoX-style in llama.cpp
        assert torch.equal(gguf.tensor(ours), source[theirs]), ours


def test_every_layout_and_variant_states_the_same_layers(heads, tmp_path):
    """speculators counts inputs ([1, 3]), z-lab outputs ([0, 2]): one file. JetSpec states causal."""
    zlab, spec = convert(heads, "zlab", tmp_path / "a"), convert(heads, "speculators", tmp_path / "b")
    assert spec.metadata == zlab.metadata
    assert convert(heads, "jetspec", tmp_path / "c").metadata["dflash.attention.causal"] is True


def test_negative_control_other_ids_are_written_other(heads, tmp_path):
    cfg = json.loads((heads["zlab"] / "config.json").read_text())
    cfg["dflash_config"]["target_layer_ids"] = [1, 2]
    shifted = tmp_path / "shifted"
    shifted.mkdir()
    (shifted / "config.json").write_text(json.dumps(cfg))
    (shifted / "model.safetensors").write_bytes((heads["zlab"] / "model.safetensors").read_bytes())
    eagle_convert.convert(str(shifted), str(heads["target"]), tmp_path / "out", to="gguf", dtype="float32")
    assert read_gguf(tmp_path / "out" / "dflash.gguf").metadata["dflash.target_layers"] == [2, 3]


def test_a_gelu_head_is_refused_by_name(heads, tmp_path):
    cfg = json.loads((heads["zlab"] / "config.json").read_text())
    gelu = tmp_path / "gelu"
    gelu.mkdir()
    (gelu / "config.json").write_text(json.dumps(cfg | {"hidden_act": "gelu"}))
    (gelu / "model.safetensors").write_bytes((heads["zlab"] / "model.safetensors").read_bytes())
    with pytest.raises(EagleConvertError, match="gelu.*run it as SiLU"):
        eagle_convert.convert(str(gelu), str(heads["target"]), tmp_path / "out", to="gguf", dtype="float32")
    assert not (tmp_path / "out").exists()


def test_inspect_names_the_dflash_gguf(heads, tmp_path):
    convert(heads, "zlab", tmp_path / "out")
    report = eagle_convert.inspect(str(tmp_path / "out"))
    assert (report.layout, report.kind) == ("gguf", "dflash")
    assert {t["file"] for t in report.tensors} == {"dflash.gguf"}


def test_a_layout_without_dflash_names_the_ones_with_it(heads, tmp_path):
    """`--to sglang` for a DFlash head: SGLang's DFLASH loads z-lab's layout, and the refusal says where to go."""
    with pytest.raises(EagleConvertError, match="DFLASH head is written with --to gguf / dflash / speculators-dflash"):
        eagle_convert.convert(str(heads["zlab"]), str(heads["target"]), tmp_path / "out", to="sglang")
    assert not (tmp_path / "out").exists()
