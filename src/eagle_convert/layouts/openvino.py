"""OpenVINO GenAI (2026.4, `LLMPipeline(target, "CPU", draft_model=draft_model(OUT, "CPU"))`): the EAGLE-3 head as an
OpenVINO IR folder. GenAI loads IR only, and the one exporter of an EAGLE-3 head to IR is optimum-intel's (2.2.0,
`LlamaForCausalLMEagle3`: `midlayer.*`, `fc`, `norm`, its own `lm_head` of draft_vocab_size, `d2t` offsets, `t2d`).

So this layout is written in two steps: the head in the released layout optimum-intel reads (pure: this module), then
exported to IR in the interpreter that has optimum-intel (conversion/openvino_export.py), inside the staging folder,
and the IR's rt_info given what GenAI reads from it: `eagle3_mode` and `hidden_layers_list`, written through the taps
table. GenAI counts a tap as the OUTPUT of layer i (its default `{2, N/2, N-3}` is the EAGLE reference's list of
INPUTS, one layer too deep), so the IR states the head's own layers, never GenAI's guess."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from ..kinds import EAGLE3, LAYER
from ..rope.types import rope_type_of
from ..spec import DraftSpec
from ..taps.conventions import CONVENTIONS
from .base import Layout, OutputContext, base_inner_config, rename_prefix, written_aux_ids
from .plain_eagle3 import plain_eagle3_reasons, tapped
from .registry import register
from .vllm import eagle3_output_roles

ARCHITECTURE = "LlamaForCausalLMEagle3"  # what optimum-intel 2.2.0 exports as an EAGLE-3 draft (exporters/__main__)
IR_FILES = ("openvino_model.xml", "openvino_model.bin")
# --dtype -> optimum-cli --weight-format (IR has no bfloat16 weights: fp16 is the nearest, said in the plan)
WEIGHT_FORMATS = {"float32": "fp32", "float16": "fp16", "bfloat16": "fp16"}
EXPORTED_NAMES = ("fc.weight", "norm.weight", "lm_head.weight", "embed_tokens.weight", "d2t", "t2d")


@dataclass(frozen=True)
class IrExport:
    """What the export step does with the head written in the staging folder: optimum-cli's --weight-format, and the
    rt_info keys GenAI reads, set on the IR afterwards."""

    weight_format: str
    rt_info: dict
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"weight_format": self.weight_format, "rt_info": dict(self.rt_info)}


@register
class OpenVino(Layout):
    name = "openvino"
    summary = ("OpenVINO GenAI IR folder (optimum-intel export of `LlamaForCausalLMEagle3`, rt_info "
               "`hidden_layers_list` = the head's layers in GenAI's count)")
    engine = "OpenVINO GenAI (2026.4, `draft_model`)"
    served_by = ("openvino",)
    output_order = 45
    kinds = (EAGLE3,)
    readable = False

    def refusal(self, spec: DraftSpec, canonical: frozenset[str]) -> str | None:
        return super().refusal(spec, canonical) or genai_inexpressible(spec)

    def output_config(self, spec: DraftSpec, ctx: OutputContext) -> dict:
        """The config optimum-intel reads to build its EAGLE-3 model (the released layout's architecture name)."""
        return base_inner_config(spec, ctx, architecture=ARCHITECTURE, model_type="llama")

    def output_names(self, spec: DraftSpec, canonical: frozenset[str]) -> dict[str, str]:
        """optimum-intel's module names: `midlayer.*` for the layer, and the embedding always (from the target when
        the head has none), so that no weight of the exported model is left at its random initialisation."""
        roles = eagle3_output_roles(spec, canonical) | {"embed_tokens.weight"}
        return {rename_prefix(n, LAYER, "midlayer."): n for n in sorted(roles)
                if n.startswith(LAYER) or n in EXPORTED_NAMES}

    def ir_export(self, spec: DraftSpec, ctx: OutputContext) -> IrExport:
        taps = CONVENTIONS["openvino"]
        notes = () if ctx.dtype_name != "bfloat16" else (
            "OpenVINO IR holds no bfloat16 weights: the head is exported with --weight-format fp16",)
        return IrExport(WEIGHT_FORMATS[ctx.dtype_name],
                        {"eagle3_mode": "True", taps.key: taps.to_stored(written_aux_ids(spec))}, notes)

    def serve_command(self, spec: DraftSpec, ctx: OutputContext) -> str:
        target = shlex.quote(ctx.target_label)
        return (f"optimum-cli export openvino -m {target} --task text-generation-with-past TARGET_IR  # the target, "
                f"once\npython -c 'import openvino_genai as g; pipe = g.LLMPipeline(\"TARGET_IR\", \"CPU\", "
                f"draft_model=g.draft_model({json.dumps(ctx.out_label)}, \"CPU\")); "
                f"cfg = g.GenerationConfig(max_new_tokens=64, num_assistant_tokens={ctx.num_speculative_tokens}); "
                f"print(pipe.generate(\"PROMPT\", cfg))'")


def genai_inexpressible(spec: DraftSpec) -> str | None:
    """Why OpenVINO GenAI 2026.4 cannot run this EAGLE-3 head (optimum-intel's LlamaEagle3Model and GenAI's
    eagle3_model_transforms: one midlayer, norm after the residual, fc over exactly three taps, a Llama layer)."""
    aux = tapped(spec)
    reasons = [
        (spec.norm_before_residual, "GenAI's EAGLE-3 layer adds the residual before its norm; this head sets "
                                    "norm_before_residual"),
        (spec.norm_before_fc, "GenAI's EAGLE-3 has no norm before fc (norm_before_fc)"),
        (spec.fc_norm, "GenAI's EAGLE-3 has no per-aux-state norms (`fc_norm.{i}`, EAGLE 3.1)"),
        (spec.norm_output, "GenAI's EAGLE-3 feeds back the pre-norm state; this head sets norm_output (EAGLE 3.1)"),
        *plain_eagle3_reasons(spec, "GenAI", "hidden_layers_list"),
        (rope_type_of(spec.rope_scaling) not in ("default", "llama3", "linear", "dynamic", "yarn"),
         f"optimum-intel's EAGLE-3 RoPE has no {rope_type_of(spec.rope_scaling)} scaling"),
        (aux == 3 and min(spec.aux_layer_ids) < 1,
         f"GenAI counts a tap as the output of a layer, so it has no id for the embedding output this head taps "
         f"(layers {list(spec.aux_layer_ids)}, the input of layer 0 would be -1)"),
    ]
    return next((why for refused, why in reasons if refused), None)
