"""The one RoPE table (rope/): its torch half covers every row, the checks and the runner take a type's defaults and
attention scale from the same row, and the config side stays torch-free."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from eagle_convert.rope.frequencies import INVERSE_FREQUENCIES
from eagle_convert.rope.schedule import engine_rope
from eagle_convert.rope.types import ROPE_TYPES
from eagle_convert.runner.model import rope_from_hf
from eagle_convert.runner.rotary_table import RotaryTable

YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}


def test_every_type_has_its_frequencies_and_nothing_else():
    assert list(INVERSE_FREQUENCIES) == list(ROPE_TYPES)


@pytest.mark.parametrize("stated", [{}, {"mscale": 0.707, "mscale_all_dim": 1.0}, {"attention_factor": 1.25}])
def test_the_checks_and_the_runner_scale_yarn_attention_alike(stated):
    config = {"max_position_embeddings": 256, "rope_theta": 10000.0, "rope_scaling": {**YARN, **stated}}
    theta, scaling = rope_from_hf(config)
    runner = RotaryTable(8, theta, scaling, dtype=torch.float32, device="cpu").attention_scaling
    checks = engine_rope(config).params["attention_factor"]
    assert runner == checks
    assert runner != 1.0  # negative control: a factor of 4 scales attention in every case here


def test_longrope_scale_follows_its_factor_and_original_context():
    row = ROPE_TYPES["longrope"]
    assert row.attention_scaling({"factor": 1.0, "original_max_position_embeddings": 4096}) == 1.0
    assert row.attention_scaling({"factor": 32.0, "original_max_position_embeddings": 4096}) == pytest.approx(
        (1 + 3.4657359 / 8.3177662) ** 0.5)
    assert ROPE_TYPES["linear"].attention_scaling({"factor": 4.0, "attention_factor": 9.0}) == 1.0


def test_what_the_runner_needs_of_each_type():
    assert {name: row.needs for name, row in ROPE_TYPES.items()} == {
        "default": (), "linear": ("factor",), "dynamic": ("factor", "max_position_embeddings"),
        "llama3": ("factor", "low_freq_factor", "high_freq_factor"),
        "yarn": ("factor", "original_max_position_embeddings"),
        "longrope": ("short_factor", "long_factor", "factor", "original_max_position_embeddings")}


def test_reading_a_schedule_from_a_config_loads_no_torch():
    code = ("import sys; from eagle_convert.rope.schedule import engine_rope; "
            "from eagle_convert.positions.checks import check_positions; "
            "engine_rope({'rope_scaling': {'rope_type': 'yarn', 'factor': 4.0}}); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
