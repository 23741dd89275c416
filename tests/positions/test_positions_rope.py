"""The RoPE table (rope/) and the pure checks (positions/checks.py) on configs alone: schedules compared
as engines compute them (aliases, defaults filled), the findings that need no checkpoint, and what an output config
states."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from eagle_convert.errors import RopeMismatchError
from eagle_convert.positions.checks import PositionOptions, check_positions, refuse_rope_errors

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}


def config(**keys) -> dict:
    return {"rope_theta": 500000.0, "max_position_embeddings": 4096, **keys}


def names(draft: dict, target: dict | None, **options) -> dict[str, str]:
    report = check_positions(draft, target, PositionOptions(**options))
    return {f.name: f.severity for f in report.findings}


def test_legacy_type_key_and_aliases_read_as_the_same_schedule():
    legacy = {**{k: v for k, v in LLAMA3.items() if k != "rope_type"}, "type": "llama3"}
    assert names(config(rope_scaling=legacy), config(rope_scaling=LLAMA3)) == {}
    su = {"type": "su", "short_factor": [1.0], "long_factor": [2.0], "original_max_position_embeddings": 4096}
    longrope = {**su, "rope_type": "longrope"}
    del longrope["type"]
    assert names(config(rope_scaling=su), config(rope_scaling=longrope)) == {}


def test_yarn_defaults_are_filled_as_transformers_fills_them():
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}
    explicit = {**yarn, "attention_factor": 0.1 * math.log(4.0) + 1.0, "beta_fast": 32, "beta_slow": 1}
    assert names(config(rope_scaling=explicit), config(rope_scaling=yarn)) == {}
    found = check_positions(config(rope_scaling={**yarn, "mscale": 1.0, "mscale_all_dim": 0.5}),
                            config(rope_scaling=yarn)).findings
    assert [f.name for f in found] == ["rope_scaling_mismatch"] and "attention_factor" in found[0].message


def test_a_type_conflict_and_disagreeing_keys_are_errors():
    conflict = {**LLAMA3, "type": "linear"}
    assert names(config(rope_scaling=conflict), config(rope_scaling=LLAMA3))["rope_type_conflict"] == "error"
    both = config(rope_scaling=LLAMA3, rope_parameters={**LLAMA3, "factor": 4.0, "rope_theta": 500000.0})
    assert names(both, config(rope_scaling=LLAMA3)) == {"rope_forms_disagree": "error"}
    agree = config(rope_scaling=LLAMA3, rope_parameters={**LLAMA3, "rope_theta": 500000.0})
    assert names(agree, config(rope_scaling=LLAMA3)) == {}


def test_a_scaled_draft_for_a_plain_target_is_an_error_and_the_escape_turns_it_into_a_warning():
    draft, target = config(rope_scaling=LLAMA3), config()
    assert names(draft, target) == {"rope_scaling_added": "error"}
    report = check_positions(draft, target)
    with pytest.raises(RopeMismatchError) as caught:
        refuse_rope_errors(report)
    assert "[rope_scaling_added]" in caught.value.message and "--allow-rope-mismatch" in caught.value.hint
    allowed = check_positions(draft, target, PositionOptions(allow_rope_mismatch=True))
    assert [(f.name, f.severity) for f in allowed.findings] == [("rope_scaling_added", "warning")]
    refuse_rope_errors(allowed)  # nothing raised


def test_without_a_target_only_the_drafts_own_findings_are_made():
    draft = config(rope_theta=10000.0, rope_scaling=LLAMA3)
    assert names(draft, None) == {}
    assert names(draft, None, max_model_len=8192) == {"draft_limit_below_max_model_len": "warning",
                                                      "short_training_context": "warning"}


def test_linear_limits_are_scaled_as_engines_derive_them():
    linear = {"rope_type": "linear", "factor": 4.0}
    draft = config(rope_scaling=linear, max_position_embeddings=2048)
    report = check_positions(draft, config(rope_scaling=linear, max_position_embeddings=2048), PositionOptions(8192))
    assert report.draft["engine_limit"] == 8192 and report.findings == []
    assert names(draft, None, max_model_len=8193) == {"draft_limit_below_max_model_len": "warning",
                                                      "short_training_context": "warning"}


def test_dynamic_scaling_follows_the_limit_so_different_limits_are_a_mismatch():
    dynamic = {"rope_type": "dynamic", "factor": 2.0}
    found = names(config(rope_scaling=dynamic, max_position_embeddings=2048), config(rope_scaling=dynamic))
    assert found["rope_scaling_mismatch"] == "error"


def test_the_output_keeps_a_dynamic_drafts_limit_and_raises_a_plain_one():
    from eagle_convert.kinds import EAGLE3
    from eagle_convert.layouts.base import OutputContext, output_limit
    from eagle_convert.spec import DraftSpec

    ctx = OutputContext(target_label="t", target_config={"max_position_embeddings": 131072}, out_label="o",
                        dtype_name="bfloat16")
    plain = DraftSpec(kind=EAGLE3, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                      intermediate_size=128, rms_norm_eps=1e-6, rope_theta=10000.0, vocab_size=256,
                      max_position_embeddings=2048)
    assert output_limit(plain, ctx) == 131072
    dynamic = replace(plain, rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    assert output_limit(dynamic, ctx) == 2048
