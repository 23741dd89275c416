"""RoPE in a llama.cpp GGUF (layouts/gguf.py): the head's own schedule (the one vLLM and our runner compute from its
config; never the target's, which llama.cpp's converter does not read for a draft either), written as llama.cpp
b11434's converter writes it (conversion/llama.py generate_extra_tensors, conversion/base.py set_gguf_parameters):
llama3 as the `rope_freqs.weight` tensor (rope/ggml_factors.py) and no scaling key; linear as
`{arch}.rope.scaling.type` and `.factor`; YaRN as those and `.original_context_length`, plus the `yarn_*` keys the
config states. What llama.cpp would run otherwise is refused by name (`rope_refusal`): dynamic NTK (its converter
writes nothing), LongRoPE (no factor tensors for the draft), YaRN parameters its loader does not read, a partial
rotary factor, and a scaling that lacks a parameter transformers requires (llama.cpp's converter fills its own)."""

from __future__ import annotations

from ..rope.schedule import Rope, engine_rope
from ..rope.types import ROPE_TYPES, yarn_attention_factor
from ..spec import DraftSpec
from .base import Rewrite

FLOAT32_MAX = 3.4028234663852886e38  # a FLOAT32 key holds no more
ROPE_FREQS = "rope_freqs.weight"  # gguf-py MODEL_TENSOR.ROPE_FREQS; eagle3.cpp loads it when present
# HF YaRN parameter -> the key suffix llama.cpp's converter writes it to when the config states it
YARN_KEYS = {"extrapolation_factor": "yarn_ext_factor", "attention_factor": "yarn_attn_factor",
             "beta_fast": "yarn_beta_fast", "beta_slow": "yarn_beta_slow"}


class GgufMetadata(dict):
    """The metadata (key -> [GGUF type name, value]) and the HF `rope_scaling` it stands for, which the output
    checks read back (`flat_config`): llama3 scaling lives in a tensor, with no key to read it from."""

    def __init__(self, metadata: dict, rope_scaling: dict | None):
        super().__init__(metadata)
        self.rope_scaling = rope_scaling


def head_rope(spec: DraftSpec) -> Rope:
    """The head's own schedule as vLLM and our runner compute it (transformers' defaults filled from the head's own
    position limit, not the raised one the file states)."""
    return engine_rope({"rope_theta": spec.rope_theta, "rope_scaling": spec.rope_scaling,
                        "max_position_embeddings": spec.max_position_embeddings})


def written_scaling(spec: DraftSpec) -> dict | None:
    rope = head_rope(spec)
    if not rope.scaled:
        return None
    return {"rope_type": rope.type, **{k: v for k, v in rope.params.items() if v is not None}}


def rope_scaling_keys(spec: DraftSpec, arch: str) -> dict:
    """The `{arch}.rope.scaling.*` keys llama.cpp's converter writes for this schedule (llama3: none, its tensor)."""
    rope = head_rope(spec)
    params = dict(spec.rope_scaling or {})  # the YaRN keys it writes are those the config states
    if rope.type == "linear":
        return {f"{arch}.rope.scaling.type": ["STRING", "linear"],
                f"{arch}.rope.scaling.factor": ["FLOAT32", rope.params["factor"]]}
    if rope.type != "yarn":
        return {}
    stated = {key: params.get(name, params.get("attn_factor") if name == "attention_factor" else None)
              for name, key in YARN_KEYS.items()}
    return {f"{arch}.rope.scaling.type": ["STRING", "yarn"],
            f"{arch}.rope.scaling.factor": ["FLOAT32", rope.params["factor"]],
            f"{arch}.rope.scaling.original_context_length": ["UINT32", rope.params["original_max_position_embeddings"]],
            **{f"{arch}.rope.scaling.{key}": ["FLOAT32", value] for key, value in stated.items() if value is not None}}


def llama3_rewrite(spec: DraftSpec) -> Rewrite:
    rope = head_rope(spec)
    shown = ", ".join(f"{k} {rope.params[k]:g}" for k in ("factor", "low_freq_factor", "high_freq_factor",
                                                         "original_max_position_embeddings"))

    def factors(_zeros):
        from ..rope.ggml_factors import llama3_rope_factors  # torch: not at import

        return llama3_rope_factors(spec.head_dim, rope.theta, rope.params)

    return Rewrite(f"replaced by llama.cpp's llama3 RoPE divisors, computed from the head's rope_scaling (theta "
                   f"{rope.theta:g}, {shown})", factors)


def rope_refusal(rope: Rope) -> str | None:
    """Why llama.cpp b11434 would run another RoPE than the head's (its converter and EAGLE-3 loader), or None."""
    if rope.params.get("partial_rotary_factor", 1.0) != 1.0:
        return (f"llama.cpp's EAGLE-3 draft rotates the whole head; this head's RoPE has partial_rotary_factor "
                f"{rope.params['partial_rotary_factor']}")
    if rope.type in ("default", "linear", "llama3", "yarn"):
        missing = [name for name in ROPE_TYPES[rope.type].params if rope.params.get(name) is None
                   and name in ("factor", "low_freq_factor", "high_freq_factor")]
        if missing:
            return (f"the head's {rope.type} rope_scaling lacks {', '.join(missing)} (llama.cpp's converter would "
                    "fill its own defaults, transformers refuses the config)")
        return _out_of_range(rope) or (_yarn_refusal(rope) if rope.type == "yarn" else None)
    why = {"dynamic": "llama.cpp's converter writes nothing for dynamic NTK scaling, so llama.cpp would run plain RoPE",
           "longrope": "llama.cpp's EAGLE-3 loader reads no LongRoPE factor tensors (rope_long/rope_short)"}
    return why.get(rope.type, f"llama.cpp's converter knows no RoPE type {rope.type!r}") + \
        f" (the head's rope_scaling is {rope.type})"


def _out_of_range(rope: Rope) -> str | None:
    """A value no GGUF key or divisor can hold: a factor that is not positive (a divisor of 0 or below), a stated YaRN
    value that is not a float32, an original context outside UINT32."""
    factor, original = rope.params.get("factor"), rope.params.get("original_max_position_embeddings")
    if factor is not None and not 0 < factor < FLOAT32_MAX:
        return f"the head's {rope.type} rope_scaling has factor {factor}, where a positive float32 goes"
    if rope.type == "llama3" and not (rope.params["low_freq_factor"] > 0 and rope.params["high_freq_factor"] > 0):
        return "the head's llama3 rope_scaling needs positive low_freq_factor and high_freq_factor"
    if rope.type != "yarn":
        return None
    if not (isinstance(original, int) and 0 < original < 2 ** 32):
        return f"the head's YaRN original_max_position_embeddings is {original!r}, not a positive 32-bit integer"
    stated = {name: rope.params.get(name) for name in (*YARN_KEYS, "attn_factor") if rope.params.get(name) is not None}
    wrong = [f"{name} {value!r}" for name, value in stated.items()
             if isinstance(value, bool) or not isinstance(value, (int, float)) or not abs(value) < FLOAT32_MAX]
    return f"the head's YaRN states {', '.join(wrong)}, where a number goes" if wrong else None


def _yarn_refusal(rope: Rope) -> str | None:
    """llama.cpp's EAGLE-3 loader reads YaRN's type, factor and original context only: it runs beta_fast 32,
    beta_slow 1, truncated correction dims and the attention factor 0.1 ln(factor) + 1 (llama-context.cpp)."""
    p = rope.params
    default_attention = yarn_attention_factor({"factor": p["factor"]})
    differ = [f"{name} {p.get(name)}" for name, wanted in (("beta_fast", 32), ("beta_slow", 1), ("truncate", True))
              if p.get(name) != wanted]
    if p.get("attention_factor") is not None and abs(p["attention_factor"] - default_attention) > 1e-6:
        differ.append(f"attention_factor {p['attention_factor']:g} (llama.cpp: {default_attention:g})")
    if not differ:
        return None
    return ("llama.cpp's EAGLE-3 loader reads only YaRN's factor and original context, and runs beta_fast 32, "
            f"beta_slow 1, truncated ramps and the default attention factor; this head's YaRN has {', '.join(differ)}")
