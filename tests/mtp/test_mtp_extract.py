"""convert --mtp (issue 25): per family, the MTP layers extracted from a tiny target equal the source tensors, only
the MTP shard's tensor bytes are read, provenance records every range with its sha256, and inspect finds them."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch
from safetensors.torch import load_file

import eagle_convert
from eagle_convert.api import MtpSettings, extract_mtp
from eagle_convert.checkpoint.index import parse_safetensors_header
from eagle_convert.io.source import LocalSource
from eagle_convert.testing.mtp_targets import FAMILIES, MtpFixture, build_mtp_target

SIZES = {"mimo": 16, "glm4_moe": 32, "deepseek_v3": 32, "qwen3_next": 29, "ernie": 12}  # MTP tensors per fixture


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("mtp")
    targets = {f: build_mtp_target(root / f, MtpFixture(f)) for f in FAMILIES}
    targets["deepseek_fp8"] = build_mtp_target(root / "deepseek_fp8", MtpFixture("deepseek_v3", fp8=True))
    targets["glm_unindexed"] = build_mtp_target(root / "glm_unindexed", MtpFixture("glm4_moe", index_mtp=False))
    targets["glm46"] = build_mtp_target(root / "glm46", MtpFixture("glm4_moe", copies=False))
    return targets


def spy_reads(monkeypatch, folder):
    """Every range read from `folder`'s safetensors files: (file, key, length)."""
    reads, original, root = [], LocalSource.read_range, folder.resolve()

    def spy(self, rel, offset, length, *, key=None):
        if self.root == root and rel.endswith(".safetensors"):
            reads.append((rel, key, length))
        return original(self, rel, offset, length, key=key)

    monkeypatch.setattr(LocalSource, "read_range", spy)
    return reads


def sources(target) -> dict[str, torch.Tensor]:
    return load_file(target.path / target.mtp_file)


@pytest.mark.parametrize("family", [*FAMILIES, "deepseek_fp8", "glm_unindexed", "glm46"])
def test_extraction_equals_the_source_reading_only_the_mtp_tensors(family, built, tmp_path, monkeypatch):
    target = built[family]
    reads = spy_reads(monkeypatch, target.path)
    result = extract_mtp(str(target.path), tmp_path / "out")
    monkeypatch.undo()
    out = tmp_path / "out"
    written = load_file(out / "model.safetensors")
    source = sources(target)
    assert sorted(written) == sorted(source) == list(target.mtp_names)
    assert all(torch.equal(written[n], source[n]) and written[n].dtype == source[n].dtype for n in source)
    assert (out / "config.json").read_bytes() == (target.path / "config.json").read_bytes()  # verbatim
    assert (out / "generation_config.json").exists()
    tensor_reads = [(rel, key, n) for rel, key, n in reads if not key.startswith("__header")]
    assert {rel for rel, _, _ in reads} == {target.mtp_file}  # no trunk shard touched, not even its header
    assert sorted(key for _, key, _ in tensor_reads) == sorted(source)  # each MTP tensor once, nothing else
    assert sum(n for _, _, n in tensor_reads) == sum(t.nbytes for t in source.values()) == \
        result.to_dict()["bytes_to_read"]
    if family == "deepseek_fp8":  # the target's quantization kept as is
        assert written["model.layers.2.self_attn.o_proj.weight"].dtype == torch.float8_e4m3fn
        assert "model.layers.2.self_attn.o_proj.weight_scale_inv" in written


@pytest.mark.parametrize("family", FAMILIES)
def test_the_block_is_the_mtp_layer_not_a_trunk_layer(family, built):
    """Negative control for the equality above: the MTP block's values differ from the trunk's last layer, whose
    names it shares once the prefix is stripped, so copying the wrong layer could not pass."""
    target = built[family]
    source = sources(target)
    trunk = load_file(target.path / target.trunk_files[-1])
    n = target.config["num_hidden_layers"]
    pairs = [(name, name.replace(f"model.layers.{n}.", f"model.layers.{n - 1}.").replace(
        "model.mtp_layers.0.", f"model.layers.{n - 1}.").replace("mtp.layers.0.", f"model.layers.{n - 1}."))
        for name in source if name.endswith("o_proj.weight")]
    compared = [(a, b) for a, b in pairs if b in trunk]
    assert compared or family == "ernie"
    assert all(not torch.equal(source[a], trunk[b]) for a, b in compared)


def test_provenance_records_every_range_with_its_sha256(built, tmp_path):
    target = built["deepseek_fp8"]
    extract_mtp(str(target.path), tmp_path / "out")
    prov = json.loads((tmp_path / "out" / "eagle_convert.json").read_text())
    assert prov["layout"] == "mtp-vllm" and prov["mtp"]["family"] == "deepseek_v3"
    assert list(prov["inputs"]) == ["target"] and prov["dtype"] == "as stored" and prov["nonfinite"] == {}
    data = (target.path / target.mtp_file).read_bytes()
    ranges = parse_safetensors_header(LocalSource(target.path), target.mtp_file)  # where each tensor's bytes lie
    assert sorted(prov["tensors"]) == list(target.mtp_names)
    for name, entry in prov["tensors"].items():
        (src,) = entry["sources"]
        start = ranges[name].offset
        assert src["name"] == name and src["origin"] == "target" and src["file"].endswith(target.mtp_file)
        assert src["sha256"] == hashlib.sha256(data[start:start + ranges[name].nbytes]).hexdigest()
        assert src["sha256"] != hashlib.sha256(data[start:start + ranges[name].nbytes - 1]).hexdigest()  # control
    assert sum(ranges[n].nbytes for n in prov["tensors"]) == sum(t.nbytes for t in sources(target).values())


def test_an_mtp_shard_missing_from_the_index_is_found_and_noted(built, tmp_path):
    target = built["glm_unindexed"]
    index = json.loads((target.path / "model.safetensors.index.json").read_text())
    assert "mtp.safetensors" not in set(index["weight_map"].values())  # the case: the index does not list it
    result = extract_mtp(str(target.path), tmp_path / "out")
    assert result.layers.files() == ["mtp.safetensors"]
    assert any("mtp.safetensors" in n and "index" in n for n in result.notes)


def test_glm46_style_release_without_copies_is_complete_with_a_note(built, tmp_path):
    result = extract_mtp(str(built["glm46"].path), tmp_path / "out")
    assert result.layers.copies == ()
    assert not any("embed_tokens" in n or "shared_head.head" in n for n in result.layers.refs)
    assert any("no embedding / head copies" in n for n in result.notes)
    assert built["glm_unindexed"] and len(extract_mtp(str(built["glm4_moe"].path), None, MtpSettings(
        dry_run=True)).layers.copies) == 2  # the GLM-4.5 fixture carries both


@pytest.mark.parametrize("family", FAMILIES)
def test_inspect_finds_the_mtp_layers(family, built):
    target = built[family]
    report = eagle_convert.inspect(str(target.path))
    mtp = report.target["mtp"]
    assert mtp["found"] is True
    assert (mtp["layers"], mtp["tensors"], mtp["files"]) == (1, SIZES[family], [target.mtp_file])
    assert mtp["bytes"] == sum(t.nbytes for t in sources(target).values())
    assert mtp["concat"] == ("[hidden, emb]" if family == "mimo" else "[emb, hidden]")


def test_inspect_says_a_plain_target_has_no_mtp_layers(tmp_path):
    from eagle_convert.testing.tiny import make_target

    make_target(tmp_path / "t")
    mtp = eagle_convert.inspect(str(tmp_path / "t")).target["mtp"]
    assert mtp["found"] is False and "no MTP layers" in mtp["why"]


def test_dry_run_reads_no_tensor_and_writes_nothing(built, tmp_path, monkeypatch):
    target = built["mimo"]
    reads = spy_reads(monkeypatch, target.path)
    result = extract_mtp(str(target.path), tmp_path / "out", MtpSettings(dry_run=True))
    assert all(key.startswith("__header") for _, key, _ in reads)
    assert not (tmp_path / "out").exists() and result.out is None
    assert result.to_dict()["bytes_to_read"] == sum(t.nbytes for t in sources(target).values())
    assert '"method":"mtp"' in result.plan.serve_command and "num_speculative_tokens\":1" in result.plan.serve_command


def test_inspect_prints_the_mtp_line(built):
    from click.testing import CliRunner

    from eagle_convert.cli.main import main

    result = CliRunner().invoke(main, ["inspect", str(built["deepseek_fp8"].path)], catch_exceptions=False)
    line = next(x for x in result.stdout.splitlines() if x.startswith("mtp layers:"))
    assert "1 (DeepSeek-V3 / R1 / V3.1, num_nextn_predict_layers), 52 tensors (32 float32, 20 float8_e4m3fn)" in line
    assert "model-00003-of-00003.safetensors" in line and "[emb, hidden]" in line
