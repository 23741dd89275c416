"""The plan of `convert --mtp TARGET`: the MTP layers a target holds (mtp/locate.py), written in an extracted
layout (layouts/mtp_vllm.py, layouts/mtp_sglang.py: names, config, refusals) as the same `Plan` an EAGLE conversion
makes, so that one executor (execute.py) writes both. Every tensor is the target's own, copied as stored, or, with
--dequantize, its FP8 codes times its block scale."""

from __future__ import annotations

import json

from ..checkpoint.open import InputRef
from ..errors import UnsupportedConversionError
from ..layouts.extracted import ExtractedLayout
from ..mtp.locate import MtpLayers
from ..targets.quant import StoredWeight
from ..targets.target_info import DTYPE_NAMES
from .plan import DEQUANT, Plan, PlannedTensor, Source

# Files beside the weights that a served folder keeps: tokenizer, generation config, and the remote code a
# config's auto_map names (top-level *.py).
COPIED = ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
          "vocab.json", "merges.txt", "tokenizer.model", "added_tokens.json", "chat_template.jinja")
AS_STORED = "as stored"  # the plan's dtype when every tensor keeps the target's own (quantization included)


def plan_mtp(target: InputRef, layers: MtpLayers, layout: ExtractedLayout, *, dequantize: bool, out_label: str,
             num_speculative_tokens: int) -> Plan:
    """What `layout` writes of `layers`, before any tensor byte is read (a refusal names what does not fit)."""
    refusal = layout.extraction_refusal(layers, dequantize)
    if refusal:
        raise UnsupportedConversionError(*refusal)
    dropped = layout.dropped_sources(layers, dequantize)
    tensors = tuple(_planned(layout, layers, name, dequantize) for name in layers.refs if name not in dropped)
    source = target.checkpoint.source
    config = bytes(source.read_range("config.json", 0, source.size("config.json"))) if layout.config_as_is else \
        layout.extracted_config(target.checkpoint.config, layers, dequantize)
    return Plan(layout=layout.name, spec=None, config=json.loads(config), tensors=tensors,
                dropped=tuple(dropped.items()), notes=tuple(target.notes) + tuple(layers.notes),
                serve_command=layout.extracted_serve_command(target.serve_name, out_label, num_speculative_tokens,
                                                             dequantize),
                dtype_name=layout.dequantize_to if dequantize else AS_STORED, config_bytes=config,
                single_file=layout.single_file, side_files=side_files(source), record={"mtp": layers.to_dict()},
                model_card=False)


def _planned(layout: ExtractedLayout, layers: MtpLayers, name: str, dequantize: bool) -> PlannedTensor:
    ref = layers.refs[name]
    out_name = layout.output_name(name, layers.trunk_layers)
    if not (dequantize and name in layers.scales):
        return PlannedTensor(out_name, name, "target", (Source("target", ref),), ref.dtype, ref.shape)
    scale = layers.refs[layers.scales[name]]
    stored = StoredWeight(ref, scale, f"block {layers.block[0]}x{layers.block[1]}", layers.block)
    return PlannedTensor(out_name, name, "target", (Source("target", ref), Source("target", scale)),
                         DTYPE_NAMES[layout.dequantize_to], ref.shape, derive=DEQUANT, dequant=stored)


def side_files(source) -> tuple[str, ...]:
    """The target's top-level files a served folder keeps beside the weights (COPIED, remote code)."""
    return tuple(rel for rel in source.files() if "/" not in rel and (rel in COPIED or rel.endswith(".py")))
