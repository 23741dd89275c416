"""Multimodal wrappers: the language model sits under a prefix, its sizes and tie flag in `text_config`.

transformers renamed these prefixes in 2025; its `conversion_mapping.py` (5.24) renames old checkpoints on load, and
`save_pretrained` (default `save_original_format=True`) writes the old names back, so both namings are on the Hub:
- llava-style (gemma3, mistral3; `_MODEL_TO_CONVERSION_PATTERN` maps them to "llava"): `language_model.model.*` and
  `language_model.lm_head.weight` before, `model.language_model.*` and `lm_head.weight` after;
- Qwen2-VL-style ("Qwen2VLForConditionalGeneration", also Qwen2.5-VL): `model.*` before, `model.language_model.*`
  after, the LM head `lm_head.weight` in both;
- llama4 has one naming (`language_model.model.*`, `language_model.lm_head.weight`); qwen3_vl was born renamed.
Text-only model_types (gemma3_text, llama4_text) are the CausalLM of the same family.
"""

from .family import CAUSAL_LM, RUNNER_DENSE, Naming, TargetFamily

NEW = Naming("transformers >= 4.52 (model.language_model.*)", "model.language_model.", "lm_head.weight")
LLAVA_OLD = Naming("before 2025 (language_model.model.*)", "language_model.model.", "language_model.lm_head.weight")
QWEN_VL_OLD = Naming("before 2025 (model.*)", "model.", "lm_head.weight")

FAMILIES = (
    TargetFamily("llama4", ("llama4", "llama4_text"), ("Llama4ForConditionalGeneration", "Llama4ForCausalLM"),
                 (LLAVA_OLD, CAUSAL_LM), text_config="text_config", rope="llama3, chunked (iRoPE)", multimodal=True,
                 note="MoE text model with chunked attention"),
    TargetFamily("qwen2_5_vl", ("qwen2_5_vl",), ("Qwen2_5_VLForConditionalGeneration",), (NEW, QWEN_VL_OLD),
                 text_config="text_config", rope="mrope (text: plain RoPE)", runner=RUNNER_DENSE,
                 runner_model_type="qwen2", multimodal=True),
    TargetFamily("qwen3_vl", ("qwen3_vl",), ("Qwen3VLForConditionalGeneration",), (NEW,), text_config="text_config",
                 rope="interleaved mrope (text: plain RoPE)", runner=RUNNER_DENSE,
                 runner_model_type="qwen3", multimodal=True),
    TargetFamily("mistral3", ("mistral3",), ("Mistral3ForConditionalGeneration",), (NEW, LLAVA_OLD),
                 text_config="text_config", rope="default", runner=RUNNER_DENSE,
                 runner_model_type="mistral", multimodal=True),
    TargetFamily("gemma3", ("gemma3", "gemma3_text"), ("Gemma3ForConditionalGeneration", "Gemma3ForCausalLM"),
                 (NEW, LLAVA_OLD, CAUSAL_LM), text_config="text_config", rope="dual (local / global theta)",
                 multimodal=True, note="scaled embedding, sliding-window layers, soft-capped logits"),
)
