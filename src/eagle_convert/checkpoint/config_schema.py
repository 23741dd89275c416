"""The JSON type of every config.json key eagle-convert reads, checked once when a checkpoint's config is loaded (as
safetensors headers are checked before any offset in them is used), so that a readers' `int(cfg[...])` never meets a
list, a string or null. Keys not in the table are ignored: configs carry many that nothing here reads.

A spec is a type name ("int", "number", "bool", "str", "list[int]", "list[str]", "list[number]", "dict"), with a
trailing "?" when JSON null is accepted too (the readers take null as "not stated"), or a nested table (an object
checked against it, or null). bool is not an int or a number: `hidden_size: true` is refused, not read as 1."""

from __future__ import annotations

from ..errors import CorruptCheckpointError

_SCALARS = {
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "bool": lambda v: isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
    "dict": lambda v: isinstance(v, dict),
}
_EXPECTED = {"int": "an integer", "number": "a number", "bool": "true or false", "str": "a string",
             "dict": "an object", "list[int]": "a list of integers", "list[str]": "a list of strings",
             "list[number]": "a list of numbers"}

# rope_scaling / rope_parameters (draft.read_rope, runner/model.py rope_from_hf, rope/types.py scaling types).
ROPE = {
    "rope_type": "str?", "type": "str?", "rope_theta": "number?", "factor": "number", "partial_rotary_factor":
    "number", "low_freq_factor": "number", "high_freq_factor": "number", "original_max_position_embeddings": "int",
}

# quantization_config (targets/quant.py).
QUANTIZATION = {
    "weight_block_size": "list[int]?", "quant_method": "str?", "quant_algo": "str?", "format": "str?",
    "config_groups": "dict?", "ignore": "list[str]?", "ignored_layers": "list[str]?",
    "modules_to_not_convert": "list[str]?", "exclude_modules": "list[str]?",
}

# TensorRT-LLM's `mapping` (ranks/rank_formats.py).
MAPPING = {"tp_size": "int", "pp_size": "int", "cp_size": "int"}

# A model config: target (target.py, targets/, ranks/, runner/) and draft (draft.py, variants.py, formats/) alike;
# the nested model configs (text_config, eagle_config, transformer_layer_config, vLLM v0's `model`) use it too.
MODEL: dict = {
    # sizes
    "hidden_size": "int", "vocab_size": "int", "num_hidden_layers": "int", "num_attention_heads": "int",
    "num_key_value_heads": "int?", "head_dim": "int?", "intermediate_size": "int", "max_position_embeddings": "int?",
    "draft_vocab_size": "int?", "target_hidden_size": "int?", "num_aux_hidden_states": "int?",
    "eagle_aux_hidden_state_layer_ids": "list[int]?", "parallel_draft_step": "int?",
    # identity and dtype
    "architectures": "list[str]?", "model_type": "str?", "speculators_model_type": "str?", "hidden_act": "str?",
    "torch_dtype": "str?", "dtype": "str?",
    # numbers
    "rms_norm_eps": "number", "rope_theta": "number?", "rope_scaling": ROPE, "rope_parameters": ROPE,
    # flags
    "tie_word_embeddings": "bool?", "bias": "bool?", "eagle_fc_bias": "bool?", "qkv_bias": "bool?",
    "attention_bias": "bool?", "mlp_bias": "bool?", "norm_before_fc": "bool?", "fc_norm": "bool?",
    "use_aux_norm": "bool?", "norm_output": "bool?", "norm_before_residual": "bool?", "use_aux_hidden_state": "bool?",
    "use_input_layernorm_in_first_layer": "bool?", "use_last_layernorm": "bool?", "use_mtp_layernorm": "bool?",
    "next_layer_regular": "bool?",
    # attention windows and MoE (runner/model.py, runner/moe_mlp.py)
    "sliding_window": "int?", "use_sliding_window": "bool?", "max_window_layers": "int", "layer_types": "list[str]?",
    "num_experts": "int?", "num_local_experts": "int?", "num_experts_per_tok": "int", "decoder_sparse_step": "int?",
    "mlp_only_layers": "list[int]?", "norm_topk_prob": "bool?",
    # quantized targets, TensorRT-LLM rank saves
    "quantization_config": QUANTIZATION, "mapping": MAPPING, "use_parallel_embedding": "bool?",
    "embedding_sharding_dim": "int",
    # sub-configs
    "speculators_config": "dict?",
}
for _key in ("text_config", "eagle_config", "transformer_layer_config", "model"):
    MODEL[_key] = MODEL  # checked as the top level is; they nest only a level or two deep

HINT = ("Fix that value in config.json, or re-download the file (it does not match the format transformers writes; "
        "docs/convert.md says which keys are checked).")


def check_config(config: dict, where: str) -> None:
    """Raise CorruptCheckpointError naming `where` (the file), the key (dotted for nested ones), the value's JSON type
    and the expected one, for the first key of `config` whose value does not fit the table."""
    _check_table(config, MODEL, where, "")


def _check_table(obj: dict, table: dict, where: str, prefix: str) -> None:
    for key, spec in table.items():
        if key in obj:
            _check_value(obj[key], spec, where, prefix + key)


def _check_value(value, spec, where: str, path: str) -> None:
    if isinstance(spec, dict):
        if value is None:
            return
        if not isinstance(value, dict):
            _refuse(value, "an object", where, path)
        _check_table(value, spec, where, path + ".")
        return
    nullable, name = spec.endswith("?"), spec.rstrip("?")
    if value is None and nullable:
        return
    if name.startswith("list["):
        item = _SCALARS[name[5:-1]]
        ok = isinstance(value, list) and all(item(v) for v in value)
    else:
        ok = _SCALARS[name](value)
    if not ok:
        _refuse(value, _EXPECTED[name] + (" or null" if nullable else ""), where, path)


def json_type(value) -> str:
    """The JSON name of a parsed value's type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _refuse(value, expected: str, where: str, path: str):
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    raise CorruptCheckpointError(f"{where}: {path} is a JSON {json_type(value)} ({shown}), expected {expected}.", HINT)
