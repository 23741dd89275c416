"""What the runner does differently per text architecture, as data: one row per model_type it implements.

Which families the runner runs is the target families' table (targets/: `runner` set; a multimodal wrapper runs its
language model's row, text-only). The architecture classes each row accepts come from that table too, so a new family
for `bench` is its row in targets/ plus its row here; tests/runner/test_runner_targets.py holds the two tables
together."""

from __future__ import annotations

from dataclasses import dataclass

from ..targets import FAMILIES

ALWAYS, FROM_CONFIG, NEVER = "always", "attention_bias", "never"


@dataclass(frozen=True)
class Architecture:
    model_type: str
    qkv_bias: str = NEVER  # ALWAYS (qwen2's fixed q/k/v biases), FROM_CONFIG (the config's attention_bias), NEVER
    o_bias: bool = False  # attention_bias also biases o_proj (llama, qwen3; not qwen2's fixed biases)
    mlp_bias: bool = False  # the config's mlp_bias is honoured (llama)
    qk_norm: bool = False  # qwen3: RMS norm per head on q and k, before RoPE
    moe: bool = False  # experts in (some) layers: runner/moe_mlp.py
    # How the config's sliding_window applies: "every_layer" (HF applies it on every layer, ignoring layer_types),
    # "uniform" (every layer, when use_sliding_window), "layer_types" (per layer_types / max_window_layers, when
    # use_sliding_window), None (full attention)
    sliding: str | None = None


ARCHITECTURES: dict[str, Architecture] = {a.model_type: a for a in (
    Architecture("llama", qkv_bias=FROM_CONFIG, o_bias=True, mlp_bias=True),
    Architecture("mistral", sliding="every_layer"),
    Architecture("qwen2", qkv_bias=ALWAYS, sliding="layer_types"),
    Architecture("qwen3", qkv_bias=FROM_CONFIG, o_bias=True, qk_norm=True, sliding="layer_types"),
    Architecture("qwen3_moe", qkv_bias=FROM_CONFIG, o_bias=True, qk_norm=True, moe=True, sliding="uniform"),
    Architecture("mixtral", moe=True, sliding="every_layer"),
)}

# model_type -> the HF architecture class names a text checkpoint of it may name (from the target families).
SUPPORTED_ARCHITECTURES: dict[str, tuple[str, ...]] = {
    f.name: f.architectures for f in FAMILIES.values() if f.runner is not None and not f.multimodal}


def runner_families_line() -> str:
    """Every family the runner runs, for messages: the text ones, then the multimodal ones (text-only)."""
    text = [f.name for f in FAMILIES.values() if f.runner is not None and not f.multimodal]
    multimodal = [f.name for f in FAMILIES.values() if f.runner is not None and f.multimodal]
    return f"{', '.join(text)}, and {', '.join(multimodal)} text-only"


def supported_targets_line() -> str:
    """The families with their architecture classes, for the runner's refusal."""
    names = ", ".join(f"{t} ({'/'.join(a)})" for t, a in SUPPORTED_ARCHITECTURES.items())
    multimodal = [f.name for f in FAMILIES.values() if f.runner is not None and f.multimodal]
    return f"{names} (and the multimodal {', '.join(multimodal)}, text-only)"
