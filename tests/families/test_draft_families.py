"""Every late-2026 draft family (eagle_convert.testing.family_fixtures) is named by `inspect` and, unless eagle-convert
converts it, refused by `convert` in one paragraph naming the family and the engines and methods that load it as it
is, with nothing written (issue 32). The head kinds eagle-convert converts are claimed by no family."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner
from safetensors import safe_open

from eagle_convert.cli.main import main
from eagle_convert.families import BY_NAME as ROWS
from eagle_convert.families import family_of
from eagle_convert.testing import dflash
from eagle_convert.testing.family_fixtures import BY_NAME, FFN, N_TARGET, H, V, build_family
from eagle_convert.testing.tiny import TinyConfig, make_eagle1_head, make_eagle3_head, make_target, target_tensors

TARGET = TinyConfig(hidden_size=H, num_hidden_layers=N_TARGET, num_attention_heads=4, num_key_value_heads=2,
                    intermediate_size=FFN, vocab_size=V)
REFUSED = sorted(n for n in BY_NAME if ROWS[n].converts is None)
CONVERTED = sorted(n for n in BY_NAME if ROWS[n].converts is not None)
FROM_TARGET = [n for n in REFUSED if n.startswith("mtp-") or n == "dspark-deepseek-v4"]


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def methods(name: str) -> list[str]:
    """The method names a refusal must say: what sits in backquotes in the row's engines."""
    return [m for engine in ROWS[name].engines for m in re.findall(r"`([^`]+)`", engine)]


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    folder = tmp_path_factory.mktemp("target") / "target"
    make_target(folder, TARGET)
    return folder


def test_every_fixture_has_a_row_and_every_row_a_fixture():
    assert sorted(ROWS) == sorted(BY_NAME)
    assert REFUSED and CONVERTED and "peagle" in REFUSED and "dspark" in REFUSED


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_inspect_names_the_family(tmp_path, name):
    folder = build_family(name, tmp_path / name)
    report = json.loads(cli("inspect", folder, "--json").output)
    assert report["family"]["family"] == name and report["family"]["engines"] == list(ROWS[name].engines)
    human = cli("inspect", folder).output
    assert f"family: {name}, {ROWS[name].title}" in human
    if name in REFUSED:
        assert "does not convert it" in report["problems"][0]["problem"]


@pytest.mark.parametrize("name", REFUSED)
def test_convert_refuses_by_name_with_the_engines(tmp_path, target, name):
    folder = build_family(name, tmp_path / name)
    before = sorted(p.name for p in folder.iterdir())
    out = tmp_path / "out"
    result = cli("convert", folder, "--target", target, "-o", out)
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert ROWS[name].title in text and "does not convert it" in text and "Traceback" not in text
    assert all(m in text for m in methods(name)) and methods(name)
    assert not out.exists() and sorted(p.name for p in folder.iterdir()) == before


@pytest.mark.parametrize("name", FROM_TARGET)
def test_convert_mtp_refuses_by_name(tmp_path, name):
    folder = build_family(name, tmp_path / name)
    out = tmp_path / "out"
    result = cli("convert", "--mtp", folder, "-o", out)
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert "DSpark" in text if name.startswith("dspark") else ROWS[name].title in text
    assert all(m in text for m in methods(name)) and not out.exists()


@pytest.mark.parametrize("name", [n for n in CONVERTED if n.startswith("eagle3-")])
def test_converted_families_convert_with_the_method_named(tmp_path, target, name):
    folder = build_family(name, tmp_path / name)
    result = cli("convert", folder, "--target", target, "-o", tmp_path / "out", "--to", "vllm")
    assert result.exit_code == 0, result.output
    assert '"method": "eagle3"' in result.output and (tmp_path / "out" / "model.safetensors").is_file()


def test_no_family_claims_the_kinds_eagle_convert_converts(tmp_path):
    """Negative control: EAGLE-1, EAGLE-3 and DFlash (z-lab, Qwen3, JetSpec, speculators) heads are no family's."""
    weights = target_tensors(TARGET)
    make_eagle1_head(tmp_path / "e1", TARGET, weights, fmt="safetensors")
    make_eagle3_head(tmp_path / "e3", TARGET, weights)
    heads = {"e1": tmp_path / "e1", "e3": tmp_path / "e3",
             **dflash.build_dflash_set(tmp_path / "dflash", layers=1)}
    for name, folder in heads.items():
        config = json.loads((folder / "config.json").read_text())
        with safe_open(folder / "model.safetensors", "pt") as f:
            names = set(f.keys())
        assert family_of(config, names) is None, name
