"""An MTP head for SGLang (families with a NextN architecture: DeepSeek-V3, GLM-4-MoE): the layout SGLang's
`scripts/export_deepseek_nextn.py` writes: the one MTP layer renumbered to 0, `num_hidden_layers: 1`, the `...NextN`
architecture, embedding and head copies dropped (SGLang shares the target's), one `nextn_layer_parameters.safetensors`
and an index of just its weight_map; optionally FP8 -> BF16 (SGLang builds the draft with a quantization of its
own)."""

from __future__ import annotations

import json
import shlex

from ..kinds import KINDS, MTP
from .extracted import ExtractedLayout
from .registry import register

NEXTN_FILE = "nextn_layer_parameters.safetensors"


@register
class MtpSglang(ExtractedLayout):
    name = "mtp-sglang"  # eagle_convert.json's "layout"
    to = "sglang"
    summary = "SGLang's NextN layout: one layer renumbered to 0, the ...NextN architecture"
    engine = "SGLang (EAGLE algorithm over a NextN model)"
    output_order = 20
    renames = ((r"model\.layers\.{trunk}\.(.*)", r"model.layers.0.\1"),)  # the MTP layer is layer 0 of a NextN model
    single_file = NEXTN_FILE
    dequantize_to = "bfloat16"

    def extraction_refusal(self, layers, dequantize: bool) -> tuple[str, str] | None:
        family = layers.family
        if family.nextn_architecture is None:
            return (f"The sglang layout (SGLang's NextN export) exists for DeepSeek-V3 and GLM-4-MoE targets, not "
                    f"{family.title}.", "Use --to vllm, or serve the target's MTP layer in SGLang directly (it "
                    "loads MTP layers from the target itself).")
        if layers.count != 1:
            return (f"The sglang layout holds exactly one NextN layer; this target has {layers.count} "
                    f"({layers.count_key}: {layers.count}). SGLang asserts a single NextN layer.",
                    "Use --to vllm, which keeps every MTP layer.")
        if dequantize and not layers.quantized:
            return ("--dequantize was given but the target's MTP layer is not quantized: nothing to dequantize.",
                    "Drop --dequantize.")
        return None

    def dropped_sources(self, layers, dequantize: bool) -> dict[str, str]:
        copies = {name: "an embedding / LM head copy: SGLang's NextN draft shares the target's"
                  for name in layers.copies}
        scales = sorted(set(layers.scales.values())) if dequantize else []
        return {**copies, **{name: "--dequantize: the block scale is folded into its weight" for name in scales}}

    def extracted_config(self, config: dict, layers, dequantize: bool) -> bytes:
        cfg = {**config, "num_hidden_layers": 1, "architectures": [layers.family.nextn_architecture]}
        if dequantize:
            cfg.pop("quantization_config", None)
            cfg["torch_dtype"] = self.dequantize_to
        return json.dumps(cfg, indent=2, ensure_ascii=False, sort_keys=True).encode()

    def extracted_serve_command(self, target: str, out: str, num_speculative_tokens: int, dequantize: bool) -> str:
        return sglang_serve(target, out, dequantize)


def sglang_serve(target: str, out: str, dequantized: bool) -> str:
    """SGLang's command for a NextN folder: its EAGLE algorithm with one step (how SGLang runs NextN drafts);
    a dequantized folder is built without the target's quantization."""
    return (f"python -m sglang.launch_server --model-path {shlex.quote(target)} "
            f"--speculative-algorithm {KINDS[MTP].sglang_algorithm} "
            f"--speculative-draft-model-path {shlex.quote(out)} --speculative-num-steps 1 "
            "--speculative-eagle-topk 1 --speculative-num-draft-tokens 2"
            + (" --speculative-draft-model-quantization unquant" if dequantized else ""))
