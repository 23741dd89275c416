"""Real vLLM 0.32 (CPU) runs the EAGLE-3 variants it can load, converted by eagle-convert, with the same counters and
tokens as `bench` on the source head (`vllm` marker, `make test-vllm`). Three heads cover every variant flag vLLM
0.32 reads (docs/engine-notes.md): each is the structured release head of release_pair.py (partial acceptance) with
the variant's tensors added, so a dropped flag changes what vLLM computes.

- aux4-norm_before_fc: four aux states, one RMSNorm over their concatenation, flags nested in eagle_config (NVIDIA);
- qwen3-eagle31: a Qwen3-layer draft (q_norm/k_norm) with per-aux-state fc_norm and norm_output (EAGLE 3.1);
- two-layers-no-aux: use_aux_hidden_state false (fed the target's last hidden state), a second decoder layer and
  norm_before_residual true.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

import eagle_convert
from test_vllm import K, assert_same, our_counters, releases, vllm_counters  # noqa: F401 (releases: a fixture)

pytestmark = pytest.mark.vllm


def _noise(gen, *shape, scale):
    return torch.randn(*shape, generator=gen) * scale


def make_variant(releases, out, variant):  # noqa: F811 (releases is the fixture's value)
    """The release head (`midlayer.*`) with one variant's tensors and flags, saved in the release layout."""
    src = releases["eagle3"]
    t = load_file(src / "model.safetensors")
    cfg = json.loads((src / "config.json").read_text())
    gen = torch.Generator().manual_seed(7)
    hidden, head_dim = cfg["hidden_size"], cfg["head_dim"]
    ones = lambda n: 1.0 + _noise(gen, n, scale=0.05)  # noqa: E731
    if variant == "aux4-norm_before_fc":
        t["fc.weight"] = torch.cat([_noise(gen, hidden, hidden, scale=0.02), t["fc.weight"]], dim=1)
        t["input_norm.weight"] = ones(4 * hidden)
        ids = [0] + cfg.pop("eagle_aux_hidden_state_layer_ids")
        # NVIDIA style: flags nested in eagle_config, aux ids in SGLang's convention there (layer outputs: ours - 1)
        cfg["eagle_config"] = {"norm_before_fc": True, "eagle_aux_hidden_state_layer_ids": [i - 1 for i in ids]}
    elif variant == "qwen3-eagle31":
        for p in "qk":
            t[f"midlayer.self_attn.{p}_norm.weight"] = ones(head_dim)
        t.update({f"fc_norm.{i}.weight": ones(hidden) for i in range(3)})
        cfg.update(model_type="qwen3", fc_norm=True, norm_output=True)
    elif variant == "two-layers-no-aux":
        del t["fc.weight"]
        cfg.pop("eagle_aux_hidden_state_layer_ids")
        heads, kv_heads, inter = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["intermediate_size"]
        p = "layers.1."
        t.update({
            p + "self_attn.q_proj.weight": _noise(gen, heads * head_dim, hidden, scale=0.05),
            p + "self_attn.k_proj.weight": _noise(gen, kv_heads * head_dim, hidden, scale=0.05),
            p + "self_attn.v_proj.weight": _noise(gen, kv_heads * head_dim, hidden, scale=0.05),
            p + "self_attn.o_proj.weight": _noise(gen, hidden, heads * head_dim, scale=0.05),
            p + "mlp.gate_proj.weight": _noise(gen, inter, hidden, scale=0.05),
            p + "mlp.up_proj.weight": _noise(gen, inter, hidden, scale=0.05),
            p + "mlp.down_proj.weight": _noise(gen, hidden, inter, scale=0.05),
            p + "input_layernorm.weight": ones(hidden), p + "post_attention_layernorm.weight": ones(hidden),
        })
        cfg.update(num_hidden_layers=2, norm_before_residual=True, eagle_config={"use_aux_hidden_state": False})
    out.mkdir()
    save_file(t, out / "model.safetensors")
    (out / "config.json").write_text(json.dumps(cfg))
    return out


@pytest.mark.parametrize("variant", ["aux4-norm_before_fc", "qwen3-eagle31", "two-layers-no-aux"])
def test_vllm_runs_the_variant_as_bench_does(releases, tmp_path, variant):  # noqa: F811
    head = make_variant(releases, tmp_path / variant, variant)
    out = tmp_path / f"{variant}-vllm"
    eagle_convert.convert(str(head), str(releases["target"]), out, to="vllm", dtype="float32")
    ours = our_counters(releases["target"], head, releases["prompts"])
    assert_same(ours, vllm_counters(out, target=releases["target"], method="eagle3"))
