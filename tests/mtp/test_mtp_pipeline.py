"""`convert --mtp` goes through the pipeline every conversion does: its layouts are rows of the one layout registry
(kept out of `convert DRAFT`'s choices and tables), their renames are a table, and the one executor writes the plan,
reading ahead as `convert` does."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from eagle_convert.api import MtpSettings, extract_mtp
from eagle_convert.checkpoint.index import parse_safetensors_header
from eagle_convert.cli.main import main
from eagle_convert.io.source import LocalSource
from eagle_convert.kinds import MTP
from eagle_convert.layouts import LAYOUTS, output_layouts
from eagle_convert.layouts.registry import draft_layouts, extraction_layouts, markdown_table
from eagle_convert.testing.mtp_targets import MtpFixture, build_mtp_target


def test_mtp_layouts_are_rows_of_the_one_registry():
    assert extraction_layouts(MTP) == {"vllm": LAYOUTS["mtp-vllm"], "sglang": LAYOUTS["mtp-sglang"]}
    assert all(MTP in LAYOUTS[name].kinds for name in ("mtp-vllm", "mtp-sglang"))
    # ... but never a choice, a table row or a detected input of `convert DRAFT`
    assert not any(name.startswith("mtp-") for name in [*output_layouts(), *draft_layouts()])
    assert "mtp-" not in markdown_table()
    listed = CliRunner().invoke(main, ["layouts"]).output
    assert "mtp-" not in listed and "vllm-v0" in listed  # negative control: the command lists layouts


def test_sglang_renames_are_a_table():
    sglang, vllm = LAYOUTS["mtp-sglang"], LAYOUTS["mtp-vllm"]
    assert sglang.output_name("model.layers.61.eh_proj.weight", 61) == "model.layers.0.eh_proj.weight"
    assert sglang.output_name("model.layers.610.eh_proj.weight", 61) == "model.layers.610.eh_proj.weight"
    assert sglang.output_name("model.layers.6.eh_proj.weight", 61) == "model.layers.6.eh_proj.weight"
    assert vllm.output_name("model.layers.61.eh_proj.weight", 61) == "model.layers.61.eh_proj.weight"


@pytest.mark.parametrize("to", ["vllm", "sglang"])
def test_extraction_reads_ahead_every_range_in_write_order(to, tmp_path, monkeypatch):
    target = build_mtp_target(tmp_path / "t", MtpFixture("deepseek_v3"))
    warmed, original = [], LocalSource.warm

    def spy(self, rel, offset, length):
        warmed.append((rel, offset, length))
        return original(self, rel, offset, length)

    monkeypatch.setattr(LocalSource, "warm", spy)

    result = extract_mtp(str(target.path), tmp_path / "out", MtpSettings(to=to))
    refs = parse_safetensors_header(LocalSource(target.path), target.mtp_file)
    wanted = [(target.mtp_file, refs[t.role].offset, refs[t.role].nbytes) for t in result.plan.tensors]
    assert warmed == wanted and len(wanted) > 10
    if to == "sglang":  # the copies it drops are neither read nor read ahead
        assert len(wanted) < len(refs)
