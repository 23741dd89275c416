"""RoPE as engines read it from a config: the two keys a config can state it in (`rope_scaling`, read by older
stacks; `rope_parameters`, written by transformers 5), the schedule each reader computes with the table's defaults
filled (types.py), the position limit engines derive, and the fields an output config states its schedule in.

Sources, transformers 5.19 `modeling_rope_utils.py`: 752-754 (`rope_scaling` wins over `rope_parameters`), 786-818
(`rope_theta` from the top level unless the dict has one)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .types import COMMON, DEFAULT_ROPE_THETA, DERIVED, LIMIT, REQUIRED, ROPE_TYPES, TYPE_KEYS, rope_type_of


@dataclass(frozen=True)
class Rope:
    """One RoPE schedule as an engine computes it: type, base, and every parameter with its default filled."""
    type: str
    theta: float
    params: dict = field(default_factory=dict)

    @property
    def scaled(self) -> bool:
        return self.type != "default"

    def to_dict(self) -> dict:
        return {"rope_type": self.type, "rope_theta": self.theta,
                **{k: v for k, v in self.params.items() if v is not None}}


# Who reads which key first: transformers 5 (and vLLM 0.32 through it) takes `rope_scaling` when set, else
# `rope_parameters`; a stack before transformers 5 knows only `rope_scaling` and the top-level `rope_theta`; SGLang
# 0.5.23's models ask for `rope_parameters` first (models/llama.py:322-328, llama_eagle3.py:132-136), which before
# transformers 5 is the raw key.
READERS = ("transformers5", "legacy", "parameters_first")


def stated_rope(config: dict, reader: str = "transformers5") -> dict:
    """The dict that states the schedule, as `reader` (READERS) picks it."""
    scaling, parameters = config.get("rope_scaling"), config.get("rope_parameters")
    chosen = {"transformers5": scaling or parameters, "legacy": scaling,
              "parameters_first": parameters or scaling}[reader]
    return dict(chosen or {})


def engine_rope(config: dict, reader: str = "transformers5") -> Rope:
    """The schedule an engine computes from `config` (a flat text config), defaults filled as transformers fills
    them, the keys read as `reader` (READERS) reads them."""
    stated = stated_rope(config, reader)
    legacy = reader == "legacy"
    kind = rope_type_of(stated)
    inner_theta = None if legacy else stated.get("rope_theta")  # transformers 5: the dict's own theta wins
    theta = float(inner_theta or config.get("rope_theta") or DEFAULT_ROPE_THETA)
    raw = {k: v for k, v in stated.items() if k not in TYPE_KEYS + ("rope_theta",)}
    row = ROPE_TYPES.get(kind)
    if row is None:  # a type this table does not know: every stated parameter counts as it is
        return Rope(kind, theta, dict(sorted(raw.items())))
    limit = config.get("max_position_embeddings")
    params = dict(sorted(raw.items()))  # parameters outside the table (mrope_section, ...) count as stated
    for name, default in {**COMMON, **row.params}.items():
        params[name] = raw[name] if raw.get(name) is not None else _filled(default, limit)
    if row.params.get("attention_factor") == DERIVED and params["attention_factor"] is None and params.get("factor"):
        params["attention_factor"] = row.attention_formula(params)
    if row.limit_sets_schedule:
        params["max_position_embeddings"] = limit
    return Rope(kind, theta, params)


def _filled(default, limit):
    """A parameter's value when the config leaves it out: the table's default, the limit, or None."""
    if default in (REQUIRED, DERIVED):
        return None
    return limit if default == LIMIT else default


def engine_limit(config: dict) -> int | None:
    """The draft length vLLM and SGLang derive from a config: max_position_embeddings, times `factor` for the types
    they scale it by (vLLM config/model.py:2580-2616; SGLang utils/hf_transformers/common.py:677-694)."""
    limit = config.get("max_position_embeddings")
    if limit is None:
        return None
    rope = engine_rope(config)
    row = ROPE_TYPES.get(rope.type)
    factor = rope.params.get("factor") if row and row.scales_limit else None
    return int(limit * factor) if factor else int(limit)


def output_rope_fields(config: dict, source_limit: int) -> dict:
    """`rope_theta`, `rope_scaling` and `rope_parameters` stating one schedule, for an output config whose position
    limit may be raised: the parameters as the source states them (its type under `rope_type`), plus the defaults
    that follow max_position_embeddings made explicit from `source_limit` (the source's own limit), so that raising
    the limit moves nothing. Plain RoPE is `rope_scaling: null` (what older stacks expect) and a default-type
    `rope_parameters` (what transformers 5 writes)."""
    stated = stated_rope(config)
    kind = rope_type_of(stated)
    theta = float(stated.get("rope_theta") or config.get("rope_theta") or DEFAULT_ROPE_THETA)
    params = {k: v for k, v in stated.items() if k not in TYPE_KEYS + ("rope_theta",)}
    row = ROPE_TYPES.get(kind)
    for name, default in (row.params.items() if row else ()):
        if default == LIMIT and params.get(name) is None:
            params[name] = source_limit
    scaling = {"rope_type": kind, **params} if kind != "default" or params else None
    return {"rope_theta": theta, "rope_scaling": scaling,
            "rope_parameters": {"rope_type": kind, "rope_theta": theta, **params}}


def limit_sets_schedule(config: dict) -> bool:
    """Raising this config's max_position_embeddings would change its frequencies (dynamic NTK scaling)."""
    row = ROPE_TYPES.get(rope_type_of(stated_rope(config)))
    return bool(row and row.limit_sets_schedule)
