"""The bench runner on the families beyond the dense four, from checkpoints transformers saved: the MoE qwen3_moe and
mixtral (top-k routing) and the multimodal qwen2_5_vl, qwen3_vl, mistral3 run text-only through their language
model; logits equal transformers' in fp32 (atol as the dense families'), speculative greedy output equals plain
decoding; every other family is refused naming the engine bench."""

from __future__ import annotations

import pytest
import torch
from support.target_families import HEADS, INTER, KV, LEGACY, H, V, save_family

import eagle_convert
from eagle_convert.benchmark.prompts import Prompt
from eagle_convert.benchmark.session import load_target
from eagle_convert.errors import UnsupportedModelError
from eagle_convert.testing.tiny import TinyConfig, make_eagle3_head

pytest.importorskip("transformers")
SEQ = 12
TOL = dict(atol=2e-5, rtol=1e-5)  # as tests/runner/test_runner_transformers.py
MOE = dict(num_hidden_layers=4)  # (and for two multimodal cases: an EAGLE-3 head needs three distinct layers)

CASES = {  # name -> (family, original_format, config overrides)
    "qwen3_moe": ("qwen3_moe", True, MOE),
    "qwen3_moe-dense-layer-unnormalized": ("qwen3_moe", True, dict(MOE, mlp_only_layers=[1], norm_topk_prob=False)),
    "qwen3_moe-stacked-experts": ("qwen3_moe", False, MOE),
    "mixtral": ("mixtral", True, MOE),
    "mixtral-sliding-window": ("mixtral", True, dict(MOE, sliding_window=5)),
    "qwen2_5_vl-old": ("qwen2_5_vl", True, MOE),
    "qwen2_5_vl-new": ("qwen2_5_vl", False, {}),
    "qwen3_vl": ("qwen3_vl", True, {}),
    "mistral3-old": ("mistral3", True, {}),
    "mistral3-new": ("mistral3", False, MOE),
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("runner-targets")
    out = {}
    for name, (family, original, overrides) in CASES.items():
        model = save_family(family, root / name, original_format=original, **overrides)
        model.config._attn_implementation = "eager"
        if hasattr(model.config, "text_config"):
            model.config.text_config._attn_implementation = "eager"
        out[name] = (root / name, model)
    return out


@pytest.mark.parametrize("name", CASES)
def test_logits_match_transformers(name, saved):
    folder, model = saved[name]
    ids = torch.randint(0, V, (1, SEQ), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    ours = load_target(folder, dtype=torch.float32, device="cpu")
    torch.testing.assert_close(ours(ids, range(SEQ)).logits, expected, **TOL)
    # Through the static cache: a prefill, a 3-token verify chunk, then single tokens.
    pieces = [ours(ids[:, :5], range(5)), ours(ids[:, 5:8], range(5, 8))]
    pieces += [ours(ids[:, i:i + 1], range(i, i + 1)) for i in range(8, SEQ)]
    torch.testing.assert_close(torch.cat([p.logits for p in pieces], 1), expected, **TOL)


@pytest.mark.parametrize("name", ["qwen3_moe", "mixtral", "qwen2_5_vl-old", "mistral3-new"])
def test_speculative_greedy_output_equals_plain_decoding(name, saved, tmp_path):
    folder, _ = saved[name]
    cfg = TinyConfig(hidden_size=H, vocab_size=V, intermediate_size=INTER, num_attention_heads=HEADS,
                     num_key_value_heads=KV)
    make_eagle3_head(tmp_path / "draft", cfg, {}, draft_vocab=64, aux_layer_ids=[0, 1, 3])
    prompts = [Prompt("a", ("pre-tokenized",), token_ids=(5, 9, 17, 33, 2, 70)),
               Prompt("b", ("pre-tokenized",), token_ids=(100, 3, 3, 41))]
    report = eagle_convert.bench(str(folder), str(tmp_path / "draft"), k=3, max_new_tokens=16, prompts=prompts,
                                 device="cpu", dtype="float32", ignore_eos=True)
    assert report.to_dict()["lossless"] == {"mode": "exact", "identical": True, "diverged_prompts": []}
    assert report.to_dict()["overall"]["generated_tokens"] == 32
    assert report.to_dict()["settings"].get("text_only", False) == (CASES[name][0] in LEGACY + ("qwen3_vl",))


@pytest.mark.parametrize("family", ["gpt_oss", "deepseek_v3", "glm4_moe", "llama4", "gemma3"])
def test_other_families_are_refused_naming_the_engine_bench(family, tmp_path):
    tied = family == "gemma3"
    save_family(family, tmp_path / family, tied=tied)
    with pytest.raises(UnsupportedModelError) as exc:
        load_target(tmp_path / family, dtype=torch.float32, device="cpu")
    assert f"does not implement {family} targets" in str(exc.value)
    assert "bench --engine vllm" in str(exc.value)


def test_runner_architectures_are_the_runnable_target_families():
    """One list of what bench runs: the families table says which families run; the runner's per-architecture rows
    cover exactly those text families (and every multimodal one's language model), with the families' classes."""
    from eagle_convert.runner.architectures import ARCHITECTURES, SUPPORTED_ARCHITECTURES
    from eagle_convert.targets import FAMILIES

    runnable = [f for f in FAMILIES.values() if f.runner is not None]
    assert set(ARCHITECTURES) == {f.name for f in runnable if not f.multimodal}
    assert {f.runner_model_type for f in runnable if f.multimodal} <= set(ARCHITECTURES)
    assert SUPPORTED_ARCHITECTURES == {f.name: f.architectures for f in runnable if not f.multimodal}
    assert {name for name, row in ARCHITECTURES.items() if row.moe} == {f.name for f in runnable if f.runner == "moe"}


@pytest.mark.parametrize("layers", [10**30, 3, 0])
def test_a_layer_count_the_tensors_cannot_hold_is_refused_before_any_loop(tmp_path, layers):
    """num_hidden_layers 10**30 once overflowed (or, smaller, hung) the runner while it sized per-layer tables; the
    count is now bounded by the layers the checkpoint holds (2 here) before anything is built from it."""
    import json

    from eagle_convert.errors import MissingTensorError
    from eagle_convert.testing.tiny import make_target

    make_target(tmp_path / "t", TinyConfig())
    config = json.loads((tmp_path / "t" / "config.json").read_text())
    config["num_hidden_layers"] = layers
    (tmp_path / "t" / "config.json").write_text(json.dumps(config))
    with pytest.raises(MissingTensorError, match=rf"num_hidden_layers = {layers}, but its tensors hold 2 decoder"):
        load_target(tmp_path / "t", dtype=torch.float32, device="cpu")
    config["num_hidden_layers"] = 1  # fewer layers than held is a truncated target the runner can still run
    (tmp_path / "t" / "config.json").write_text(json.dumps(config))
    assert len(load_target(tmp_path / "t", dtype=torch.float32, device="cpu").layers) == 1
