"""What a plain EAGLE-3 graph holds: the engines that rebuild the head as their own fixed graph (llama.cpp's
src/models/eagle3.cpp, OpenVINO GenAI through optimum-intel's LlamaEagle3Model) take one Llama decoder layer, fc over
exactly three tapped target states, no biases and a SiLU-gated MLP. Their layouts (gguf.py, openvino.py) refuse what
lies outside it with these rows, beside the refusals of their own."""

from __future__ import annotations

from ..spec import DraftSpec


def tapped(spec: DraftSpec) -> int:
    """How many target states the head's fc reads (0 for a head that reads none)."""
    return len(spec.aux_layer_ids or ()) if spec.use_aux_hidden_state else 0


def plain_eagle3_reasons(spec: DraftSpec, engine: str, taps_key: str) -> list[tuple[bool, str]]:
    """(refused, why) rows, in order, for what the plain graph cannot hold; `engine` names it in each reason
    ("llama.cpp", "GenAI"), `taps_key` is where it reads the tapped layers."""
    aux = tapped(spec)
    return [
        (aux != 3 or spec.num_aux_states != 3,
         f"{engine}'s EAGLE-3 requires exactly 3 target layers (`{taps_key}`, fc of 3 x hidden); this head taps {aux}"),
        (spec.num_layers != 1, f"{engine}'s EAGLE-3 graph has one decoder layer; this head has {spec.num_layers}"),
        (spec.qk_norm or spec.base_model_type != "llama",
         f"{engine}'s EAGLE-3 draft is a Llama layer (no q_norm/k_norm, no q/k/v bias); this is a "
         f"{'Qwen3' if spec.qk_norm else spec.base_model_type} draft"),
        (spec.qkv_bias, f"{engine}'s EAGLE-3 attention has no q/k/v bias"),
        (spec.fc_bias, f"{engine}'s EAGLE-3 fc has no bias"),
        (spec.hidden_act != "silu", f"{engine}'s EAGLE-3 MLP is SiLU-gated; this head uses {spec.hidden_act}"),
    ]
