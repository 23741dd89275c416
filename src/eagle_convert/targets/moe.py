"""Mixture-of-experts families. Their LM head and embedding sit where a dense CausalLM's do; the runner implements the
two with plain top-k softmax routing (qwen3_moe, mixtral)."""

from .family import CAUSAL_LM, RUNNER_MOE, TargetFamily

FAMILIES = (
    TargetFamily("qwen3_moe", ("qwen3_moe",), ("Qwen3MoeForCausalLM",), (CAUSAL_LM,), rope="default",
                 runner=RUNNER_MOE),
    TargetFamily("mixtral", ("mixtral",), ("MixtralForCausalLM",), (CAUSAL_LM,), rope="default", runner=RUNNER_MOE),
    TargetFamily("gpt_oss", ("gpt_oss",), ("GptOssForCausalLM",), (CAUSAL_LM,), rope="yarn",
                 note="attention sinks, alternating sliding window; released with MXFP4 experts"),
    TargetFamily("deepseek_v3", ("deepseek_v3",), ("DeepseekV3ForCausalLM",), (CAUSAL_LM,), rope="yarn",
                 note="MLA attention, grouped routing; released in block FP8"),
    TargetFamily("glm4_moe", ("glm4_moe",), ("Glm4MoeForCausalLM",), (CAUSAL_LM,), rope="partial (half the head)",
                 note="grouped sigmoid routing with shared experts"),
)
