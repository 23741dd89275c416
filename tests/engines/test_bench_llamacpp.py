"""`bench --engine llamacpp --compare` in real llama.cpp b11434 (`make test-llamacpp`): the engine pair of
support/engine_pair.py (a head that agrees with its target only through taps 2, 6, 9), greedy fp32.

The head as released, converted by bench itself: llama.cpp accepts exactly the drafts our runner accepts on every
prompt, its tokens are ours and its own plain decoding's (lossless), and it drafts one round more per prompt (shown,
not gated). Negative controls, each a GGUF written here on purpose and benched against the released head
(--reference-draft): taps one layer deeper, and d2t left as HF's offsets. Acceptance falls and --compare exits 3."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch
from support.engine_pair import TAPS, build_engine_pair
from support.llamacpp import LLAMACPP_BIN, LLAMACPP_CONVERT

import eagle_convert
from eagle_convert.io.gguf_file import GgufTensor, read_gguf, write_gguf

pytestmark = pytest.mark.llamacpp
K, MAX_NEW_TOKENS = 3, 24


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    if not (LLAMACPP_BIN and LLAMACPP_CONVERT):
        pytest.skip("LLAMACPP_BIN / LLAMACPP_CONVERT are not set (run `make test-llamacpp`)")
    return build_engine_pair(tmp_path_factory.mktemp("bench-llamacpp"))


def bench(pair, draft, *extra) -> tuple[int, dict]:
    result = subprocess.run(
        [sys.executable, "-m", "eagle_convert", "bench", "-t", str(pair["target"]), "-d", str(draft), "--engine",
         "llamacpp", "--compare", "--prompts", str(pair["prompts"]), "-k", str(K), "--max-new-tokens",
         str(MAX_NEW_TOKENS), "--dtype", "float32", "--device", "cpu", "--json", "-q", *map(str, extra)],
        capture_output=True, text=True, timeout=1200)
    assert result.returncode in (0, 3), result.stderr[-3000:]
    return result.returncode, json.loads(result.stdout)


def accepted(report: dict, side: str) -> list[int]:
    return [row[side]["accepted"] for row in report["compare"]["rows"]]


@pytest.fixture(scope="module")
def released(pair):
    return bench(pair, pair["eagle3"])


def test_llamacpp_accepts_exactly_what_our_runner_accepts_and_is_lossless(released):
    code, report = released
    assert code == 0, report["gate"]
    ours, theirs = accepted(report, "ours"), accepted(report, "engine")
    drafted = sum(c["num_draft_tokens"] for c in report["engine"]["counters"]["prompts"])
    assert ours == theirs and 0 < sum(theirs) < drafted  # the pair agrees in part: 0 accepted would prove nothing
    assert all(row["first_difference"] is None for row in report["compare"]["rows"])
    assert report["lossless"]["mode"] == "exact" and report["lossless"]["identical"]  # = llama-simple's output
    assert all(len(p["output_token_ids"][0]) == MAX_NEW_TOKENS for p in report["prompts"])
    # its extra first round (drafted before the first target token) is shown beside ours, not hidden
    rows = report["compare"]["rows"]
    assert [r["engine"]["drafts"] for r in rows] == [r["ours"]["drafts"] + 1 for r in rows]
    gate = next(g for g in report["gate"]["checks"] if g["name"] == "engine_compare")
    assert gate["drafted"]["engine"] > gate["drafted"]["ours"]


def written_gguf(pair, tmp_path, head) -> object:
    eagle_convert.convert(str(head), str(pair["target"]), tmp_path / "out", to="gguf", dtype="float32")
    return tmp_path / "out" / "eagle3.gguf"


def test_negative_control_taps_one_layer_deeper_fail_the_compare(pair, released, tmp_path):
    shifted = tmp_path / "shifted"
    shutil.copytree(pair["eagle3"], shifted)
    config = json.loads((shifted / "config.json").read_text())
    (shifted / "config.json").write_text(json.dumps(config | {"eagle_aux_hidden_state_layer_ids":
                                                              [i + 1 for i in TAPS]}))
    gguf = written_gguf(pair, tmp_path, shifted)
    assert read_gguf(gguf).metadata["eagle3.target_layers"] == [i + 1 for i in TAPS]
    code, report = bench(pair, gguf, "--reference-draft", pair["eagle3"])
    assert code == 3
    assert sum(accepted(report, "engine")) < sum(accepted(report, "ours")) == sum(accepted(released[1], "ours"))


def test_negative_control_d2t_as_offsets_fails_the_compare(pair, released, tmp_path):
    """The file llama.cpp would get from a converter that copied HF's d2t (offsets) instead of absolute ids."""
    ours = read_gguf(written_gguf(pair, tmp_path, pair["eagle3"]))
    offsets = ours.tensor("d2t") - torch.arange(ours.tensors["d2t"][1][0])
    assert offsets.abs().sum() > 0  # otherwise offsets and absolute ids coincide and the control proves nothing
    values = {name: ours.tensor(name) for name in ours.tensors} | {"d2t": offsets}
    bad = tmp_path / "offsets.gguf"
    write_gguf(bad, {k: (ours.types[k], v) for k, v in ours.metadata.items()},
               [GgufTensor(name, dtype, shape) for name, (dtype, shape, _) in ours.tensors.items()],
               lambda t: values[t.name])
    code, report = bench(pair, bad, "--reference-draft", pair["eagle3"])
    assert code == 3
    assert sum(accepted(report, "engine")) < sum(accepted(report, "ours"))
