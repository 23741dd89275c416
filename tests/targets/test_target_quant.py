"""Quantized targets: a float LM head in a quantized checkpoint is copied; an FP8 LM head (per-tensor, per-channel or
block scales, weight_scale or weight_scale_inv) is dequantized exactly; a packed head is refused with --lm-head-from
as the way out, which gives the same output as converting against the unquantized base. Over the Hub, only the
head's and its scale's byte ranges are fetched."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file
from support.hubserver import HubServer, use_in_process
from support.target_families import HEADS, INTER, KV, H, V, save_family, shard_of

import eagle_convert
from eagle_convert import errors
from eagle_convert.targets.quant import dequantize_fp8, fp8_scheme
from eagle_convert.testing.tiny import TinyConfig, make_eagle1_head

pytest.importorskip("transformers")
HEAD = "lm_head.weight"
FP8_MAX = torch.finfo(torch.float8_e4m3fn).max
BLOCK = (16, 16)


def quantize(w: torch.Tensor, scheme: str) -> tuple[torch.Tensor, torch.Tensor]:
    """FP8 codes and the scale that multiplies them, as a quantizer writes them for `scheme`."""
    w = w.float()
    if scheme == "per-tensor":
        scale = w.abs().max() / FP8_MAX
        full = scale
    elif scheme == "per-channel":
        scale = w.abs().amax(1, keepdim=True) / FP8_MAX
        full = scale
    else:
        rows, cols = w.shape
        blocks = w.reshape(rows // BLOCK[0], BLOCK[0], cols // BLOCK[1], BLOCK[1])
        scale = blocks.abs().amax((1, 3)) / FP8_MAX
        full = scale.repeat_interleave(BLOCK[0], 0).repeat_interleave(BLOCK[1], 1)
    return (w / full).to(torch.float8_e4m3fn), scale.to(torch.float32)


def _rewrite(src, dst, shard: str, change, config_update: dict | None = None):
    """A copy of checkpoint `src` with `change(tensors)` applied to one shard (index kept in step)."""
    shutil.copytree(src, dst)
    tensors = change(load_file(src / shard))
    save_file(tensors, dst / shard, metadata={"format": "pt"})
    index = json.loads((src / "model.safetensors.index.json").read_text())
    index["weight_map"] = {k: v for k, v in index["weight_map"].items() if v != shard} | {k: shard for k in tensors}
    (dst / "model.safetensors.index.json").write_text(json.dumps(index))
    if config_update:
        config = json.loads((dst / "config.json").read_text())
        config.update(config_update)
        (dst / "config.json").write_text(json.dumps(config))


@pytest.fixture(scope="module")
def quant(tmp_path_factory):
    """A transformers-saved llama target, and per scheme: a bf16 base whose LM head is exactly what the FP8 copy
    encodes (the head an FP8 checkpoint was made from), and that FP8 copy."""
    root = tmp_path_factory.mktemp("quant")
    model = save_family("llama", root / "fp32", tied=False)
    w = model.get_output_embeddings().weight.detach()
    shard = shard_of(root / "fp32", HEAD)
    out = {"root": root, "fp32": root / "fp32", "shard": shard, "w": w}
    for scheme, scale_name in (("per-tensor", "lm_head.weight_scale"), ("per-channel", "lm_head.weight_scale"),
                               ("block", "lm_head.weight_scale_inv")):
        codes, scale = quantize(w, scheme)
        original = dequantize_fp8(codes, scale, BLOCK if scheme == "block" else None, torch.bfloat16)
        if scheme == "per-tensor":
            scale = scale.reshape(())
        base, fp8 = root / f"base-{scheme}", root / f"fp8-{scheme}"
        _rewrite(out["fp32"], base, shard, lambda t, o=original: {**t, HEAD: o.clone()})
        q = {"quant_method": "fp8", "ignore": []} | ({"weight_block_size": list(BLOCK)} if scheme == "block" else {})
        _rewrite(out["fp32"], fp8, shard, lambda t, c=codes, s=scale, n=scale_name: {**t, HEAD: c, n: s},
                 {"quantization_config": q})
        out[scheme] = (base, fp8, original, scale_name)
    cfg = TinyConfig(hidden_size=H, vocab_size=V, intermediate_size=INTER, num_attention_heads=HEADS,
                     num_key_value_heads=KV)
    make_eagle1_head(root / "draft", cfg, {}, embed=False, fmt="safetensors")
    out["draft"] = root / "draft"
    return out


def _bf16_ulp(x: torch.Tensor) -> torch.Tensor:
    up = torch.nextafter(x.abs().to(torch.bfloat16), torch.tensor(float("inf"), dtype=torch.bfloat16))
    return (up.float() - x.abs().to(torch.bfloat16).float())


@pytest.mark.parametrize("scheme", ["per-tensor", "per-channel", "block"])
def test_fp8_lm_head_is_dequantized_exactly(quant, scheme, tmp_path):
    base, fp8, original, scale_name = quant[scheme]
    result = eagle_convert.convert(str(quant["draft"]), str(fp8), tmp_path / "out", to="vllm-v0", dtype="bfloat16")
    head = load_file(tmp_path / "out" / "model.safetensors")[HEAD]
    assert head.dtype == torch.bfloat16
    assert ((head.float() - original.float()).abs() <= _bf16_ulp(original.float())).all()  # within one ulp
    assert torch.equal(head, original)  # and in fact equal: one rounding, from an exact float64 product
    how = json.loads((tmp_path / "out" / "eagle_convert.json").read_text())["tensors"][HEAD]["how"]
    assert how.startswith("dequantize fp8 float8_e4m3fn x " + scale_name) and how.endswith("-> bfloat16")
    assert scheme.split()[0] in how
    sources = {s["name"] for s in json.loads((tmp_path / "out" / "eagle_convert.json").read_text())
               ["tensors"][HEAD]["sources"]}
    assert sources == {HEAD, scale_name}
    # The FP8 copy converts to exactly what the bf16 base it was made from converts to.
    eagle_convert.convert(str(quant["draft"]), str(base), tmp_path / "base", to="vllm-v0", dtype="bfloat16")
    assert torch.equal(head, load_file(tmp_path / "base" / "model.safetensors")[HEAD])
    assert result.plan.bytes_read()["target"] == V * H * (1 + 4) + load_file(fp8 / quant["shard"])[scale_name].nbytes


def test_fp8_block_size_is_inferred_from_the_shapes_without_a_config():
    assert fp8_scheme((8, 2), (128, 32), None) == ("block 16x16", (16, 16))
    assert fp8_scheme((128, 1), (128, 32), None) == ("per-channel", None)
    assert fp8_scheme((), (128, 32), None) == ("per-tensor", None)
    assert fp8_scheme((3, 5), (128, 32), None)[0] is None


def test_an_fp8_head_with_a_scale_of_no_known_layout_is_refused(quant, tmp_path):
    bad = tmp_path / "bad"
    _rewrite(quant["fp32"], bad, quant["shard"], lambda t: {**t, HEAD: t[HEAD].to(torch.float8_e4m3fn),
                                                             "lm_head.weight_scale": torch.ones(3, 5)})
    with pytest.raises(errors.UnsupportedConversionError, match="neither per tensor, per channel nor a block"):
        eagle_convert.convert(str(quant["draft"]), str(bad), tmp_path / "out", to="vllm-v0")
    assert not (tmp_path / "out").exists()


def fp8_layers_copy(quant, tmp_path):
    """A copy of the fp32 target whose config declares FP8 layers with the LM head left out (`ignore`)."""
    fp8_layers = tmp_path / "fp8-layers"
    shutil.copytree(quant["fp32"], fp8_layers)
    config = json.loads((fp8_layers / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "fp8", "ignore": ["lm_head"]}
    (fp8_layers / "config.json").write_text(json.dumps(config))
    return fp8_layers


def test_a_float_head_in_a_quantized_checkpoint_is_copied(quant, tmp_path):
    """The usual case: layers in FP8, the LM head left in bf16 (quantization_config ignores it)."""
    fp8_layers = fp8_layers_copy(quant, tmp_path)
    index = json.loads((fp8_layers / "model.safetensors.index.json").read_text())["weight_map"]
    for shard in set(index.values()) - {quant["shard"], index["model.embed_tokens.weight"]}:
        tensors = load_file(quant["fp32"] / shard)
        save_file({k: v.to(torch.float8_e4m3fn) if v.dim() == 2 else v for k, v in tensors.items()},
                  fp8_layers / shard, metadata={"format": "pt"})
    eagle_convert.convert(str(quant["draft"]), str(fp8_layers), tmp_path / "out", to="vllm-v0")
    assert torch.equal(load_file(tmp_path / "out" / "model.safetensors")[HEAD], quant["w"])


PACKED = {
    # compressed-tensors pack-quantized (int4 in int32 words): no `weight` at all
    "int4-packed": lambda t: {**{k: v for k, v in t.items() if k != HEAD},
                              "lm_head.weight_packed": torch.zeros(V, H // 8, dtype=torch.int32),
                              "lm_head.weight_scale": torch.ones(V, H // 16),
                              "lm_head.weight_shape": torch.tensor([V, H])},
    # NVFP4 (ModelOpt): two 4-bit codes per byte, an FP8 block scale and a second-level scale
    "nvfp4": lambda t: {**t, HEAD: torch.zeros(V, H // 2, dtype=torch.uint8),
                        "lm_head.weight_scale": torch.ones(V, H // 16).to(torch.float8_e4m3fn),
                        "lm_head.weight_scale_2": torch.ones(())},
}


@pytest.mark.parametrize("kind", sorted(PACKED))
def test_a_packed_head_is_refused_and_lm_head_from_the_base_is_the_way_out(quant, kind, tmp_path):
    packed = tmp_path / kind
    _rewrite(quant["fp32"], packed, quant["shard"], PACKED[kind])
    with pytest.raises(errors.UnsupportedConversionError) as exc:
        eagle_convert.convert(str(quant["draft"]), str(packed), tmp_path / "refused", to="vllm-v0")
    assert "packed or quantized" in str(exc.value) and "--lm-head-from" in str(exc.value)
    assert not (tmp_path / "refused").exists()
    out = tmp_path / "out"
    result = eagle_convert.convert(str(quant["draft"]), str(packed), out, to="vllm-v0",
                                   lm_head_from=str(quant["fp32"]))
    eagle_convert.convert(str(quant["draft"]), str(quant["fp32"]), tmp_path / "plain", to="vllm-v0")
    a, b = load_file(out / "model.safetensors"), load_file(tmp_path / "plain" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    prov = json.loads((out / "eagle_convert.json").read_text())
    assert prov["inputs"]["lm_head_from"]["path"] == str(quant["fp32"])
    assert any("--lm-head-from" in n for n in result.plan.notes)


def test_lm_head_from_must_match_vocab_and_hidden_size(quant, tmp_path):
    other = tmp_path / "other"
    save_family("qwen3", other, tied=False)
    config = json.loads((other / "config.json").read_text())
    config["vocab_size"] = V * 2
    (other / "config.json").write_text(json.dumps(config))
    with pytest.raises(errors.ShapeMismatchError, match="vocab_size 256"):
        eagle_convert.convert(str(quant["draft"]), str(quant["fp32"]), tmp_path / "out", to="vllm-v0",
                              lm_head_from=str(other))


def test_hub_fetches_only_the_fp8_head_and_its_scale(quant, tmp_path, monkeypatch):
    base, fp8, original, scale_name = quant["block"]
    files = {p.name: p for p in fp8.iterdir() if p.is_file()}
    draft = {p.name: p for p in quant["draft"].iterdir() if p.is_file()}
    with HubServer(tmp_path / "hub") as server:
        server.add_repo("org/fp8", files)
        server.add_repo("org/draft", draft)
        use_in_process(monkeypatch, server, tmp_path / "hf")
        eagle_convert.convert("org/draft", "org/fp8", tmp_path / "out", to="vllm-v0", dtype="bfloat16")
        head_shard = quant["shard"]
        embed_shard = shard_of(fp8, "model.embed_tokens.weight")
        wanted = V * H * 1 + 8 * 2 * 4  # the codes and the block scale
        assert wanted <= server.file_bytes("org/fp8", head_shard) <= wanted + 64 * 1024  # plus its header
        untouched = set(json.loads((fp8 / "model.safetensors.index.json").read_text())["weight_map"].values())
        assert all(server.file_bytes("org/fp8", s) == 0 for s in untouched - {head_shard, embed_shard})
    assert torch.equal(load_file(tmp_path / "out" / "model.safetensors")[HEAD], original)


def test_inspect_target_says_how_the_head_is_stored(quant, tmp_path):
    _, fp8, _, _ = quant["block"]
    t = eagle_convert.inspect(str(fp8)).target
    assert t["lm_head"]["stored"] == "fp8 block 16x16, scale lm_head.weight_scale_inv (dequantized exactly)"
    assert t["lm_head"]["dtype"] == "float8_e4m3fn" and t["quantization"] == "fp8"
    assert t["embedding"]["stored"] == "float (copied)"
    packed = tmp_path / "packed"
    _rewrite(quant["fp32"], packed, quant["shard"], PACKED["int4-packed"],
             {"quantization_config": {"quant_method": "compressed-tensors", "format": "pack-quantized"}})
    report = eagle_convert.inspect(str(packed))
    assert report.target["lm_head"]["stored"] == "packed (refused)"
    assert report.target["quantization"] == "compressed-tensors (pack-quantized)"
    assert len(report.problems) == 1 and "--lm-head-from" in report.problems[0].fix


def test_inspect_target_of_a_float_head_in_a_quantized_checkpoint(quant, tmp_path):
    fp8_layers = fp8_layers_copy(quant, tmp_path)
    report = eagle_convert.inspect(str(fp8_layers))
    assert report.target["quantization"] == "fp8, not quantized: lm_head"
    assert report.target["lm_head"]["stored"] == "float (copied)" and not report.problems


def test_bench_refuses_a_quantized_target(quant):
    from eagle_convert.benchmark.session import load_target
    from eagle_convert.errors import UnsupportedModelError

    _, fp8, _, _ = quant["per-channel"]
    with pytest.raises(UnsupportedModelError, match=r"quantized \(fp8\)") as exc:
        load_target(fp8, dtype=torch.float32, device="cpu")
    assert "bench --engine vllm" in str(exc.value) and "unquantized base" in str(exc.value)


def test_cli_refuses_a_packed_head_in_one_paragraph_and_lm_head_from_converts(quant, tmp_path):
    import subprocess
    import sys

    packed = tmp_path / "nvfp4"
    _rewrite(quant["fp32"], packed, quant["shard"], PACKED["nvfp4"])
    base = [sys.executable, "-m", "eagle_convert", "convert", str(quant["draft"]), "-t", str(packed), "--to",
            "vllm-v0", "-q"]
    refused = subprocess.run(base + ["-o", str(tmp_path / "refused")], capture_output=True, text=True)
    assert refused.returncode == 1 and not (tmp_path / "refused").exists()
    assert refused.stderr.startswith("error: The target's LM head (lm_head.weight) is stored packed")
    assert "lm_head.weight is uint8 [128, 16]" in " ".join(refused.stderr.split())
    assert "--lm-head-from CHECKPOINT" in " ".join(refused.stderr.split())
    done = subprocess.run(base + ["-o", str(tmp_path / "out"), "--lm-head-from", str(quant["fp32"])],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert torch.equal(load_file(tmp_path / "out" / "model.safetensors")[HEAD], quant["w"])


def test_a_float_head_whose_rows_disagree_with_the_config_is_not_called_packed(quant, tmp_path):
    """A config that says another vocab_size than the float LM head's rows: the config and weights disagree, which
    --lm-head-from cannot fix; the message says so and what to do."""
    from eagle_convert.checkpoint.index import Checkpoint
    from eagle_convert.io.source import LocalSource
    from eagle_convert.targets.target_info import read_target

    wrong = tmp_path / "wrong-vocab"
    _rewrite(quant["fp32"], wrong, quant["shard"], lambda t: t, {"vocab_size": 1000})
    with pytest.raises(errors.ShapeMismatchError) as exc:
        read_target(Checkpoint(LocalSource(wrong))).lm_head_weight()  # what convert reads
    text = f"{exc.value.message} {exc.value.hint}"
    assert f"lm_head.weight) is float32 [{V}, {H}]" in text and "config says vocab_size 1000" in text
    assert "rows must equal vocab_size" in text and "not packed" in text and "config.json" in exc.value.hint
    assert "--lm-head-from" not in text and "packed or quantized" not in text
    report = eagle_convert.inspect(str(wrong))
    assert "packed" not in report.target["lm_head"]["stored"]
    assert all("rows must equal vocab_size" in p.what and "--lm-head-from" not in p.fix for p in report.problems)


def test_inspect_bench_verdict_is_the_check_bench_makes(quant, tmp_path):
    """FP8 and packed targets, which `bench` refuses, are not 'bench runner: yes'; the unquantized base still is.
    A packed head with no `weight` tensor is shown in the file that holds its packed form."""
    import subprocess
    import sys

    _, fp8, _, _ = quant["per-channel"]
    packed = tmp_path / "packed"
    _rewrite(quant["fp32"], packed, quant["shard"], PACKED["int4-packed"],
             {"quantization_config": {"quant_method": "compressed-tensors", "format": "pack-quantized"}})
    for folder in (fp8, packed):
        bench = eagle_convert.inspect(str(folder)).target["bench"]
        assert bench.startswith("no: The bench runner runs unquantized targets") and "--engine vllm" in bench
    assert eagle_convert.inspect(str(quant["fp32"])).target["bench"] == "yes"
    done = subprocess.run([sys.executable, "-m", "eagle_convert", "inspect", str(packed)], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    assert f"lm head: lm_head.weight in {quant['shard']}: packed (refused)" in done.stdout
    assert " in :" not in done.stdout
    assert "bench runner: no: " in done.stdout


def test_fp8_dequantized_past_the_output_dtype_is_refused_and_nan_codes_follow_the_source_rule(quant, tmp_path):
    from eagle_convert.errors import NonFiniteError

    _, fp8, _, scale_name = quant["per-tensor"]
    big = tmp_path / "big"  # finite codes times a finite scale, past float16's 65504 (not past float32's range)
    _rewrite(fp8, big, quant["shard"], lambda t: {**t, scale_name: t[scale_name] * 1e6})
    with pytest.raises(NonFiniteError, match="dequantizing its FP8 codes to float16 made .* Inf"):
        eagle_convert.convert(str(quant["draft"]), str(big), tmp_path / "out", to="vllm-v0", dtype="float16",
                              allow_nonfinite=True)
    assert not (tmp_path / "out").exists()
    eagle_convert.convert(str(quant["draft"]), str(big), tmp_path / "f32", to="vllm-v0", dtype="float32")

    def nan_code(t):
        codes = t[HEAD].clone()
        codes.view(torch.uint8)[5, 7] = 0x7F  # the e4m3fn NaN
        return {**t, HEAD: codes}

    nan = tmp_path / "nan"
    _rewrite(fp8, nan, quant["shard"], nan_code)
    with pytest.raises(NonFiniteError, match=rf"{HEAD}: 1 \(from dequantize_fp8"):
        eagle_convert.convert(str(quant["draft"]), str(nan), tmp_path / "out", to="vllm-v0", dtype="bfloat16")
    result = eagle_convert.convert(str(quant["draft"]), str(nan), tmp_path / "out", to="vllm-v0", dtype="bfloat16",
                                   allow_nonfinite=True)
    head = load_file(tmp_path / "out" / "model.safetensors")[HEAD]
    assert result.nonfinite == {HEAD: 1} and head[5, 7].isnan() and int(head.isnan().sum()) == 1


def test_a_quantized_target_embedding_is_said_not_compared():
    """A draft's own embedding cannot be compared row by row with FP8 codes: the check says it did not compare (a
    note; SGLang's rule then cannot refuse a difference), instead of returning nothing, which skipped it in silence."""
    from types import SimpleNamespace

    from eagle_convert.checkpoint.index import TensorRef
    from eagle_convert.conversion.tensor_checks import compare_embeddings
    from eagle_convert.targets.quant import StoredWeight

    ref = TensorRef("model.embed_tokens.weight", "model.safetensors", torch.float8_e4m3fn, (8, 4), 0)
    scale = TensorRef("model.embed_tokens.weight_scale", "model.safetensors", torch.float32, (), 32)
    target = SimpleNamespace(embed_name=ref.name, checkpoint=SimpleNamespace(has=lambda n: True,
                                                                           file_of=lambda n: ref.file),
                             embedding_weight=lambda: StoredWeight(ref, scale, "per-tensor"))
    head = SimpleNamespace(tensors={"embed_tokens.weight": ref})
    check = compare_embeddings(head, target, plan=None, always=True)
    assert check["equal"] is None and check["rows_compared"] == 0
    assert "not compared" in check["message"] and "quantized (per-tensor)" in check["message"]
