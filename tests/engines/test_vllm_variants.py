"""Real vLLM 0.32 (CPU) runs the EAGLE-3 variants it can load, converted by eagle-convert, with the same counters and
tokens as `bench` on the source head (`vllm` marker, `make test-vllm`). They cover every variant flag vLLM 0.32
reads (docs/engine-notes.md): each is the structured release head of release_pair.py (partial acceptance) with the
variants' tensors added, so a dropped flag changes what vLLM computes. Two heads (two vLLM starts):

- a Llama-layer head with four aux states, one RMSNorm over their concatenation (norm_before_fc, nested in
  eagle_config as NVIDIA's heads have it), per-aux-state fc_norm and norm_output (EAGLE 3.1), and a second layer;
- a Qwen3-layer head (q_norm/k_norm) with use_aux_hidden_state false (fed the target's last hidden state) and
  norm_before_residual true.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from support.vllm import assert_same, our_counters, vllm_counters

import eagle_convert

pytestmark = pytest.mark.vllm


def _noise(gen, *shape, scale):
    return torch.randn(*shape, generator=gen) * scale


def make_variant(releases, out, flags: set[str]):  # noqa: F811 (releases is the fixture's value)
    """The release head (`midlayer.*`) with the tensors and config of each variant flag, in the release layout."""
    src = releases["eagle3"]
    t = load_file(src / "model.safetensors")
    cfg = json.loads((src / "config.json").read_text())
    gen = torch.Generator().manual_seed(7)
    hidden, head_dim = cfg["hidden_size"], cfg["head_dim"]
    ones = lambda n: 1.0 + _noise(gen, n, scale=0.5)  # noqa: E731  (far from 1: dropping a norm shows in the counters)
    nested = cfg.setdefault("eagle_config", {})
    n_aux = 3
    if "aux4" in flags:
        t["fc.weight"] = torch.cat([_noise(gen, hidden, hidden, scale=0.02), t["fc.weight"]], dim=1)
        ids = [0] + cfg.pop("eagle_aux_hidden_state_layer_ids")
        # NVIDIA style: aux ids nested in eagle_config, in SGLang's convention there (layer outputs: ours - 1)
        nested["eagle_aux_hidden_state_layer_ids"] = [i - 1 for i in ids]
        n_aux = 4
    if "norm_before_fc" in flags:
        t["input_norm.weight"] = ones(n_aux * hidden)
        nested["norm_before_fc"] = True
    if "eagle31" in flags:
        t.update({f"fc_norm.{i}.weight": ones(hidden) for i in range(n_aux)})
        cfg.update(fc_norm=True, norm_output=True)
    if "qwen3" in flags:
        for p in "qk":
            # far from 1: q/k norms near 1 barely move this pair's counters
            t[f"midlayer.self_attn.{p}_norm.weight"] = 1.0 + _noise(gen, head_dim, scale=2.0)
        cfg["model_type"] = "qwen3"
    if "no_aux" in flags:
        del t["fc.weight"]
        cfg.pop("eagle_aux_hidden_state_layer_ids")
        nested["use_aux_hidden_state"] = False
    if "norm_before_residual" in flags:
        cfg["norm_before_residual"] = True
    if "two_layers" in flags:
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
        cfg["num_hidden_layers"] = 2
    out.mkdir()
    save_file(t, out / "model.safetensors")
    (out / "config.json").write_text(json.dumps(cfg))
    return out


def without(head, out, flag):
    """The same head with one flag and its tensors removed: what an engine that ignored the flag would run."""
    t = load_file(head / "model.safetensors")
    cfg = json.loads((head / "config.json").read_text())
    prefix = {"fc_norm": "fc_norm.", "norm_before_fc": "input_norm."}.get(flag)
    if flag == "qk_norm":
        t = {k: v for k, v in t.items() if "q_norm" not in k and "k_norm" not in k}
        cfg["model_type"] = "llama"
    else:
        t = {k: v for k, v in t.items() if not (prefix and k.startswith(prefix))}
        cfg.pop(flag, None)
        cfg.get("eagle_config", {}).pop(flag, None)
    out.mkdir()
    save_file(t, out / "model.safetensors")
    (out / "config.json").write_text(json.dumps(cfg))
    return out


# Two vLLM starts cover every flag vLLM 0.32 reads (the CI budget is ~1 minute per start). SHOWN: the flags whose
# removal changes bench's counters on that head, so vLLM's equal counters prove vLLM honours them; the others
# (norm_output acts only from the second draft position, which this pair never accepts; norm_before_residual) are
# proven loaded and run by vLLM here, and honoured by the runner checks of test_variants.py.
SHOWN = {"llama": ("fc_norm", "norm_before_fc"), "qwen3": ("qk_norm",)}
HEADS = {
    "llama: 4 aux + norm_before_fc (nested) + fc_norm + norm_output + 2 layers":
        {"aux4", "norm_before_fc", "eagle31", "two_layers"},
    "qwen3: q/k norm + use_aux_hidden_state false + norm_before_residual": {"qwen3", "no_aux", "norm_before_residual"},
}


@pytest.mark.parametrize("name", HEADS)
def test_vllm_runs_the_variant_as_bench_does(releases, tmp_path, name):  # noqa: F811
    head = make_variant(releases, tmp_path / "head", HEADS[name])
    out = tmp_path / "head-vllm"
    eagle_convert.convert(str(head), str(releases["target"]), out, to="vllm", dtype="float32")
    spec = eagle_convert.inspect(str(head), str(releases["target"])).to_dict()["flags"]
    assert spec["qk_norm"]["value"] is ("qwen3" in HEADS[name]) and spec["num_layers"]["value"] == (
        2 if "two_layers" in HEADS[name] else 1)
    ours = our_counters(releases["target"], head, releases["prompts"])
    for flag in SHOWN[name.split(":")[0]]:
        dropped = our_counters(releases["target"], without(head, tmp_path / f"no-{flag}", flag), releases["prompts"])
        assert [o["accepted"] for o in dropped] != [o["accepted"] for o in ours], flag
    assert_same(ours, vllm_counters(out, target=releases["target"], method="eagle3"))
