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
from eagle_convert.io.gguf_file import GgufTensor, read_gguf, write_gguf
from eagle_convert.testing.dflash import TARGET, build_dflash_set

# What llama.cpp's converter writes into a target's GGUF (a few of its tokenizer keys), and a tensor of a type no
# unquantized reader knows (Q4_K, 12): the header reader never looks at tensors.
TARGET_VOCABULARY = {"tokenizer.ggml.model": ("STRING", "llama"), "tokenizer.ggml.pre": ("STRING", "default"),
                     "tokenizer.ggml.tokens": ("ARRAY[STRING]", [f"t{i}" for i in range(TARGET.vocab_size)]),
                     "tokenizer.ggml.scores": ("ARRAY[FLOAT32]", [-float(i) for i in range(TARGET.vocab_size)]),
                     "tokenizer.ggml.bos_token_id": ("UINT32", 1), "tokenizer.ggml.add_bos_token": ("BOOL", True)}


def target_gguf(path, *, vocab=TARGET.vocab_size, layers=TARGET.num_hidden_layers):
    tokens = {"tokenizer.ggml.tokens": ("ARRAY[STRING]", [f"t{i}" for i in range(vocab)])}
    write_gguf(path, {"general.architecture": ("STRING", "llama"), "llama.block_count": ("UINT32", layers),
                      **TARGET_VOCABULARY, **tokens}, [GgufTensor("token_embd.weight", torch.int32, (4,))],
               lambda t: torch.zeros(4, dtype=torch.int32))
    raw = bytearray(path.read_bytes())
    at = raw.index(b"token_embd.weight") + len("token_embd.weight") + 4 + 8
    raw[at:at + 4] = (12).to_bytes(4, "little")  # Q4_K
    path.write_bytes(bytes(raw))
    return path


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


def test_target_gguf_copies_the_targets_vocabulary_and_keeps_the_mask(heads, tmp_path):
    gguf = target_gguf(tmp_path / "target.gguf")
    result = eagle_convert.convert(str(heads["zlab"]), str(heads["target"]), tmp_path / "out", to="gguf",
                                   dtype="float32", target_gguf=str(gguf))
    meta = read_gguf(tmp_path / "out" / "dflash.gguf").metadata
    assert {k: v for k, v in meta.items() if k.startswith("tokenizer.")} == {
        **{k: v for k, (_, v) in TARGET_VOCABULARY.items()}, "tokenizer.ggml.mask_token_id": 255}
    assert "none" not in meta.values()
    record = json.loads((tmp_path / "out" / "eagle_convert.json").read_text())["target_gguf"]
    assert (record["file"], record["tokens"], record["bytes"]) == ("target.gguf", 256, gguf.stat().st_size)
    assert record == result.to_dict()["target_gguf"] and len(record["tokenizer_sha256"]) == 64
    assert not [w for w in result.plan.warnings if "vocabulary" in w]
    assert f"-m {gguf.resolve()} -md " in result.plan.serve_command
    assert "convert_hf_to_gguf" not in result.plan.serve_command
    assert eagle_convert.inspect(str(tmp_path / "out")).problems == []


def test_without_target_gguf_it_warns_and_inspect_says_so(heads, tmp_path):
    """The negative control of the test above: no vocabulary, said after converting, in --json and by inspect."""
    result = eagle_convert.convert(str(heads["zlab"]), str(heads["target"]), tmp_path / "out", to="gguf")
    assert [w for w in result.plan.warnings if "--target-gguf" in w and "cannot run" in w]
    assert result.to_dict()["warnings"] == list(result.plan.warnings) and "target_gguf" not in result.to_dict()
    assert "convert again with --target-gguf TARGET.gguf" in result.plan.serve_command
    problems = eagle_convert.inspect(str(tmp_path / "out")).problems
    assert len(problems) == 1 and "--target-gguf" in problems[0].fix and "no vocabulary" in problems[0].what


@pytest.mark.parametrize("vocab, layers, said", [(255, 4, "holds 255 tokens, the target .* has vocab_size 256"),
                                                 (256, 3, "holds 3 layers .*num_hidden_layers 4")])
def test_another_models_gguf_is_refused_by_name(heads, tmp_path, vocab, layers, said):
    gguf = target_gguf(tmp_path / "other.gguf", vocab=vocab, layers=layers)
    with pytest.raises(EagleConvertError, match=f"not the GGUF of this target: it {said}"):
        eagle_convert.convert(str(heads["zlab"]), str(heads["target"]), tmp_path / "out", to="gguf",
                              target_gguf=str(gguf))
    assert not (tmp_path / "out").exists()


def test_target_gguf_is_refused_where_no_vocabulary_is_written(heads, tmp_path):
    """A DFlash head --to dflash (safetensors), like an EAGLE-3 head --to gguf, has no vocabulary to fill."""
    gguf = target_gguf(tmp_path / "target.gguf")
    with pytest.raises(EagleConvertError, match="applies only to a DFlash head written with to=\"gguf\""):
        eagle_convert.convert(str(heads["zlab"]), str(heads["target"]), tmp_path / "out", to="dflash",
                              target_gguf=str(gguf))
    assert not (tmp_path / "out").exists()


def test_the_positions_line_names_the_dflash_keys(heads, tmp_path):
    result = eagle_convert.convert(str(heads["zlab"]), str(heads["target"]), None, to="gguf", dry_run=True)
    assert result.positions["written"]["why"].startswith("GGUF dflash.context_length and dflash.rope.freq_base")


def test_target_gguf_beside_mtp_is_a_usage_error(heads, tmp_path):
    from click.testing import CliRunner

    from eagle_convert.cli.main import main

    gguf = target_gguf(tmp_path / "target.gguf")
    run = CliRunner().invoke(main, ["convert", "--mtp", str(heads["target"]), "--target-gguf", str(gguf),
                                    "-o", str(tmp_path / "out")])
    assert run.exit_code == 2 and "--target-gguf cannot be used with --mtp" in " ".join(run.output.split())
    assert not (tmp_path / "out").exists()
