"""An MTP head for vLLM (method 'mtp'): the target's config.json byte for byte and every MTP tensor under its
original name and layer index, in the target's own dtype and quantization. vLLM builds the MTP module from the
target's config and quantization and only reads the weights from the draft folder, so nothing may be renamed or
dequantized."""

from __future__ import annotations

import json
import shlex

from .extracted import ExtractedLayout
from .registry import register


@register
class MtpVllm(ExtractedLayout):
    name = "mtp-vllm"  # eagle_convert.json's "layout"
    to = "vllm"
    summary = "the target's config, the layers under their original names and index (vLLM method 'mtp')"
    engine = "vLLM (method 'mtp')"
    output_order = 10
    renames = ()  # every name kept: vLLM finds the layers by their index in the target
    config_as_is = True  # vLLM builds the layer from the target's config: written byte for byte

    def extraction_refusal(self, layers, dequantize: bool) -> tuple[str, str] | None:
        if not dequantize:
            return None
        return ("--dequantize does not apply to the vllm layout: vLLM builds the MTP layer with the target's own "
                "quantization and reads only its weights from the draft folder, so a dequantized layer would not "
                "load (or would load wrong)." if layers.quantized else
                "--dequantize was given but the target's MTP layers are not quantized: there is nothing to "
                "dequantize.",
                "Drop --dequantize: the vllm layout keeps the target's quantization as it is (use --to sglang "
                "--dequantize for a BF16 NextN draft SGLang loads with a quantization of its own).")

    def extracted_serve_command(self, target: str, out: str, num_speculative_tokens: int, dequantize: bool) -> str:
        return vllm_serve(target, out, num_speculative_tokens)


def vllm_speculative_config(out: str, k: int = 1) -> dict:
    """vLLM's speculative config for an extracted MTP folder: method 'mtp', the folder as its model."""
    return {"method": "mtp", "model": out, "num_speculative_tokens": k}


def vllm_serve(target: str, out: str, k: int = 1) -> str:
    spec = json.dumps(vllm_speculative_config(out, k), separators=(",", ":"))
    return f"vllm serve {shlex.quote(target)} --speculative-config {shlex.quote(spec)}"
