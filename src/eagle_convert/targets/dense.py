"""Dense decoder-only families: every name as transformers 5.24 saves it (tests/support/target_families.py builds
each one)."""

from .family import CAUSAL_LM, RUNNER_DENSE, TargetFamily

FAMILIES = (
    TargetFamily("llama", ("llama",), ("LlamaForCausalLM",), (CAUSAL_LM,), rope="default / llama3",
                 runner=RUNNER_DENSE),
    TargetFamily("mistral", ("mistral",), ("MistralForCausalLM",), (CAUSAL_LM,), rope="default",
                 runner=RUNNER_DENSE),
    TargetFamily("qwen2", ("qwen2",), ("Qwen2ForCausalLM", "MiMoForCausalLM"), (CAUSAL_LM,), rope="default",
                 runner=RUNNER_DENSE),
    TargetFamily("qwen3", ("qwen3",), ("Qwen3ForCausalLM",), (CAUSAL_LM,), rope="default", runner=RUNNER_DENSE),
)
