"""Every output `convert` writes is inspected clean: each writable layout x each head kind it takes (EAGLE-1 with and
without an fc bias, EAGLE-3 and its variants) and every MTP extraction (each family to the vllm layout, the NextN
families to the sglang layout, block FP8 kept and dequantized). Clean: recognised in the layout written, no problem,
no position or vocab-map error or warning that is false for these inputs.

The combinations are enumerated here from the registries (eagle_convert.layouts.LAYOUTS, MTP's among them,
testing.mtp_targets.FAMILIES), so a new layout or family is inspected without editing this file. Why not a session-wide
collector of every conversion other tests make: many tests corrupt an output on purpose right after writing it
(negative controls), some convert with options that keep a true warning (--allow-rope-mismatch), and CLI tests
convert in subprocesses; a collector would either flag deliberate damage or need per-test exemptions, and would
depend on test order. Here each output is inspected right after it is written, from inputs meant to be clean."""

from __future__ import annotations

import pytest
from support.variant_heads import TARGET, VARIANTS, make_variant_head

import eagle_convert
from eagle_convert.api import MtpSettings, extract_mtp
from eagle_convert.errors import EagleConvertError
from eagle_convert.kinds import MTP
from eagle_convert.layouts import LAYOUTS
from eagle_convert.layouts.registry import extraction_layouts
from eagle_convert.testing.mtp_targets import FAMILIES, MtpFixture, build_mtp_target
from eagle_convert.testing.tiny import make_eagle1_head, make_target

WRITABLE = [name for name, layout in LAYOUTS.items() if layout.writable and not layout.from_target]
# Variants whose output holds a true problem or that every layout refuses, by design
# (tests/conversion/test_variants.py): norm_before_residual (SGLang cannot express it; inspect says so), fc_bias
# (refused), wide_target (another target).
TRUE_PROBLEM = {"norm_before_residual", "fc_bias", "wide_target"}
HEADS = ["eagle1", "eagle1-fc-bias"] + [f"eagle3-{v}" for v in VARIANTS if v not in TRUE_PROBLEM]
NEXTN = [f for f in FAMILIES if f in ("deepseek_v3", "glm4_moe")]
MTP_CASES = [(f, "vllm", False) for f in FAMILIES] + [(f, "sglang", False) for f in NEXTN] + \
    [("deepseek_fp8", "vllm", False), ("deepseek_fp8", "sglang", False), ("deepseek_fp8", "sglang", True)]
# A true finding of every converted head here: its config says 2048 (the trainers' --max-length), convert raised the
# limit to the target's 4096 and recorded the old one, so acceptance past 2048 is not what it was trained for.
TRUE_FINDINGS = {"short_training_context"}
# SGLang reads an EAGLE-3 head in its release layout (midlayer.*), so `--to sglang` writes that layout, named so.
READ_AS = {("sglang", "eagle3"): "eagle3"}


def assert_clean(report, layout: str, kind: str) -> None:
    assert (report.layout, report.kind) == (layout, kind), (report.layout, report.layout_reason)
    assert report.problems == [], [p.what for p in report.problems]
    findings = (report.positions or {}).get("findings", [])
    assert [f["name"] for f in findings if f["severity"] in ("error", "warning")
            and f["name"] not in TRUE_FINDINGS] == []
    assert [f for f in report.vocab_map if f.get("error")] == []


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("every")
    tensors = make_target(root / "target", TARGET)
    return {"root": root, "target": root / "target", "tensors": tensors}


def make_head(kind: str, built) -> str:
    folder = built["root"] / kind
    if not folder.exists():
        if kind.startswith("eagle1"):
            make_eagle1_head(folder, TARGET, built["tensors"], fmt="safetensors", fc_bias=kind.endswith("fc-bias"))
        else:
            make_variant_head(folder, **VARIANTS[kind.removeprefix("eagle3-")])
    return str(folder)


@pytest.mark.parametrize("to", WRITABLE)
@pytest.mark.parametrize("head", HEADS)
def test_every_eagle_output_is_inspected_clean(head, to, built, tmp_path):
    draft, kind = make_head(head, built), head.split("-")[0]
    if kind not in LAYOUTS[to].kinds:
        pytest.skip(f"--to {to} does not hold {kind} heads")
    try:
        eagle_convert.convert(draft, str(built["target"]), tmp_path / "out", to=to, fc_bias="fold" if to == "vllm"
                              else "error")
    except EagleConvertError as exc:  # a refusal by design writes nothing, so there is nothing to inspect
        pytest.skip(f"--to {to} refuses {head}: {exc.message}")
    for target in (str(built["target"]), None):
        assert_clean(eagle_convert.inspect(str(tmp_path / "out"), target), READ_AS.get((to, kind), to), kind)


@pytest.fixture(scope="module")
def mtp_targets(tmp_path_factory):
    root = tmp_path_factory.mktemp("every-mtp")
    out = {f: build_mtp_target(root / f, MtpFixture(f)) for f in FAMILIES}
    out["deepseek_fp8"] = build_mtp_target(root / "deepseek_fp8", MtpFixture("deepseek_v3", fp8=True))
    return out


def test_every_mtp_layout_is_covered():
    assert {to for _, to, _ in MTP_CASES} == set(extraction_layouts(MTP))


@pytest.mark.parametrize("family, to, dequantize", MTP_CASES)
def test_every_mtp_output_is_inspected_clean(family, to, dequantize, mtp_targets, tmp_path):
    target = mtp_targets[family]
    extract_mtp(str(target.path), tmp_path / "out", MtpSettings(to=to, dequantize=dequantize))
    for with_target in (str(target.path), None):
        report = eagle_convert.inspect(str(tmp_path / "out"), with_target)
        assert_clean(report, f"mtp-{to}", "mtp")
        assert report.mtp["layers"] == 1 and report.mtp["provenance"]["target"] == str(target.path)


def test_a_gguf_output_is_read_through_its_provenance_and_a_bare_gguf_is_refused(built, tmp_path):
    """A llama.cpp draft GGUF has no config.json: inspect reads the folder convert wrote through eagle_convert.json
    (layout, tensors with dtype and shape); the same GGUF copied without it is refused in one paragraph naming what
    to inspect instead (negative control: without the provenance nothing says the file is ours)."""
    import shutil

    from eagle_convert.errors import LayoutError

    eagle_convert.convert(make_head("eagle3-base", built), str(built["target"]), tmp_path / "out", to="gguf")
    report = eagle_convert.inspect(str(tmp_path / "out"))
    assert (report.layout, report.kind) == ("gguf", "eagle3") and report.problems == []
    assert {t["name"]: t["dtype"] for t in report.tensors}["d2t"] == "int64"
    (tmp_path / "bare").mkdir()
    shutil.copy(tmp_path / "out" / "eagle3.gguf", tmp_path / "bare")
    with pytest.raises(LayoutError, match="llama.cpp's format, which eagle-convert writes but does not read"):
        eagle_convert.inspect(str(tmp_path / "bare"))
