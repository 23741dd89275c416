"""The RoPE scaling types as data, one row each: the parameters with the defaults transformers 5 fills (vLLM 0.32 and
SGLang 0.5.23 both read RoPE through transformers' config object), how each type's position limit and attention
scale follow, and what the runner cannot compute it without; with the legacy type aliases. Torch-free: the config
checks (positions/, layouts/) read it before torch loads; frequencies.py holds the torch half, one formula per row.

Sources, transformers 5.19 `modeling_rope_utils.py`: 786-818 (`rope_type` taken from `type`;
`original_max_position_embeddings` defaults to `max_position_embeddings` for llama3, yarn and longrope), 432-443
(YaRN: `attention_factor` from mscale / mscale_all_dim, else 0.1 ln(factor) + 1; beta_fast 32, beta_slow 1), 474
(truncate true), 327-337 (dynamic scales from `max_position_embeddings` itself), the longrope attention factor
sqrt(1 + ln(factor) / ln(original)); vLLM 0.32 `transformers_utils/config.py:563-602` (su -> longrope, mrope ->
default, a `type` that contradicts `rope_type` is refused)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_ROPE_THETA = 10000.0  # transformers' and the EAGLE reference's base when a config states none
REQUIRED = "required"  # a parameter with no default (absent: None, and compared as such)
LIMIT = "max_position_embeddings"  # default: the config's own position limit
DERIVED = "derived"  # default computed from other parameters (YaRN's attention factor)
ORIGINAL = "original_max_position_embeddings"


def _mscale(scale: float, m: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def yarn_attention_factor(params: dict) -> float:
    """transformers' default YaRN attention factor (modeling_rope_utils.py:432-438)."""
    factor = params["factor"]
    if params.get("mscale") and params.get("mscale_all_dim"):
        return float(_mscale(factor, params["mscale"]) / _mscale(factor, params["mscale_all_dim"]))
    return _mscale(factor)


def longrope_attention_factor(params: dict) -> float:
    """transformers' default LongRoPE attention factor, from the factor and the original context."""
    factor, original = params["factor"], params[ORIGINAL]
    return 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))


@dataclass(frozen=True)
class RopeType:
    name: str
    params: dict  # parameter -> its default (REQUIRED, LIMIT, DERIVED or a value)
    limit_sets_schedule: bool = False  # the frequencies depend on max_position_embeddings itself (dynamic)
    scales_limit: bool = False  # vLLM and SGLang multiply the position limit by `factor` (model.py:2580-2616)
    # The frequencies depend on how far a forward reaches (transformers' dynamic_rope_update): never tabled once.
    length_dependent: bool = False
    # A missing `factor` is max_position_embeddings / original_max_position_embeddings (the runner, as transformers).
    factor_from_limits: bool = False
    attention_formula: Callable[[dict], float] | None = None  # the default attention scale; None: always 1

    @property
    def needs(self) -> tuple[str, ...]:
        """The parameters the runner cannot compute this type without (a config transformers refuses)."""
        names = [name for name, default in self.params.items() if default == REQUIRED]
        names += ["max_position_embeddings"] if self.limit_sets_schedule else []
        names += ["factor", ORIGINAL] if self.factor_from_limits else []
        return tuple(dict.fromkeys(names))

    def attention_scaling(self, params: dict) -> float:
        """The factor cos and sin are multiplied by: the stated `attention_factor`, else the type's default."""
        if self.attention_formula is None:
            return 1.0
        stated = params.get("attention_factor")
        return self.attention_formula(params) if stated is None else stated


COMMON = {"partial_rotary_factor": 1.0}
ROPE_TYPES = {t.name: t for t in (
    RopeType("default", {}),
    RopeType("linear", {"factor": REQUIRED}, scales_limit=True),
    RopeType("dynamic", {"factor": REQUIRED}, limit_sets_schedule=True, scales_limit=True, length_dependent=True),
    RopeType("llama3", {"factor": REQUIRED, "low_freq_factor": REQUIRED, "high_freq_factor": REQUIRED,
                        ORIGINAL: LIMIT}),
    RopeType("yarn", {"factor": REQUIRED, ORIGINAL: LIMIT, "attention_factor": DERIVED, "mscale": None,
                      "mscale_all_dim": None, "beta_fast": 32, "beta_slow": 1, "truncate": True},
             factor_from_limits=True, attention_formula=yarn_attention_factor),
    RopeType("longrope", {"short_factor": REQUIRED, "long_factor": REQUIRED, "factor": None,
                          "attention_factor": None, ORIGINAL: LIMIT},
             length_dependent=True, factor_from_limits=True, attention_formula=longrope_attention_factor),
)}
ALIASES = {"su": "longrope", "mrope": "default"}  # legacy names vLLM rewrites (mrope keeps its mrope_section)
# Legacy/modern pairs vLLM accepts side by side although the names differ (config.py:572-584).
ACCEPTED_PAIRS = {("su", "longrope"), ("mrope", "default")}
TYPE_KEYS = ("rope_type", "type")


def rope_type_of(stated: dict | None) -> str:
    stated = stated or {}
    name = stated.get("rope_type") or stated.get("type") or "default"
    return ALIASES.get(name, name)


def type_conflict(stated: dict | None) -> tuple[str, str] | None:
    """(rope_type, type) when one dict states both and they disagree: vLLM refuses to load such a config."""
    stated = stated or {}
    modern, legacy = stated.get("rope_type"), stated.get("type")
    if modern and legacy and modern != legacy and (legacy, modern) not in ACCEPTED_PAIRS:
        return modern, legacy
    return None
