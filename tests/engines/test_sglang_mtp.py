"""Real SGLang 0.5.23 loads every parameter of a `convert --mtp TARGET --to sglang` output (the NextN layout of
SGLang's export_deepseek_nextn.py) for the DeepSeek-V3 and GLM-4.5 families (`sglang` marker, `make test-sglang`).

SGLang has no CPU speculative decoding (docs/design/sglang-cpu.md), so this is the loader check of
scripts/engines/sglang_mtp_load_check.py: SGLang's draft ModelConfig picks the NextN class, every parameter starts as
NaN, SGLang's own loader fills them; none may stay NaN but the embedding and LM head its server takes from the target,
and those kept under the checkpoint's names must equal the tensors. A NextN output with one expert tensor removed is
the negative control: the check must name the parameter left unloaded. One SGLang start for all three."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file
from support.mtp_bench import engine_fixture

from eagle_convert.api import MtpSettings, extract_mtp
from eagle_convert.testing.mtp_targets import build_mtp_target

pytestmark = pytest.mark.sglang

ROOT = Path(__file__).resolve().parents[2]
SGLANG_PYTHON = os.environ.get("SGLANG_PYTHON", str(ROOT / ".venv-sglang" / "bin" / "python"))
FIXTURES = {family: engine_fixture(family) for family in ("deepseek_v3", "glm4_moe")}
REMOVED = "model.layers.0.mlp.experts.1.down_proj.weight"


def _remove(folder: Path, name: str) -> None:
    file = folder / "nextn_layer_parameters.safetensors"
    tensors = load_file(file)
    del tensors[name]
    save_file(tensors, file)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    del index["weight_map"][name]
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    if not Path(SGLANG_PYTHON).is_file():
        pytest.skip(f"no SGLang interpreter at {SGLANG_PYTHON} (run `make test-sglang`)")
    root = tmp_path_factory.mktemp("sglang-mtp")
    outs = {}
    for family, fixture in FIXTURES.items():
        target = build_mtp_target(root / family, fixture).path
        outs[family] = root / f"{family}-sglang"
        extract_mtp(str(target), outs[family], MtpSettings(to="sglang"))
    outs["broken"] = root / "broken-sglang"
    extract_mtp(str(root / "glm4_moe"), outs["broken"], MtpSettings(to="sglang"))
    _remove(outs["broken"], REMOVED)
    proc = subprocess.run([SGLANG_PYTHON, str(ROOT / "scripts" / "engines" / "sglang_mtp_load_check.py"),
                           *map(str, outs.values())], capture_output=True, text=True, timeout=900)
    results = {json.loads(line)["dir"]: json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")}
    assert len(results) == len(outs), proc.stderr[-3000:]
    return {name: results[str(out)] for name, out in outs.items()}


@pytest.mark.parametrize("family", FIXTURES)
def test_sglang_loads_every_parameter_of_the_nextn_layout(loaded, family):
    result = loaded[family]
    assert result["problems"] == []
    assert result["class"].endswith(("DeepseekV3ForCausalLMNextN", "Glm4MoeForCausalLMNextN"))
    assert set(result["not_from_checkpoint"]) <= {"model.embed_tokens.weight", "lm_head.weight"}
    assert result["filled"] == result["params"] - len(result["not_from_checkpoint"])
    assert result["checked"] >= 10  # eh_proj, enorm, hnorm, shared_head.norm, layer norms, router, ... by value


def test_a_missing_tensor_is_a_parameter_left_unloaded(loaded):
    problems = " ".join(loaded["broken"]["problems"])
    assert "was not (fully) loaded" in problems and "experts" in problems
