"""A short seeded run of the input fuzzer (support/fuzz.py; `make fuzz` runs the long one, marker `fuzz`): every
damaged input is refused cleanly or converted faithfully; and the fuzzer does
catch a converter that trusts a bad header."""

from __future__ import annotations

import os

import pytest
from support import fuzz as fuzz_convert


def test_a_short_fuzz_run_finds_nothing(tmp_path):
    summary = fuzz_convert.fuzz(40, seed=7, workdir=tmp_path, echo=lambda line: None)
    assert summary["failures"] == []
    assert summary["runs"] == 40 and summary["refused"] >= 10 and summary["converted"] >= 10  # both sides exercised


def test_the_fuzzer_catches_a_converter_that_trusts_headers(tmp_path, monkeypatch):
    from eagle_convert.io import source

    monkeypatch.setattr(source, "check_header", lambda header, data_len, where: None)  # the check before this work
    summary = fuzz_convert.fuzz(25, seed=7, workdir=tmp_path, echo=lambda line: None)
    assert summary["failures"], "header mutations went unnoticed without the header check"


def test_a_short_gguf_fuzz_run_finds_nothing(tmp_path):
    """Damaged EAGLE-3 heads (plain and llama3-scaled) converted --to gguf: refused in one paragraph, or a file
    whose tensors are their sources as rewritten (support/fuzz_gguf.py)."""
    summary = fuzz_convert.fuzz(12, seed=7, workdir=tmp_path, echo=lambda line: None, gguf=True)
    assert summary["failures"] == []
    assert summary["runs"] == 12 and summary["refused"] >= 3 and summary["converted"] >= 3


@pytest.mark.parametrize("seed, run, damage", [(0, 316, "head_dim = -1"), (0, 587, "q_proj.weight shape"),
                                               (11, 76, "fc.weight shape")])
def test_the_gguf_fuzz_reproducers_are_refused_cleanly(tmp_path, seed, run, damage):
    """Found by the FUZZ_GGUF=1 run: head_dim -1 escaped the GGUF writer as struct.error (a negative UINT32); a q_proj
    of shape [1, 64, 128] escaped llama.cpp's row permutation as a RuntimeError; an fc.weight of [64, 192, 1] escaped
    the EAGLE-3 reader (draft/variants.py) as a ValueError."""
    lines = []
    summary = fuzz_convert.fuzz(1, seed=seed, workdir=tmp_path, only=run, echo=lines.append, gguf=True)
    assert summary["failures"] == [] and summary["refused"] == 1, lines
    assert damage in lines[0]


def test_the_fuzzer_catches_a_gguf_writer_that_misorders_rows(tmp_path, monkeypatch):
    from eagle_convert.layouts import gguf

    monkeypatch.setattr(gguf, "llama_permute", lambda weight, heads: weight)  # q/k left in HF's row order
    summary = fuzz_convert.fuzz(12, seed=7, workdir=tmp_path, echo=lambda line: None, gguf=True)
    assert summary["failures"], "a GGUF with unpermuted q/k rows went unnoticed"


@pytest.mark.parametrize("seed, run", [(2, 23), (3, 30), (3, 528), (11, 787)])
def test_the_wrong_typed_config_reproducers_are_refused_cleanly(tmp_path, seed, run):
    """Once counted apart as KNOWN (a TypeError/ValueError traceback from a config reader): target vocab_size 'F32',
    draft num_key_value_heads [[4]], EAGLE-3 num_hidden_layers [], architectures -1. Now clean refusals."""
    lines = []
    summary = fuzz_convert.fuzz(1, seed=seed, workdir=tmp_path, only=run, echo=lines.append)
    assert summary["failures"] == [] and summary["refused"] == 1, lines
    assert "config.json" in lines[0]


@pytest.mark.fuzz
def test_the_long_fuzz_run_finds_nothing(tmp_path):
    """`make fuzz`: FUZZ_N runs from FUZZ_SEED (1000 from 0), or the one run FUZZ_ONLY replays; every failure named
    with the values that replay it. FUZZ_SURFACE=convert,maps,... picks surfaces (the others: test_fuzz_surfaces.py);
    FUZZ_GGUF=1 makes every convert run a `--to gguf` one."""
    picked = os.environ.get("FUZZ_SURFACE", "")
    if picked and "convert" not in picked.split(","):
        pytest.skip(f"FUZZ_SURFACE={picked}")
    only = int(os.environ["FUZZ_ONLY"]) if os.environ.get("FUZZ_ONLY") else None
    summary = fuzz_convert.fuzz(int(os.environ.get("FUZZ_N", "1000")), seed=int(os.environ.get("FUZZ_SEED", "0")),
                                workdir=tmp_path, only=only, gguf=os.environ.get("FUZZ_GGUF") == "1")
    print(f"{summary['runs']} runs in {summary['seconds']} s: {summary['refused']} refused, "
          f"{summary['converted']} converted faithfully, {len(summary['failures'])} failed")
    assert summary["failures"] == []

