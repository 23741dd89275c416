"""The EAGLE-3 variant table of docs/layouts.md: each variant against each EAGLE-3 output layout, written or refused
(asked of the layouts themselves, so the table cannot drift from what convert does), and how that cell was checked."""

from __future__ import annotations

import dataclasses

from ..kinds import EAGLE3, EAGLE3_BASE_NAMES
from ..spec import DraftSpec
from .registry import LAYOUTS, output_layouts_for

_BASE = DraftSpec(kind=EAGLE3, hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                  intermediate_size=14336, rms_norm_eps=1e-5, rope_theta=500000.0, vocab_size=128256,
                  max_position_embeddings=131072, draft_vocab_size=32000, target_hidden_size=4096,
                  aux_layer_ids=(2, 16, 29))

# (variant, spec changes, {layout: how the cell is checked}); R = tests/conversion/test_variants.py (runner against a
# plain-torch implementation of the variant, round trip with identical draft outputs, every flag in the written config);
# V = tests/engines/test_vllm_variants.py / test_vllm.py (real vLLM 0.32: counters and tokens equal bench's);
# S = tests/engines/test_sglang.py (real SGLang 0.5.23 loader: every parameter equals its tensor, SGLang's view of the
# variant equals the head's); refusals: test_variants.py (one paragraph, exit 1, nothing written). V*: vLLM loads and
# runs it with bench's counters, but that pair's counters do not change when the flag is dropped (bench shows the same
# numbers without it), so only R shows the flag is honoured. L = tests/engines/test_gguf_llamacpp.py (real llama.cpp
# b11434: the file's keys and tensors equal llama.cpp's own converter's, accepted tokens equal per prompt, lossless);
# O = tests/conversion/test_gguf_layout.py (every key and tensor written, read back with an independent parser).
# P = tests/conversion/test_openvino_layout.py (the plan: names, rt_info; refusals by name); G =
# tests/engines/test_bench_openvino.py (real OpenVINO GenAI 2026.4.1: counters equal bench's per prompt, lossless).
VARIANTS = [
    ("EAGLE-3 (SafeAILab / SpecForge)", {}, {"vllm": "R V", "speculators": "R V", "sglang": "R S", "gguf": "O L",
                                           "openvino": "P G"}),
    ("norm_before_fc (`input_norm.weight`)", {"norm_before_fc": True},
     {"vllm": "R V", "speculators": "R", "sglang": "R S", "openvino": "P"}),
    ("EAGLE 3.1: `fc_norm.{i}` + norm_output", {"fc_norm": True, "norm_output": True},
     {"vllm": "R V, norm_output V*", "speculators": "R", "sglang": "R S", "gguf": "O", "openvino": "P"}),
    # SpecForge's norm_output (logits through norm, pre-norm state fed back) is the engines' false: read so
    # (formats/eagle3.py specforge_norm_output), so the head written is the plain-fed-back one; its false is refused.
    ("SpecForge EAGLE 3.1: `fc_norm.{i}`, `norm_output: true` in SpecForge's meaning (written false)",
     {"fc_norm": True}, {"vllm": "R", "speculators": "R", "sglang": "R", "gguf": "O", "openvino": "P"}),
    ("4 aux states (gpt-oss heads)", {"num_aux_states": 4, "aux_layer_ids": (2, 10, 18, 29)},
     {"vllm": "R V", "speculators": "R", "sglang": "R S", "gguf": "O", "openvino": "P"}),
    ("use_aux_hidden_state: false (no fc)", {"num_aux_states": 0, "aux_layer_ids": ()},
     {"vllm": "R V", "speculators": "R", "sglang": "R S", "gguf": "O", "openvino": "P"}),
    ("norm_before_residual: true", {"norm_before_residual": True},
     {"vllm": "R V*", "speculators": "R", "sglang": "R", "openvino": "P"}),
    ("target_hidden_size != hidden_size", {"target_hidden_size": 5120},
     {"vllm": "R", "speculators": "R", "sglang": "R S"}),
    ("2 decoder layers", {"num_layers": 2},
     {"vllm": "R V", "speculators": "R", "sglang": "R S", "gguf": "O", "openvino": "P"}),
    ("Qwen3 draft (q_norm / k_norm)", {"qk_norm": True, "base_model_type": "qwen3"},
     {"vllm": "R V", "speculators": "R", "sglang": "R", "gguf": "O", "openvino": "P"}),
    ("draft_vocab_size: null, no lm_head", {"lm_head_from_target": True, "draft_vocab_size": 128256},
     {"vllm": "R", "speculators": "R", "sglang": "R S"}),
    ("fc bias (`fc.bias`, config `bias`)", {"fc_bias": True},
     {"vllm": "R", "speculators": "R", "sglang": "R", "gguf": "O", "openvino": "P"}),
]


def variant_markdown_table() -> str:
    outputs = output_layouts_for(EAGLE3)  # the columns: every layout that writes EAGLE-3 heads
    rows = ["| variant | " + " | ".join(f"`--to {o}`" for o in outputs) + " |",
            "|---|" + "---|" * len(outputs)]
    for name, changes, checks in VARIANTS:
        spec = dataclasses.replace(_BASE, **changes)
        cells = []
        for out in outputs:
            refusal = LAYOUTS[out].refusal(spec, EAGLE3_BASE_NAMES)
            checked = checks.get(out, "not checked")  # a new layout's cells say so until a test covers them
            cells.append(f"refused: {refusal.split(';')[0]} ({checked})" if refusal else f"written ({checked})")
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)
