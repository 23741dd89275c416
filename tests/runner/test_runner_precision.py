"""CUDA readiness that a CPU can check: fp32 on CUDA pins TF32 off and refuses the cuBLAS override; the bench report
records the environment; the bench allocates every cache before its clock starts."""

from __future__ import annotations

import pytest
import torch
from support.golden_sets import GOLDEN
from support.runner_fixtures import read_golden_draft, strict_getter

from eagle_convert.benchmark.prompts import Prompt
from eagle_convert.benchmark.session import run_bench
from eagle_convert.engines import our_runner as ours_engine
from eagle_convert.errors import UnsupportedModelError
from eagle_convert.runner.layers import KVCache
from eagle_convert.runner.precision import TF32_OVERRIDE, pin_exact_fp32, runtime_environment

CUDA = torch.device("cuda")


@pytest.fixture
def tf32_flags():
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.get_float32_matmul_precision())
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[:2]
    torch.set_float32_matmul_precision(saved[2])


def test_fp32_on_cuda_pins_tf32_off(tf32_flags, monkeypatch):
    monkeypatch.delenv(TF32_OVERRIDE, raising=False)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True  # as a library might leave them
    pin_exact_fp32(torch.device("cpu"), torch.float32)  # CPU: nothing to pin
    pin_exact_fp32(CUDA, torch.bfloat16)  # bf16: TF32 is not the question
    assert torch.backends.cuda.matmul.allow_tf32
    pin_exact_fp32(CUDA, torch.float32)
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    assert torch.get_float32_matmul_precision() == "highest"


def test_the_cublas_tf32_override_is_refused_for_fp32(tf32_flags, monkeypatch):
    monkeypatch.setenv(TF32_OVERRIDE, "1")
    with pytest.raises(UnsupportedModelError) as info:
        pin_exact_fp32(CUDA, torch.float32)
    assert TF32_OVERRIDE in str(info.value) and "bfloat16" in info.value.hint
    pin_exact_fp32(CUDA, torch.bfloat16)  # bf16 runs under it


def test_kv_cache_reserve_allocates_once():
    cache = KVCache(2, 4, torch.float32, "cpu")
    cache.reserve(1000)
    assert cache.capacity == 1000
    cache.reserve(10)
    assert cache.capacity == 1000


def test_bench_report_records_the_environment_and_caches_are_allocated_before_the_clock(monkeypatch):
    grown_while_timed = []
    real_grow, real_timed = KVCache._grow, ours_engine.timed
    clock = {"running": False}

    def timed(device, fn):
        clock["running"] = True
        try:
            return real_timed(device, fn)
        finally:
            clock["running"] = False

    def grow(self, capacity):
        grown_while_timed.append(clock["running"])
        return real_grow(self, capacity)

    monkeypatch.setattr(ours_engine, "timed", timed)
    monkeypatch.setattr(KVCache, "_grow", grow)
    spec, tensors = read_golden_draft(GOLDEN / "eagle1-llama3" / "draft")
    # the warm-up runs the first prompt only; the second passes the caches' first 256 slots
    prompts = [Prompt("short", ("t1 t2",)), Prompt("long", (" ".join(f"t{i % 50}" for i in range(300)),))]
    report = run_bench(GOLDEN / "eagle1-llama3" / "target", spec, strict_getter(tensors), k=3, max_new_tokens=8,
                       prompts=prompts, progress=False, device="cpu")
    assert grown_while_timed and not any(grown_while_timed)
    environment = report.to_dict()["environment"]
    assert environment == runtime_environment("cpu") | {"threads": environment["threads"]}
    assert environment["torch"] == torch.__version__ and environment["device"] == "cpu"
