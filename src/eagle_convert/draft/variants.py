"""Which EAGLE-3 variant a head is, read from its tensors and reconciled with its config (pure: shapes and dicts).

The tensors decide what the head computes; a config that says otherwise is an error naming both, because an engine
follows the config and would silently build a different head. Exporters state the flags in different places: the top
level (vLLM, SpecForge, speculators) or a nested `eagle_config` (ModelOpt, NVIDIA's releases); both are read, and
two places that disagree are an error too."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import LayoutError, ShapeMismatchError
from ..taps.conventions import ABSENT, AUX_IDS, DEFAULT, NO_AUX, default_note, fill_default, origin_text, read_aux_ids

# Tensors of multi-head latent attention (DeepSeek / Kimi EAGLE-3 heads): a different layer, not a Llama one.
MLA_TENSOR = re.compile(r"(^|\.)(q_a_proj|q_b_proj|kv_a_proj_with_mqa|kv_b_proj|kv_a_layernorm|q_a_layernorm)\.")


def mla_refusal(names, label: str) -> None:
    hits = sorted(n for n in names if MLA_TENSOR.search(n))
    if hits:
        raise LayoutError(
            f"{label} is an MLA (multi-head latent attention) EAGLE-3 head, as trained for DeepSeek / Kimi targets: "
            f"it has {', '.join(hits[:3])}{' ...' if len(hits) > 3 else ''}. Its decoder layer is DeepSeek's, not a "
            "Llama layer, so no layout eagle-convert writes can hold it and its runner cannot run it.",
            "Serve the release as it is (vLLM loads it as Eagle3DeepseekV2ForCausalLM, deepseek_eagle3.py); "
            "eagle-convert converts Llama- and Qwen3-layer heads only.")


# ModelOpt switches that remove a norm when false (NVIDIA/Model-Optimizer: use_last_layernorm builds the final `norm`,
# modelopt/torch/speculative/plugins/modeling_eagle.py EagleModule; use_input_layernorm_in_first_layer false makes
# layer 0's input norm an identity, plugins/megatron_eagle.py _get_eagle_transformer_layer_spec); no engine here reads
# them (grep finds neither in vLLM 0.32 nor SGLang 0.5.23). ModelOpt's other keys: formats/modelopt.py.
UNREAD_NORM_SWITCHES = ("use_input_layernorm_in_first_layer", "use_last_layernorm")


@dataclass
class Eagle3Variant:
    num_aux_states: int
    target_hidden_size: int
    aux_layer_ids: tuple[int, ...] | None
    aux_ids_origin: str | None
    norm_before_fc: bool
    fc_norm: bool
    norm_output: bool
    norm_before_residual: bool
    num_layers: int
    qk_norm: bool
    sources: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _stated(cfg: dict, key: str, label: str):
    """(value, where) of a flag stated at the top level and/or in the nested eagle_config; (None, None) if neither.
    Aux layer ids are not flags: they are read through the tap conventions (taps/conventions.py read_aux_ids)."""
    nested = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    top, inner = cfg.get(key), nested.get(key)
    if top is not None and inner is not None and top != inner:
        raise LayoutError(f"{label}: the config says {key}={top!r} at the top level but {key}={inner!r} in "
                          "eagle_config.", f"Keep one value of {key} (the one the head was trained with).")
    if inner is not None:
        return inner, f"config eagle_config.{key}"
    if top is not None:
        return top, f"config {key}"
    return None, None


def _flag_from_tensors(cfg: dict, key: str, present: bool, evidence: str, label: str, sources: dict) -> bool:
    stated, where = _stated(cfg, key, label)
    if stated is None and key == "fc_norm" and cfg.get("use_aux_norm") is not None:  # SGLang's legacy name
        stated, where = cfg["use_aux_norm"], "config use_aux_norm (SGLang's legacy name for fc_norm)"
    if stated is not None and bool(stated) != present:
        raise LayoutError(
            f"{label}: {where}={stated!r}, but the tensors say {key}={'true' if present else 'false'} ({evidence} "
            f"{'present' if present else 'absent'}). An engine follows the config and would build a different head.",
            f"Fix {key} in the draft config (or use the checkpoint that matches it).")
    sources[key] = f"tensors ({evidence} {'present' if present else 'absent'})" + (f"; {where} agrees" if where else "")
    return present


def detect_eagle3(cfg: dict, shapes: dict[str, tuple[int, ...]], *, hidden: int, target_config: dict | None,
                  label: str, nested_taps: str = "vllm-nested") -> Eagle3Variant:
    """`shapes`: canonical name -> shape. Raises on any disagreement between tensors and config. Aux layer ids are
    internal (the input of layer i, HF hidden_states[i]); `nested_taps` is the tap convention (taps/conventions.py)
    of ids nested in eagle_config: "sglang-nested" (the output of layer i) for SGLang-lineage and ModelOpt layouts."""
    sources: dict[str, str] = {}
    notes: list[str] = []
    target_cfg = target_config or {}
    _refuse_unread_norm_switches(cfg, label)
    norm_before_fc, fc_norms, norm_output, residual = _norm_flags(cfg, shapes, label, sources, notes)
    fc_norm = bool(fc_norms)  # the tensors decide (_norm_flags refused a config that says otherwise)
    num_aux, target_hidden, (aux_ids, origin) = _aux_states(cfg, shapes, hidden=hidden, target_cfg=target_cfg,
                                                            label=label, nested_taps=nested_taps, sources=sources,
                                                            notes=notes)
    _check_aux_norms(shapes, fc_norms, norm_before_fc, num_aux, target_hidden, label)
    layer_ids = _layers(cfg, shapes, label, sources, notes)
    qk_norm = _qk_norm(cfg, shapes, layer_ids, label, sources)
    return Eagle3Variant(num_aux_states=num_aux, target_hidden_size=int(target_hidden), aux_layer_ids=aux_ids,
                         aux_ids_origin=origin, norm_before_fc=norm_before_fc, fc_norm=fc_norm, norm_output=norm_output,
                         norm_before_residual=bool(residual), num_layers=len(layer_ids), qk_norm=qk_norm,
                         sources=sources, notes=notes)


def _refuse_unread_norm_switches(cfg: dict, label: str) -> None:
    nested = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    for key in UNREAD_NORM_SWITCHES:
        if nested.get(key) is False or cfg.get(key) is False:
            raise LayoutError(
                f"{label}: the config says {key}=false (ModelOpt): the head was trained without that norm, but neither "
                "vLLM 0.32 nor SGLang 0.5.23 reads the switch (both always apply it), so they would run a different "
                "head.", "eagle-convert cannot write this head for any engine; serve it with the tool that trained it.")


def _norm_flags(cfg: dict, shapes: dict, label: str, sources: dict, notes: list) -> tuple:
    """(norm_before_fc, the fc_norm indices, norm_output, norm_before_residual as stated): the norms around fc."""
    norm_before_fc = _flag_from_tensors(cfg, "norm_before_fc", "input_norm.weight" in shapes, "input_norm.weight",
                                        label, sources)
    fc_norms = sorted(int(m.group(1)) for n in shapes if (m := re.fullmatch(r"fc_norm\.(\d+)\.weight", n)))
    fc_norm = _flag_from_tensors(cfg, "fc_norm", bool(fc_norms), "fc_norm.{i}.weight", label, sources)
    stated_output, where = _stated(cfg, "norm_output", label)
    norm_output = bool(stated_output)
    sources["norm_output"] = where or "default false (no tensor shows it; the config does not state it)"
    if fc_norm and stated_output is None:
        notes.append("fc_norm tensors (EAGLE 3.1) but the config does not state norm_output: reading it as false, "
                     "as vLLM does; set it if the head was trained with it")
    residual, where = _stated(cfg, "norm_before_residual", label)
    sources["norm_before_residual"] = where or "default false (the released EAGLE-3 residual)"
    return norm_before_fc, fc_norms, norm_output, residual


def _aux_states(cfg: dict, shapes: dict, *, hidden: int, target_cfg: dict, label: str, nested_taps: str,
                sources: dict, notes: list) -> tuple[int, int, tuple]:
    """(num_aux_states, target_hidden_size, (aux_layer_ids, where they came from)): fc input width / target hidden,
    or none at all (use_aux_hidden_state false: no fc)."""
    use_aux, where_aux = _stated(cfg, "use_aux_hidden_state", label)
    has_fc = "fc.weight" in shapes
    if use_aux is not None and bool(use_aux) != has_fc:
        raise LayoutError(
            f"{label}: {where_aux}={use_aux!r} but fc.weight is {'present' if has_fc else 'absent'}: a head fed aux "
            "states needs fc, and vLLM drops fc.weight when use_aux_hidden_state is false.",
            "Fix use_aux_hidden_state in eagle_config, or use the checkpoint that matches it.")
    sources["use_aux_hidden_state"] = f"tensors (fc.weight {'present' if has_fc else 'absent'})" + (
        f"; {where_aux} agrees" if where_aux else "")
    ids, origin = read_aux_ids(cfg, nested_taps, label)
    where_ids = origin_text(origin, ids) if origin else None
    count, where_count = _stated(cfg, "num_aux_hidden_states", label)
    target_hidden, where_th = cfg.get("target_hidden_size"), "config target_hidden_size"
    if not has_fc:
        if ids:
            raise LayoutError(f"{label}: no fc.weight (use_aux_hidden_state false: the head reads the target's last "
                              f"hidden state) but {where_ids}={list(ids)} names aux layers.",
                              "Remove the aux layer ids, or use the checkpoint with its fc.")
        if target_hidden is None and target_cfg.get("hidden_size"):
            target_hidden, where_th = target_cfg["hidden_size"], "the target's hidden_size"
        if target_hidden is not None and int(target_hidden) != hidden:
            raise ShapeMismatchError(f"{label}: without fc the target's hidden state feeds the layer directly, but "
                                     f"{where_th}={target_hidden} != the draft's hidden_size {hidden}.",
                                     "This head cannot read that target.")
        sources["num_aux_states"] = "0: tensors (no fc.weight)"
        sources["aux_layer_ids"] = where_ids or origin_text(NO_AUX, ())
        return 0, hidden, ((), origin or NO_AUX)
    fc_shape = list(shapes["fc.weight"])
    if len(fc_shape) != 2 or fc_shape[0] != hidden:  # a 3-D fc (a damaged header) is refused here, not unpacked
        raise ShapeMismatchError(f"{label}: fc.weight is {fc_shape}, expected [{hidden}, n x target hidden].",
                                 "The head does not match its own config.")
    fc_out, width = fc_shape
    if ids is not None and not ids:
        raise LayoutError(
            f"{label}: {where_ids.replace(' (stated empty: no layers)', '')} is an empty list, but fc.weight reads "
            "aux states: an empty list names no target layer, and engines disagree on it (vLLM 0.32 reads it as "
            "absent and taps its own default layers; SGLang passes it on as no layers).",
            f"Remove {AUX_IDS} to use the EAGLE reference default [2, N//2, N-3], or set the layers the head was "
            "trained on.")
    stated_n = [(int(count), where_count)] if count is not None else []
    stated_n += [(len(ids), f"{where_ids} ({list(ids)})")] if ids else []
    if len({n for n, _ in stated_n}) > 1:
        (n1, w1), (n2, w2) = stated_n
        raise LayoutError(f"{label}: {w1} says {n1} aux states but {w2} names {n2}.",
                          "Make num_aux_hidden_states and the aux layer ids agree (fc.weight decides: "
                          f"{width} inputs).")
    target_width = int(target_cfg.get("hidden_size") or 0)
    if target_hidden is None and stated_n and width % stated_n[0][0] == 0:
        # the head's own config decides; check_pair compares it to the target
        target_hidden, where_th = width // stated_n[0][0], f"fc width {width} / {stated_n[0][0]} aux states"
    elif target_hidden is None and target_width and width % target_width == 0:
        target_hidden, where_th = target_width, "the target's hidden_size"
    elif target_hidden is None:
        target_hidden, where_th = width // 3, f"fc width {width} / EAGLE-3's 3 aux states"
    target_hidden = int(target_hidden)
    if width % target_hidden:
        raise ShapeMismatchError(f"{label}: fc.weight takes {width} inputs, not a multiple of the target hidden "
                                 f"size {target_hidden} ({where_th}).", "Fix target_hidden_size in the draft config.")
    num_aux = width // target_hidden
    for n, where in stated_n:
        if n != num_aux:
            raise ShapeMismatchError(
                f"{label}: {where} says {n} aux states, but fc.weight takes {width} = {num_aux} x {target_hidden} "
                f"inputs ({where_th}).", "Make the config's aux layer ids / num_aux_hidden_states match fc.weight.")
    sources["num_aux_states"] = f"{num_aux}: tensors (fc.weight width {width} / target hidden {target_hidden})"
    return num_aux, target_hidden, _aux_ids_or_default(ids, origin, num_aux, target_cfg, label, sources, notes)


def _aux_ids_or_default(ids, origin, num_aux: int, target_cfg: dict, label: str, sources: dict, notes: list) -> tuple:
    """(aux_layer_ids, origin): as stated, or the EAGLE reference default named in the notes (never left to an
    engine's guess); None with origin "absent" when there is no target to fill it from."""
    layers = int(target_cfg.get("num_hidden_layers") or 0)
    if ids is None and num_aux != 3:
        raise LayoutError(f"{label}: the head reads {num_aux} aux states, but its config does not say which "
                          "target layers (there is a default for three only).",
                          f"Add {AUX_IDS} to the draft config (the exporter's value).")
    if ids is None and layers:
        ids, origin = fill_default(num_aux, layers), DEFAULT
        notes.append(default_note(ids, layers))
    sources["aux_layer_ids"] = origin_text(origin, ids, layers) if origin else origin_text(None, None)
    return (tuple(ids) if ids is not None else None), origin or ABSENT


def _check_aux_norms(shapes: dict, fc_norms: list[int], norm_before_fc: bool, num_aux: int, target_hidden: int,
                     label: str) -> None:
    """The norms over the aux states match their count and width."""
    if fc_norms and fc_norms != list(range(num_aux)):
        raise ShapeMismatchError(f"{label}: fc_norm tensors {fc_norms} do not match the {num_aux} aux states.",
                                 "The head is incomplete; re-export it.")
    if norm_before_fc and shapes["input_norm.weight"] != (num_aux * target_hidden,):
        raise ShapeMismatchError(f"{label}: input_norm.weight is {list(shapes['input_norm.weight'])}, expected "
                                 f"[{num_aux * target_hidden}] (one norm over the concatenated aux states).",
                                 "The head is incomplete; re-export it.")


def _layers(cfg: dict, shapes: dict, label: str, sources: dict, notes: list) -> list[int]:
    """The decoder layers' indices, 0..n-1 (the tensors win over a num_hidden_layers copied from the target)."""
    layer_ids = sorted({int(m.group(1)) for n in shapes if (m := re.match(r"layers\.(\d+)\.", n))})
    if layer_ids != list(range(len(layer_ids))) or not layer_ids:
        raise LayoutError(f"{label}: decoder layers {layer_ids} are not numbered 0..n-1.", "Re-export the head.")
    num_layers = len(layer_ids)
    stated_layers = cfg.get("num_hidden_layers")
    if stated_layers is not None and int(stated_layers) != num_layers:
        notes.append(f"config says num_hidden_layers={stated_layers} (exporters copy the target's) but the tensors "
                     f"hold {num_layers} decoder layer(s); using {num_layers} (the tensors win)")
    sources["num_layers"] = f"{num_layers}: tensors (layers.0..{num_layers - 1})"
    return layer_ids


def _qk_norm(cfg: dict, shapes: dict, layer_ids: list[int], label: str, sources: dict) -> bool:
    """A Qwen3 layer: q_norm and k_norm in every layer, and a config model_type that does not say otherwise."""
    q_norm = {i for i in layer_ids if f"layers.{i}.self_attn.q_norm.weight" in shapes}
    k_norm = {i for i in layer_ids if f"layers.{i}.self_attn.k_norm.weight" in shapes}
    if q_norm != k_norm or q_norm not in (set(), set(layer_ids)):
        raise LayoutError(f"{label}: q_norm in layers {sorted(q_norm)}, k_norm in layers {sorted(k_norm)}: a Qwen3 "
                          "layer has both in every layer.", "The head is incomplete; re-export it.")
    qk_norm = bool(q_norm)
    model_type = cfg.get("model_type")
    if model_type == "qwen3" and not qk_norm:
        raise LayoutError(f"{label}: config model_type='qwen3' but the tensors have no q_norm/k_norm (a Llama layer).",
                          "Fix model_type in the draft config (SpecForge's Qwen3 drafts use Llama layers: 'llama').")
    if qk_norm and model_type not in (None, "qwen3", "eagle3"):
        raise LayoutError(f"{label}: the tensors have q_norm/k_norm (a Qwen3 layer) but config model_type="
                          f"{model_type!r}.", "Set model_type to 'qwen3' in the draft config.")
    sources["qk_norm"] = f"tensors (q_norm/k_norm {'present' if qk_norm else 'absent'})"
    return qk_norm
