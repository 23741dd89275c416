"""Settings declared once: the command line and the Python keywords build the same settings objects and reach the
same function (one bench entry point, one convert), and bench reads a draft repo with the Hub options convert has."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.convert import flat, run_cli

import eagle_convert
from eagle_convert.benchmark import entry as bench_api
from eagle_convert.cli.main import main
from eagle_convert.conversion import converter

GOLDEN = Path(__file__).parents[1] / "golden" / "eagle1-llama2"


class Reached(Exception):
    """Raised by the recording stand-in: what it was called with is all the test needs."""


def record(monkeypatch, module, name: str) -> list:
    calls = []

    def stand_in(*args):
        calls.append(args)
        raise Reached

    monkeypatch.setattr(module, name, stand_in)
    return calls


def test_bench_cli_and_python_keywords_build_the_same_settings(monkeypatch):
    calls = record(monkeypatch, bench_api, "run")
    target, draft = str(GOLDEN / "target"), str(GOLDEN / "draft")
    args = ["bench", "-t", target, "-d", draft, "-k", "2", "--max-new-tokens", "5", "--seed", "7", "--dtype",
            "float32", "--no-baseline", "--drop", "x*", "--min-acceptance-length", "1.5", "--max-model-len", "99",
            "--revision", "r1", "--token", "tok", "--offline", "--quiet"]
    result = CliRunner().invoke(main, args)
    assert isinstance(result.exception, Reached), result.output
    with pytest.raises(Reached):
        eagle_convert.bench(target, draft, k=2, max_new_tokens=5, seed=7, dtype="float32", baseline=False,
                            drop=("x*",), min_acceptance_length=1.5, max_model_len=99, revision="r1", token="tok",
                            offline=True)
    (cli_target, cli_draft, cli_settings, cli_hub), python = calls
    cli_settings = replace(cli_settings, decode=replace(cli_settings.decode, tree=None))  # the CLI's chain, spelled
    assert (cli_target, cli_draft, cli_settings, cli_hub) == python
    assert cli_hub.revision == "r1" and cli_hub.offline is True and cli_settings.baseline is False
    assert cli_settings != replace(python[2], max_model_len=None)  # negative control: a difference is seen


def test_convert_cli_and_python_keywords_build_the_same_settings(monkeypatch, tmp_path):
    calls = record(monkeypatch, converter, "convert")
    target, draft, out = str(GOLDEN / "target"), str(GOLDEN / "draft"), tmp_path / "out"
    result = CliRunner().invoke(main, ["convert", draft, "-t", target, "-o", str(out), "--to", "vllm", "--dtype",
                                       "float16", "--drop", "x*", "--max-shard-size", "5GB", "--target-embed", "e",
                                       "--revision", "r1", "--target-revision", "r2", "--token", "tok", "--quiet"])
    assert isinstance(result.exception, Reached), result.output
    with pytest.raises(Reached):
        eagle_convert.convert(draft, target, str(out), to="vllm", dtype="float16", drop=("x*",),
                              max_shard_size=5 * 10**9, target_embed="e", revision="r1", target_revision="r2",
                              token="tok")
    assert calls[0] == calls[1]
    assert calls[0][3].tensors.target_embed == "e" and calls[0][4].target_revision == "r2"


def test_an_unknown_keyword_is_a_type_error():
    with pytest.raises(TypeError, match="'dtypes'"):
        eagle_convert.convert("draft", "target", "out", dtypes="float16")
    with pytest.raises(TypeError, match="'dtypes'"):
        eagle_convert.bench("target", "draft", dtypes="float16")


def test_bench_reads_a_draft_repo_with_the_hub_options(tmp_path):
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "empty-cache"), "HF_HOME": str(tmp_path / "hf")}
    done = run_cli("bench", "-t", GOLDEN / "target", "-d", "someorg/no-such-head", "--offline", env=env)
    assert done.returncode == 1, done.stderr  # before: exit 2, no such option
    assert "--offline" in flat(done.stderr) and "cache" in flat(done.stderr)
    assert "Traceback" not in done.stderr
