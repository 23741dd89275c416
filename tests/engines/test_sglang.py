"""Real SGLang 0.5.23 loads every `--to sglang` output completely (`sglang` marker, `make test-sglang`).

SGLang's speculative decoding has no CPU kernel on any registry (docs/design/sglang-cpu.md), so this is the loader
check: SGLang's ModelConfig, ModelRegistry, model class, safetensors iterator and load_weights, TP=1 over gloo, every
parameter NaN-filled first (scripts/engines/sglang_load_check.py). Every parameter must equal the tensor it comes
from, every output tensor must land on a parameter, and the variant SGLang builds (its flags, aux layers) must be the
head's. The variants SGLang cannot express are refused by convert instead (test_variants.py). One SGLang start (~1
minute) checks all heads."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from support.variant_heads import TARGET, VARIANTS, WIDE_TARGET, make_variant_head

import eagle_convert
from eagle_convert.checkpoint.index import Checkpoint
from eagle_convert.draft.load import load_draft
from eagle_convert.io.source import LocalSource
from eagle_convert.testing.tiny import make_eagle1_head, make_eagle3_head, make_target

pytestmark = pytest.mark.sglang

ROOT = Path(__file__).resolve().parents[2]
SGLANG_PYTHON = os.environ.get("SGLANG_PYTHON", str(ROOT / ".venv-sglang" / "bin" / "python"))
REFUSED_BY_SGLANG = {"norm_before_residual", "qwen3", "fc_bias"}  # test_variants.py checks the refusals


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    if not Path(SGLANG_PYTHON).is_file():
        pytest.skip(f"no SGLang interpreter at {SGLANG_PYTHON} (run `make test-sglang`)")
    root = tmp_path_factory.mktemp("sglang")
    tensors = make_target(root / "target", TARGET)
    make_target(root / "target-wide", WIDE_TARGET)
    heads = {}
    make_eagle1_head(root / "eagle1", TARGET, tensors, fc_bias=True)
    make_eagle1_head(root / "eagle1-nobias", TARGET, tensors, fc_bias=False)
    make_eagle3_head(root / "eagle3-release", TARGET, tensors, aux_layer_ids=[1, 2, 3])
    heads.update({n: "target" for n in ("eagle1", "eagle1-nobias", "eagle3-release")})
    for name, kw in VARIANTS.items():
        if name not in REFUSED_BY_SGLANG:
            make_variant_head(root / name, **kw)
            heads[name] = "target-wide" if kw.get("wide") else "target"
    make_variant_head(root / "legacy_fc_norm", exporter="legacy_fc_norm", **VARIANTS["eagle31"])
    make_variant_head(root / "modelopt", exporter="modelopt", **VARIANTS["aux4_norm_before_fc"])
    heads.update(legacy_fc_norm="target", modelopt="target")
    outs = {}
    for name, target in heads.items():
        eagle_convert.convert(str(root / name), str(root / target), root / f"out-{name}", to="sglang")
        outs[name] = (root / f"out-{name}", root / name, root / target)
    proc = subprocess.run([SGLANG_PYTHON, str(ROOT / "scripts" / "engines" / "sglang_load_check.py"),
                           *[str(out) for out, _, _ in outs.values()]], capture_output=True, text=True, timeout=900)
    results = {json.loads(line)["dir"]: json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")}
    assert len(results) == len(outs), proc.stderr[-3000:]
    return {name: (results[str(out)], source, target) for name, (out, source, target) in outs.items()}


HEADS = ["eagle1", "eagle1-nobias", "eagle3-release", "legacy_fc_norm", "modelopt",
         *[n for n in VARIANTS if n not in REFUSED_BY_SGLANG]]


@pytest.mark.parametrize("name", HEADS)
def test_sglang_loads_every_tensor_onto_its_parameter(loaded, name):
    result, source, target = loaded[name]
    assert result["problems"] == [], result["problems"]
    eagle1 = name.startswith("eagle1")
    assert result["class"].endswith("LlamaForCausalLMEagle" if eagle1 else "LlamaForCausalLMEagle3")
    assert result["checked"] >= 8
    # The head as the source states it (not our output read back, which would share a convention mistake)
    spec = load_draft(Checkpoint(LocalSource(source)), json.loads((target / "config.json").read_text())).spec
    if eagle1:
        return
    view = result["sglang_view"]
    assert view == {"norm_before_fc": spec.norm_before_fc, "fc_norm": spec.fc_norm, "norm_output": spec.norm_output,
                    "num_aux_hidden_states": spec.num_aux_states, "num_layers": spec.num_layers,
                    "use_aux_hidden_state": spec.use_aux_hidden_state,
                    "layers_to_capture": list(spec.aux_layer_ids or ()),  # SGLang captures the inputs of these
                    "draft_vocab_size": spec.draft_vocab_size,
                    "fc_input": spec.num_aux_states * spec.target_hidden_size}
