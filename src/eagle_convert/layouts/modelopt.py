"""EAGLE-3 heads from NVIDIA ModelOpt, in both of its forms. Input only.

- Saved before export: every tensor under `eagle_module.` (its decoder layer as `midlayer.*` or `layers.N.*`), flags in
  a nested `eagle_config`, target keys copied to the top level (`num_hidden_layers`, `tie_word_embeddings`).
- Exported for deployment (NVIDIA/Model-Optimizer, modelopt/torch/export/plugins/hf_spec_export.py,
  `EagleExporter._extract_state_dict` / `_export_config`): the `eagle_module.` prefix stripped, so `layers.0.*` as vLLM
  names them, and the config filled from `llama_eagle_template_config` (plugins/hf_spec_configs.py), whose nested
  `eagle_config` holds ModelOpt's own keys (MODELOPT_KEYS). Without this layout the export reads as plain vLLM.

Both forms state the aux layer ids in ModelOpt's meaning: the *output* of target layer i. ModelOpt registers its
capture hook with `register_forward_hook` on layer i (modelopt/torch/speculative/plugins/hf_eagle.py,
`HFEagleModel.modify` + `_collect_aux_hidden_states_forward_hook`; megatron_eagle.py `_transformer_layer_forward_hook`
likewise), so they are read +1 into ours (the input of layer i), as SGLang does."""

from __future__ import annotations

from ..errors import LayoutError
from ..kinds import EAGLE3, LAYER
from .base import Layout, has_layer_prefix, rename_prefix
from .eagle3 import MIDLAYER, legacy_eagle3_name
from .registry import register

PREFIX = "eagle_module."
# The eagle_config keys only ModelOpt writes (hf_spec_configs.py llama_eagle_template_config; the Megatron exporter,
# unified_export_megatron.py, writes the same set). Never carried into an output (base.DROPPED_SOURCE_KEYS).
MODELOPT_KEYS = ("use_input_layernorm_in_first_layer", "use_last_layernorm", "use_mtp_layernorm", "next_layer_regular",
                 "parallel_draft_step", "parallel_draft_heads_num_layers")


def _modelopt_keys(config: dict) -> dict:
    nested = config.get("eagle_config") if isinstance(config.get("eagle_config"), dict) else {}
    return {k: nested[k] for k in MODELOPT_KEYS if k in nested}


def _is_eagle3_export(config: dict, names: frozenset[str]) -> bool:
    """ModelOpt names its EAGLE-3 exports LlamaForCausalLMEagle3 (one layer) or LlamaForCausalLMEagle3Deep."""
    archs = " ".join(config.get("architectures") or [])
    return bool(_modelopt_keys(config)) and "Eagle3" in archs and has_layer_prefix(names, LAYER)


@register
class ModelOpt(Layout):
    name = "modelopt"
    summary = ("EAGLE-3 head from NVIDIA ModelOpt: saved (`eagle_module.*`) or exported (`layers.0.*` with ModelOpt's "
               "`eagle_config` keys); aux ids read +1")
    engine = "NVIDIA ModelOpt (training side)"
    detect_priority = 25
    kinds = (EAGLE3,)
    writable = False
    nested_taps = "sglang-nested"  # ModelOpt captures the output of layer i (module docstring)

    def detect(self, config: dict, names: frozenset[str]) -> str | None:
        if has_layer_prefix(names, PREFIX):
            return "tensors named eagle_module.* (ModelOpt EAGLE-3 checkpoint)"
        if _is_eagle3_export(config, names):
            return (f"layers.0.* with ModelOpt's eagle_config keys ({', '.join(_modelopt_keys(config))}): "
                    "a ModelOpt EAGLE-3 export")
        return None

    def source_to_canonical(self, name: str) -> str:
        return legacy_eagle3_name(rename_prefix(rename_prefix(name, PREFIX, ""), MIDLAYER, LAYER))

    def input_notes(self, config: dict) -> tuple[str, ...]:
        return ("ModelOpt checkpoint: any `eagle_module.` prefix removed; aux layer ids in eagle_config are ModelOpt's "
                "(outputs of target layers): read +1; EAGLE-3 flags read from the nested eagle_config as well as the "
                "top level",)


def modelopt_refusal(config: dict, label: str) -> None:
    """ModelOpt switches that build a head no layout here can hold, refused by name (whatever the layout: the keys
    are ModelOpt's). use_input_layernorm_in_first_layer / use_last_layernorm false: variants.UNREAD_NORM_SWITCHES."""
    nested = config.get("eagle_config") if isinstance(config.get("eagle_config"), dict) else {}

    def stated(key):
        return nested.get(key, config.get(key))

    steps = stated("parallel_draft_step")
    if steps is not None and int(steps) > 1:
        # EagleMedusaExporter (hf_spec_export.py) adds parallel_draft_heads.{i}.medusa_layers.* for steps 2..n, and
        # megatron_eagle.py drafts those tokens in one pass. vLLM's parallel drafting is a different scheme (P-EAGLE:
        # a `mask_hidden` buffer, llama_eagle3.py) and SGLang has none.
        raise LayoutError(
            f"{label}: eagle_config.parallel_draft_step={steps} (ModelOpt): the head drafts {int(steps) - 1} extra "
            "token(s) per step with ModelOpt's parallel draft heads (parallel_draft_heads.*), which no layout "
            "eagle-convert writes can hold and no engine here runs.",
            "Export the head with parallel_draft_step 1 (plain EAGLE-3 drafting), or serve it with the tool that "
            "trained it.")
    if stated("use_mtp_layernorm") is True and stated("use_aux_hidden_state") is not True:
        # megatron_eagle.py: without aux states, use_mtp_layernorm adds the MTP norms enorm/hnorm.
        raise LayoutError(
            f"{label}: eagle_config.use_mtp_layernorm=true without aux hidden states (ModelOpt): the head normalises "
            "its inputs with ModelOpt's MTP norms (enorm / hnorm), which no EAGLE layout or engine here has.",
            "eagle-convert converts EAGLE-3 heads (use_aux_hidden_state true); serve this one with ModelOpt's stack.")
    if stated("next_layer_regular") is False:
        raise LayoutError(
            f"{label}: eagle_config.next_layer_regular=false (ModelOpt): ModelOpt's exporters always write true and "
            "no code reads it, so the head's later layers are of a kind eagle-convert does not know.",
            "Check the export (ModelOpt writes next_layer_regular: true); eagle-convert will not guess.")
