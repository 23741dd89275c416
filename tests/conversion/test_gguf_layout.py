"""`convert --to gguf` without llama.cpp (issue 31): the GGUF writer's bytes parsed by an independent reader written
here from the format's specification; the keys and tensors written for the engine pair, against a table written out
by hand; what llama.cpp cannot express, refused by name with nothing written. The real llama.cpp run:
tests/engines/test_gguf_llamacpp.py."""

from __future__ import annotations

import dataclasses
import math
import struct

import pytest
import torch
from support.convert import assert_nothing_left, flat, run_cli
from support.engine_pair import DRAFT_VOCAB, HEADS, HIDDEN, KV_HEADS, TAPS, build_engine_pair
from support.variant_heads import TARGET, VARIANTS, make_variant_head

import eagle_convert
from eagle_convert import errors
from eagle_convert.io.gguf_file import GgufTensor, read_gguf, write_gguf
from eagle_convert.layouts import LAYOUTS
from eagle_convert.layouts.variant_table import _BASE
from eagle_convert.testing.tiny import make_target

# ---- an independent reader: struct and the spec (ggml docs/gguf.md), nothing from io/gguf_file.py ------------------
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def parse(data: bytes):
    at = 0

    def take(fmt):
        nonlocal at
        out = struct.unpack_from("<" + fmt, data, at)
        at += struct.calcsize("<" + fmt)
        return out if len(out) > 1 else out[0]

    def string():
        nonlocal at
        n = take("Q")
        at += n
        return data[at - n:at].decode()

    def value(code):
        if code == 8:
            return string()
        if code == 9:
            element, count = take("IQ")
            return [value(element) for _ in range(count)]
        return take(SCALAR[code])

    assert data[:4] == b"GGUF"
    at = 4
    version, n_tensors, n_kv = take("IQQ")
    meta = {}
    for _ in range(n_kv):
        key = string()
        code = take("I")
        meta[key] = (code, value(code))
    infos = []
    for _ in range(n_tensors):
        name, dims = string(), take("I")
        ne = [take("Q") for _ in range(dims)]
        infos.append((name, ne, take("I"), take("Q")))
    start = at + (-at % 32)
    return version, meta, infos, start


def test_the_writers_bytes_parse_with_an_independent_reader(tmp_path):
    metadata = {"general.architecture": ("STRING", "eagle3"), "a.u32": ("UINT32", 7), "a.f32": ("FLOAT32", 0.5),
                "a.bool": ("BOOL", True), "a.ids": ("ARRAY[INT32]", [2, -1, 9]),
                "a.words": ("ARRAY[STRING]", ["▁x", "<s>"]), "a.u64": ("UINT64", 2 ** 40)}
    values = {"m": torch.arange(6, dtype=torch.float32).reshape(2, 3), "n": torch.tensor([1.5, -2.0, 3.0]),
              "d": torch.tensor([5, 7, 11], dtype=torch.int64)}
    tensors = [GgufTensor("m", torch.float32, (2, 3)), GgufTensor("n", torch.bfloat16, (3,)),
               GgufTensor("d", torch.int64, (3,))]
    write_gguf(tmp_path / "x.gguf", metadata, tensors, lambda t: values[t.name])
    data = (tmp_path / "x.gguf").read_bytes()
    version, meta, infos, start = parse(data)
    assert version == 3
    assert meta == {"general.architecture": (8, "eagle3"), "a.u32": (4, 7), "a.f32": (6, 0.5), "a.bool": (7, True),
                    "a.ids": (9, [2, -1, 9]), "a.words": (9, ["▁x", "<s>"]), "a.u64": (10, 2 ** 40)}
    # dims innermost first; ggml types F32 = 0, BF16 = 30, I64 = 27; each tensor's data on a 32-byte boundary
    assert [(n, ne, code) for n, ne, code, _ in infos] == [("m", [3, 2], 0), ("n", [3], 30), ("d", [3], 27)]
    offsets = [offset for *_, offset in infos]
    assert offsets == [0, 32, 64] and start % 32 == 0
    assert data[start:start + 24] == struct.pack("<6f", 0, 1, 2, 3, 4, 5)
    assert data[start + 32:start + 38] == values["n"].to(torch.bfloat16).view(torch.int16).numpy().tobytes()
    assert data[start + 64:start + 88] == struct.pack("<3q", 5, 7, 11)
    back = read_gguf(tmp_path / "x.gguf")  # and our own reader agrees
    assert back.types["a.ids"] == "ARRAY[INT32]" and torch.equal(back.tensor("d"), values["d"])


def test_a_value_its_gguf_type_cannot_hold_is_refused_naming_the_key_before_writing(tmp_path):
    metadata = {"general.architecture": ("STRING", "eagle3"), "a.dim": ("UINT32", -1), "a.eps": ("FLOAT32", 1e39)}
    with pytest.raises(errors.UnsupportedConversionError, match=r"a\.dim = -1 \(UINT32\); a\.eps = 1e\+39"):
        write_gguf(tmp_path / "x.gguf", metadata, [], lambda t: None)
    assert not (tmp_path / "x.gguf").exists()
    write_gguf(tmp_path / "y.gguf", {"a.dim": ("UINT32", 2 ** 32 - 1)}, [], lambda t: None)  # negative control
    assert read_gguf(tmp_path / "y.gguf").metadata == {"a.dim": 2 ** 32 - 1}


# ---- the engine pair, written for llama.cpp -------------------------------------------------------------------------
# What llama.cpp b11434's converter writes for this head (recorded from its output, tests/engines/ compares it live),
# less general.size_label (cosmetic) and the tokenizer (the loader needs only tokenizer.ggml.model: layouts/gguf.py).
KEYS = {
    "general.architecture": "eagle3", "eagle3.target_layers": TAPS, "eagle3.target_hidden_size": HIDDEN,
    "eagle3.norm_before_residual": False, "eagle3.norm_before_fc": False, "general.type": "model",
    "general.name": "Eagle3", "eagle3.block_count": 1, "eagle3.context_length": 512, "eagle3.embedding_length": HIDDEN,
    "eagle3.feed_forward_length": 256, "eagle3.attention.head_count": HEADS, "eagle3.attention.head_count_kv": KV_HEADS,
    "eagle3.rope.freq_base": 10000.0, "eagle3.attention.layer_norm_rms_epsilon": pytest.approx(1e-6),
    "eagle3.attention.key_length": 32, "eagle3.attention.value_length": 32, "general.file_type": 32,
    "eagle3.vocab_size": 256, "eagle3.rope.dimension_count": 32, "general.quantization_version": 2,
    "tokenizer.ggml.model": "none"}
TENSORS = {"fc.weight": (HIDDEN, 3 * HIDDEN), "output.weight": (DRAFT_VOCAB, HIDDEN), "output_norm.weight": (HIDDEN,),
           "d2t": (DRAFT_VOCAB,), "blk.0.attn_norm.weight": (HIDDEN,), "blk.0.attn_norm_2.weight": (HIDDEN,),
           "blk.0.ffn_norm.weight": (HIDDEN,), "blk.0.attn_q.weight": (HIDDEN, 2 * HIDDEN),
           "blk.0.attn_k.weight": (64, 2 * HIDDEN), "blk.0.attn_v.weight": (64, 2 * HIDDEN),
           "blk.0.attn_output.weight": (HIDDEN, HIDDEN), "blk.0.ffn_gate.weight": (256, HIDDEN),
           "blk.0.ffn_up.weight": (256, HIDDEN), "blk.0.ffn_down.weight": (HIDDEN, 256)}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf")
    paths = build_engine_pair(root)
    out = root / "out"
    eagle_convert.convert(str(paths["eagle3"]), str(paths["target"]), out, to="gguf", dtype="bfloat16")
    return paths, out


def rope_rows(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """llama.cpp's row order, written per row: in each head, row 2i is HF row i and row 2i+1 is HF row i + d/2."""
    d = weight.shape[0] // heads
    order = [h * d + (j // 2) + (d // 2 if j % 2 else 0) for h in range(heads) for j in range(d)]
    return weight[order]


def test_the_engine_pair_gets_the_keys_and_tensors_llamacpp_reads(pair):
    paths, out = pair
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "eagle3.gguf", "eagle_convert.json"]
    gguf = read_gguf(out / "eagle3.gguf")
    assert gguf.metadata == KEYS
    assert gguf.types["eagle3.target_layers"] == "ARRAY[INT32]" and gguf.types["eagle3.target_hidden_size"] == "UINT32"
    assert {name: shape for name, (_, shape, _) in gguf.tensors.items()} == TENSORS
    dtypes = {name: dtype for name, (dtype, _, _) in gguf.tensors.items()}
    norms = {n for n, s in TENSORS.items() if len(s) == 1} - {"d2t"}
    assert {n for n, d in dtypes.items() if d == torch.float32} == norms  # F32 whatever --dtype, as llama.cpp's
    assert dtypes["d2t"] == torch.int64 and dtypes["fc.weight"] == torch.bfloat16
    from safetensors.torch import load_file
    head = load_file(paths["eagle3"] / "model.safetensors")
    # d2t: the target ids of the draft vocabulary (t2d's true entries), not HF's offsets
    assert torch.equal(gguf.tensor("d2t"), torch.nonzero(head["t2d"]).flatten())
    assert not torch.equal(gguf.tensor("d2t"), head["d2t"])
    for name, heads in (("q", HEADS), ("k", KV_HEADS)):
        hf = head[f"midlayer.self_attn.{name}_proj.weight"].to(torch.bfloat16)
        assert torch.equal(gguf.tensor(f"blk.0.attn_{name}.weight"), rope_rows(hf, heads)), name
        assert not torch.equal(gguf.tensor(f"blk.0.attn_{name}.weight"), hf)  # the permutation moved rows
    assert torch.equal(gguf.tensor("blk.0.attn_v.weight"), head["midlayer.self_attn.v_proj.weight"].bfloat16())


def test_the_plan_says_each_rewrite_and_the_serve_command_names_the_file(pair, tmp_path):
    paths, _ = pair
    result = run_cli("convert", paths["eagle3"], "-t", paths["target"], "--to", "gguf", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "offsets -> absolute target ids" in result.stdout and "llama.cpp's RoPE row order (2 heads)" in result.stdout
    assert "--spec-type draft-eagle3" in result.stdout and "-md OUT/eagle3.gguf" in flat(result.stdout)


# ---- what llama.cpp cannot express: refused by name -----------------------------------------------------------------
REFUSED = {"eagle31": "fc_norm", "specforge31": "fc_norm", "aux4": "exactly 3 target layers",
           "no_aux": "exactly 3 target layers", "two_layers": "one decoder layer", "qwen3": "Qwen3 draft",
           "fc_bias": "fc has no bias"}


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf-variants")
    make_target(root / "target", TARGET)
    for name in [*REFUSED, "base"]:
        make_variant_head(root / name, **VARIANTS[name])
    return root


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_llamacpp_cannot_run_is_refused_by_name(variants, name, tmp_path):
    with pytest.raises(errors.UnsupportedConversionError, match=REFUSED[name]):
        eagle_convert.convert(str(variants / name), str(variants / "target"), tmp_path / "out", to="gguf")
    assert_nothing_left(tmp_path / "out")


@pytest.mark.parametrize("changes, message", [
    ({"norm_output": True}, "no norm_output"),
    ({"rope_scaling": {"rope_type": "dynamic", "factor": 8.0}}, "dynamic NTK"),
    ({"hidden_act": "gelu"}, "SiLU"),
    ({"head_dim": -1}, "head_dim is -1"),  # found by the fuzzer: a negative UINT32 escaped the writer
    ({"head_dim": 7}, "head_dim is 7"),
])
def test_flags_without_a_gguf_form_are_refused(changes, message):
    import re
    assert re.search(message, LAYOUTS["gguf"].refusal(dataclasses.replace(_BASE, **changes), frozenset()))
    assert LAYOUTS["gguf"].refusal(_BASE, frozenset()) is None  # negative control: the plain head is written


def test_a_refusal_is_one_paragraph_exit_1_nothing_written(variants, tmp_path):
    result = run_cli("convert", variants / "eagle31", "-t", variants / "target", "-o", tmp_path / "out", "--to", "gguf")
    assert result.returncode == 1 and result.stderr.startswith("error: ") and "\n\n" not in result.stderr.strip()
    assert "fc_norm" in flat(result.stderr) and "Traceback" not in result.stderr
    assert_nothing_left(tmp_path / "out")
    base = run_cli("convert", variants / "base", "-t", variants / "target", "-o", tmp_path / "b", "--to", "gguf")
    assert base.returncode == 0, base.stderr  # negative control: the same target takes a plain head
    assert math.prod(read_gguf(tmp_path / "b" / "eagle3.gguf").tensors["fc.weight"][1]) > 0
