"""inspect of `convert --mtp` outputs (issue 29): an MTP draft folder is read as one (family, layers, engine and
method, provenance, the bench runner's true verdict), never as a target; counts a config gives are bounded by the
tensors held before they drive a loop; an incomplete extraction names the draft folder; the position-limit problem
is raised only when the draft's limit is below the target's."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

import eagle_convert
from eagle_convert.api import MtpSettings, extract_mtp
from eagle_convert.cli.main import main
from eagle_convert.testing.mtp_targets import MtpFixture, build_mtp_target
from eagle_convert.testing.tiny import TinyConfig, make_eagle1_head, make_target

HUGE = 10**30


@pytest.fixture(scope="module")
def outs(tmp_path_factory):
    root = tmp_path_factory.mktemp("inspect-mtp")
    mimo, ds = (build_mtp_target(root / f, MtpFixture(f)) for f in ("mimo", "deepseek_v3"))
    extract_mtp(str(mimo.path), root / "mimo-vllm")
    extract_mtp(str(ds.path), root / "ds-vllm")
    extract_mtp(str(ds.path), root / "ds-sglang", MtpSettings(to="sglang"))
    return {"root": root, "mimo": mimo.path, "ds": ds.path}


def inspect_cli(*args):
    result = CliRunner().invoke(main, ["inspect", *map(str, args)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("name, bench", [("mimo-vllm", "bench runner: yes"), ("ds-vllm", "bench runner: no"),
                                         ("ds-sglang", "bench runner: no")])
def test_an_mtp_folder_is_reported_as_a_draft_not_a_target(name, bench, outs):
    text = inspect_cli(outs["root"] / name)
    layout = name.split("-")[1]
    assert f"mtp-{layout} layout" in text and "kind: mtp" in text and "problems: none found" in text
    assert "target checkpoint" not in text and "--target-lm-head" not in text and "not where eagle-convert" not in text
    assert "mtp draft: 1 layer(s)" in text and bench in text
    served = {"vllm": '"method": "mtp"', "sglang": "--speculative-algorithm EAGLE"}[layout]
    assert served in text and f"from {outs['mimo' if 'mimo' in name else 'ds']}" in text  # provenance


def test_the_sglang_layer_at_index_0_is_found(outs):
    report = eagle_convert.inspect(str(outs["root"] / "ds-sglang"))
    assert report.mtp["layers"] == 1 and report.mtp["tensors"] == 30  # the copies dropped by SGLang's layout
    assert all(t["name"].startswith("model.layers.0.") for t in report.tensors)
    assert report.mtp["serve"]["engine"] == "sglang" and report.target is None


def test_an_mtp_folder_of_another_target_is_a_problem(outs):
    """Negative control for the clean reports: the DeepSeek folders inspected against the MiMo target."""
    for name in ("ds-vllm", "ds-sglang"):
        report = eagle_convert.inspect(str(outs["root"] / name), str(outs["mimo"]))
        assert [p.what for p in report.problems if "config is not its target's" in p.what], name
    assert eagle_convert.inspect(str(outs["root"] / "ds-sglang"), str(outs["ds"])).problems == []


def test_an_incomplete_extraction_names_the_draft_folder(outs, tmp_path):
    folder = tmp_path / "broken"
    folder.mkdir()
    for f in (outs["root"] / "mimo-vllm").iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    tensors = load_file(folder / "model.safetensors")
    del tensors["model.mtp_layers.0.self_attn.q_proj.weight"]
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    report = eagle_convert.inspect(str(folder))
    [problem] = report.problems
    assert f"The MTP draft folder {folder}'s MiMo-7B MTP layers are incomplete" in problem.what
    assert "target's" not in problem.what and "convert --mtp TARGET" in problem.fix
    result = CliRunner().invoke(main, ["bench", "--target", str(outs["mimo"]), "--draft", str(folder)])
    assert result.exit_code == 1 and "MTP draft folder" in " ".join(result.output.split())


@pytest.mark.parametrize("family, key", [("mimo", "num_nextn_predict_layers"), ("deepseek_v3", "n_routed_experts"),
                                         ("qwen3_next", "num_experts")])
def test_an_absurd_count_is_refused_at_once_naming_key_value_and_what_is_held(family, key, tmp_path):
    target = build_mtp_target(tmp_path / "t", MtpFixture(family, config_extra={key: HUGE})).path
    result = CliRunner().invoke(main, ["convert", "--mtp", str(target), "-o", str(tmp_path / "out")])
    message = " ".join(result.output.split())
    assert result.exit_code == 1 and "Traceback" not in message and not (tmp_path / "out").exists()
    assert f"{key}: {HUGE}" in message and ("1 MiMo-7B MTP layer(s)" in message or "4 routed expert(s)" in message)
    mtp = eagle_convert.inspect(str(target)).target["mtp"]  # inspect answers too, instead of hanging
    assert mtp["found"] is False and f"{key}: {HUGE}" in mtp["why"]


def test_a_count_the_tensors_hold_is_still_accepted(tmp_path):
    """Control: the bound does not refuse a config that says exactly what is held (two layers)."""
    target = build_mtp_target(tmp_path / "t", MtpFixture("mimo", layers=2)).path
    assert eagle_convert.inspect(str(target)).target["mtp"]["layers"] == 2


def _limit(folder, value):
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "max_position_embeddings": value}))


def test_a_2048_draft_of_a_2048_target_is_not_short(tmp_path):
    cfg = TinyConfig()
    tensors = make_target(tmp_path / "target", cfg)
    make_eagle1_head(tmp_path / "draft", cfg, tensors, fmt="safetensors", fc_bias=False)
    _limit(tmp_path / "target", 2048)
    eagle_convert.convert(str(tmp_path / "draft"), str(tmp_path / "target"), tmp_path / "out", to="vllm")
    for folder, target in [("out", None), ("out", "target"), ("draft", "target")]:
        report = eagle_convert.inspect(str(tmp_path / folder), str(tmp_path / target) if target else None)
        assert not [p.what for p in report.problems if "max_position_embeddings" in p.what], (folder, target)
    _limit(tmp_path / "target", 4096)  # negative control: the same draft below its target's limit
    report = eagle_convert.inspect(str(tmp_path / "draft"), str(tmp_path / "target"))
    assert [p.what for p in report.problems if "max_position_embeddings is 2048, below the target's 4096" in p.what]
