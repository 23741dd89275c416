"""RoPE scaling in `convert --to gguf` without llama.cpp (layouts/gguf_rope.py, rope/ggml_factors.py): a llama3 head
gets llama.cpp's `rope_freqs.weight` divisors, which give transformers' llama3 frequencies (rope/frequencies.py);
linear and YaRN get the converter's `eagle3.rope.scaling.*` keys; what llama.cpp would run otherwise is refused by
name, with nothing written. Bit-equality with llama.cpp's own converter, and llama.cpp's acceptance, are
tests/engines/test_gguf_llamacpp.py (marker llamacpp)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from support.convert import assert_nothing_left, flat, run_cli
from support.engine_pair import HEADS, HIDDEN
from support.rope_pair import LLAMA3, build_llama3_pair, with_rope_scaling

import eagle_convert
from eagle_convert.io.gguf_file import read_gguf
from eagle_convert.layouts import LAYOUTS
from eagle_convert.layouts.gguf_rope import rope_scaling_keys
from eagle_convert.layouts.variant_table import _BASE
from eagle_convert.positions.checks import check_positions
from eagle_convert.rope.frequencies import INVERSE_FREQUENCIES
from eagle_convert.rope.ggml_factors import llama3_rope_factors

HEAD_DIM = HIDDEN // HEADS
LLAMA31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_max_position_embeddings": 8192}  # Llama-3.1's own config


@pytest.fixture(scope="module")
def llama3(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf-rope")
    paths = build_llama3_pair(root)
    result = eagle_convert.convert(str(paths["eagle3"]), str(paths["target"]), root / "out", to="gguf",
                                   dtype="bfloat16")
    return paths, read_gguf(root / "out" / "eagle3.gguf"), result


def frequencies(kind: str, head_dim: int, theta: float, params: dict) -> torch.Tensor:
    return INVERSE_FREQUENCIES[kind](head_dim, theta, params, None)


def test_a_llama3_head_gets_the_rope_freqs_tensor_and_no_scaling_key(llama3):
    _, gguf, result = llama3
    dtype, shape, _ = gguf.tensors["rope_freqs.weight"]
    assert dtype == torch.float32 and shape == (HEAD_DIM // 2,)  # F32 whatever --dtype, as llama.cpp's converter
    assert not [k for k in gguf.metadata if k.startswith("eagle3.rope.scaling")]  # llama.cpp reads llama3 from it
    assert gguf.metadata["eagle3.rope.freq_base"] == 10000.0
    how = result.provenance["tensors"]["rope_freqs.weight"]["how"]
    assert "llama3 RoPE divisors" in how and "factor 8" in how and "original_max_position_embeddings 32" in how


def test_its_divisors_give_transformers_llama3_frequencies(llama3):
    divisors = llama3[1].tensor("rope_freqs.weight")
    base, scaled = (frequencies(kind, HEAD_DIM, 10000.0, LLAMA3) for kind in ("default", "llama3"))
    assert torch.allclose(base / divisors, scaled, rtol=2e-7, atol=0)
    assert divisors.min() == 1 and divisors.max() == 8 and ((divisors > 1) & (divisors < 8)).any()  # all three kinds
    wrong = llama3_rope_factors(HEAD_DIM, 10000.0, LLAMA3 | {"factor": 4.0})  # negative control: a wrong factor
    assert not torch.allclose(base / wrong, scaled, rtol=1e-3, atol=0)


@pytest.mark.parametrize("head_dim, theta, params", [
    (128, 500000.0, LLAMA31), (64, 500000.0, LLAMA31 | {"factor": 32.0}),
    (80, 1e6, LLAMA31 | {"low_freq_factor": 2.0, "original_max_position_embeddings": 4096})])
def test_the_divisors_match_rope_frequencies_for_real_llama3_configs(head_dim, theta, params):
    base, scaled = (frequencies(kind, head_dim, theta, params) for kind in ("default", "llama3"))
    divisors = llama3_rope_factors(head_dim, theta, params)
    assert divisors.dtype == torch.float32 and divisors.shape == (head_dim // 2,)
    assert torch.allclose(base / divisors, scaled, rtol=2e-7, atol=0)


def test_a_missing_original_context_is_the_heads_own_limit_not_the_raised_one_nor_8192():
    """transformers (and vLLM) default original_max_position_embeddings to max_position_embeddings; llama.cpp's
    converter to 8192. The head was trained with the former, and convert raises the written limit: the source's."""
    scaling = {k: v for k, v in LLAMA31.items() if k != "original_max_position_embeddings"}
    spec = dataclasses.replace(_BASE, max_position_embeddings=4096, rope_scaling=scaling)
    rewrite = LAYOUTS["gguf"].rewrites(spec)["rope_freqs.weight"]
    assert "original_max_position_embeddings 4096" in rewrite.how
    assert torch.equal(rewrite.apply(None), llama3_rope_factors(128, 500000.0, LLAMA31 | {
        "original_max_position_embeddings": 4096}))
    assert not torch.equal(rewrite.apply(None), llama3_rope_factors(128, 500000.0, LLAMA31))  # 8192 differs


def test_the_output_check_reads_the_schedule_back(llama3):
    paths, _, result = llama3
    import json
    target = json.loads((paths["target"] / "config.json").read_text())
    assert not [f for f in result.positions["output_findings"] if f["name"].startswith("rope")]
    gguf = LAYOUTS["gguf"]
    assert gguf.flat_config(result.plan.config)["rope_scaling"]["factor"] == 8.0
    # negative control: the metadata alone (no key states llama3) reads as plain RoPE against a llama3 target
    plain = check_positions(gguf.flat_config(dict(result.plan.config)), target)
    assert "rope_scaling_dropped" in plain.names()


@pytest.mark.parametrize("scaling, keys", [
    ({"rope_type": "linear", "factor": 4.0}, {"type": ["STRING", "linear"], "factor": ["FLOAT32", 4.0]}),
    ({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096},
     {"type": ["STRING", "yarn"], "factor": ["FLOAT32", 4.0], "original_context_length": ["UINT32", 4096]}),
    ({"rope_type": "yarn", "factor": 2.0, "beta_fast": 32.0, "beta_slow": 1.0},  # stated: written, as llama.cpp's
     {"type": ["STRING", "yarn"], "factor": ["FLOAT32", 2.0], "original_context_length": ["UINT32", 131072],
      "yarn_beta_fast": ["FLOAT32", 32.0], "yarn_beta_slow": ["FLOAT32", 1.0]}),
    (LLAMA31, {}),  # a tensor, no key
])
def test_linear_and_yarn_get_llamacpps_scaling_keys(scaling, keys):
    spec = dataclasses.replace(_BASE, rope_scaling=scaling)
    assert LAYOUTS["gguf"].refusal(spec, frozenset()) is None
    assert rope_scaling_keys(spec, "eagle3") == {f"eagle3.rope.scaling.{k}": v for k, v in keys.items()}
    assert ("rope_freqs.weight" in LAYOUTS["gguf"].derived_tensors(spec, frozenset())) == (scaling is LLAMA31)


REFUSED = [
    ({"rope_type": "dynamic", "factor": 2.0}, "dynamic NTK"),
    ({"rope_type": "longrope", "short_factor": [1.0] * 64, "long_factor": [2.0] * 64}, "LongRoPE"),
    ({"rope_type": "yarn", "factor": 4.0, "beta_fast": 16}, "beta_fast 16"),
    ({"rope_type": "yarn", "factor": 4.0, "attention_factor": 2.0}, "attention_factor 2"),
    ({"rope_type": "yarn", "factor": 4.0, "mscale": 1.0, "mscale_all_dim": 0.5}, "attention_factor 1.0"),
    ({"rope_type": "yarn", "factor": 4.0, "truncate": False}, "truncate False"),
    ({"rope_type": "yarn"}, "lacks factor"),
    ({"rope_type": "llama3", "factor": 8.0}, "lacks low_freq_factor, high_freq_factor"),
    (LLAMA31 | {"partial_rotary_factor": 0.5}, "partial_rotary_factor 0.5"),
    ({"rope_type": "nope", "factor": 2.0}, "no RoPE type 'nope'"),
    ({"rope_type": "linear", "factor": 0.0}, "factor 0.0, where a positive float32 goes"),  # a divisor of 0
    ({"rope_type": "linear", "factor": 1e39}, "where a positive float32 goes"),  # no FLOAT32 key holds it
    ({"rope_type": "yarn", "factor": 4.0, "extrapolation_factor": "x"}, "extrapolation_factor 'x'"),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2 ** 40}, "not a positive 32-bit"),
]


@pytest.mark.parametrize("scaling, message", REFUSED)
def test_what_llamacpp_would_run_otherwise_is_refused_by_name(scaling, message):
    why = LAYOUTS["gguf"].refusal(dataclasses.replace(_BASE, rope_scaling=scaling), frozenset())
    assert why is not None and message in why, why


def test_a_rope_refusal_is_one_paragraph_exit_1_nothing_written(llama3, tmp_path):
    paths = build_llama3_pair(tmp_path / "pair")
    for role in ("eagle3", "target"):  # the same schedule on both sides: the position checks pass, gguf refuses
        with_rope_scaling(paths[role], {"rope_type": "dynamic", "factor": 2.0})
    out = tmp_path / "out"
    result = run_cli("convert", paths["eagle3"], "-t", paths["target"], "-o", out, "--to", "gguf")
    assert result.returncode == 1 and result.stderr.startswith("error: ") and "\n\n" not in result.stderr.strip()
    assert "dynamic NTK" in flat(result.stderr) and "Traceback" not in result.stderr
    assert_nothing_left(out)
