"""What an MTP extraction writes, per output layout, before any tensor byte is read:

- `vllm`: the target's config.json byte for byte, every MTP tensor under its original name and layer index in the
  target's own dtype and quantization. vLLM builds the MTP module from the target's config and quantization and
  only reads the weights from the draft folder, so nothing may be renamed or dequantized.
- `sglang` (families with a NextN architecture: DeepSeek-V3, GLM-4-MoE): the layout SGLang's
  `scripts/export_deepseek_nextn.py` writes: the one MTP layer renumbered to 0, `num_hidden_layers: 1`, the
  `...NextN` architecture, embedding and head copies dropped (SGLang shares the target's), one
  `nextn_layer_parameters.safetensors` and an index of just its weight_map; optionally FP8 -> BF16 (SGLang builds
  the draft with a quantization of its own)."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

import torch

from ..errors import UnsupportedConversionError
from ..targets.quant import FP8_HOW
from .locate import MtpLayers

# The layouts an MTP head is written in (`convert --mtp --to`), with what each is: MTP heads have their own two,
# not the EAGLE layout registry's (an MTP layer keeps the target's config and names, or SGLang's NextN renumbering).
LAYOUTS = {
    "vllm": "the target's config, the layers under their original names and index (vLLM method 'mtp')",
    "sglang": "SGLang's NextN layout: one layer renumbered to 0, the ...NextN architecture",
}
NEXTN_FILE = "nextn_layer_parameters.safetensors"
DEQUANT_DTYPE = torch.bfloat16


@dataclass(frozen=True)
class MtpTensor:
    """One output tensor: its name, its source (and FP8 scale when dequantized), dtype and shape."""
    name: str
    source: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    scale: str | None = None  # dequantized: codes x this block scale

    def how(self) -> str:
        if self.scale:
            return f"{FP8_HOW} x {self.scale} (block) -> {str(self.dtype).removeprefix('torch.')}"
        return "copy" if self.name == self.source else f"copy, renamed from {self.source}"


@dataclass
class MtpPlan:
    layout: str
    tensors: list[MtpTensor]
    config: bytes  # config.json as written
    single_file: str | None  # sglang: one named file, and an index of its weight_map only
    serve_command: str
    dropped: list[str]  # source tensors not written (sglang: embedding / head copies, dequantized scales)
    bytes_to_read: int = 0  # tensor bytes read from the target: the sources of what is written, nothing else

    def to_dict(self) -> dict:
        return {"layout": self.layout, "serve_command": self.serve_command, "dropped": self.dropped,
                "tensors": [{"name": t.name, "source": t.source, "dtype": str(t.dtype).removeprefix("torch."),
                             "shape": list(t.shape), "how": t.how()} for t in self.tensors],
                "bytes_to_read": self.bytes_to_read}


def _read(layers: MtpLayers, tensors: list[MtpTensor]) -> int:
    sources = {t.source for t in tensors} | {t.scale for t in tensors if t.scale}
    return sum(layers.refs[n].nbytes for n in sources)


def _refuse(message: str, hint: str) -> UnsupportedConversionError:
    return UnsupportedConversionError(message, hint)


def plan_vllm(layers: MtpLayers, raw_config: bytes, dequantize: bool, target: str, out: str, k: int = 1) -> MtpPlan:
    if dequantize:
        raise _refuse(
            "--dequantize does not apply to the vllm layout: vLLM builds the MTP layer with the target's own "
            "quantization and reads only its weights from the draft folder, so a dequantized layer would not load "
            "(or would load wrong)." if layers.quantized else
            "--dequantize was given but the target's MTP layers are not quantized: there is nothing to dequantize.",
            "Drop --dequantize: the vllm layout keeps the target's quantization as it is (use --to sglang "
            "--dequantize for a BF16 NextN draft SGLang loads with a quantization of its own).")
    tensors = [MtpTensor(n, n, r.dtype, r.shape) for n, r in layers.refs.items()]
    return MtpPlan("vllm", tensors, raw_config, None, vllm_serve(target, out, k), [], _read(layers, tensors))


def vllm_speculative_config(out: str, k: int = 1) -> dict:
    """vLLM's speculative config for an extracted MTP folder: method 'mtp', the folder as its model."""
    return {"method": "mtp", "model": out, "num_speculative_tokens": k}


def vllm_serve(target: str, out: str, k: int = 1) -> str:
    spec = json.dumps(vllm_speculative_config(out, k), separators=(",", ":"))
    return f"vllm serve {shlex.quote(target)} --speculative-config {shlex.quote(spec)}"


def sglang_serve(target: str, out: str, dequantized: bool) -> str:
    """SGLang's command for a NextN folder: its EAGLE algorithm with one step (how SGLang runs NextN drafts);
    a dequantized folder is built without the target's quantization."""
    return (f"python -m sglang.launch_server --model-path {shlex.quote(target)} --speculative-algorithm EAGLE "
            f"--speculative-draft-model-path {shlex.quote(out)} --speculative-num-steps 1 "
            "--speculative-eagle-topk 1 --speculative-num-draft-tokens 2"
            + (" --speculative-draft-model-quantization unquant" if dequantized else ""))


def plan_sglang(layers: MtpLayers, config: dict, dequantize: bool, target: str, out: str) -> MtpPlan:
    family = layers.family
    if family.nextn_architecture is None:
        raise _refuse(f"The sglang layout (SGLang's NextN export) exists for DeepSeek-V3 and GLM-4-MoE targets, not "
                      f"{family.title}.", "Use --to vllm, or serve the target's MTP layer in SGLang directly (it "
                      "loads MTP layers from the target itself).")
    if layers.count != 1:
        raise _refuse(f"The sglang layout holds exactly one NextN layer; this target has {layers.count} "
                      f"({layers.count_key}: {layers.count}). SGLang asserts a single NextN layer.",
                      "Use --to vllm, which keeps every MTP layer.")
    if dequantize and not layers.quantized:
        raise _refuse("--dequantize was given but the target's MTP layer is not quantized: nothing to dequantize.",
                      "Drop --dequantize.")
    old, new = f"model.layers.{layers.trunk_layers}.", "model.layers.0."
    scales = set(layers.scales.values()) if dequantize else set()
    tensors, dropped = [], list(layers.copies) + sorted(scales)
    for name, ref in layers.refs.items():
        if name in layers.copies or name in scales:
            continue
        renamed = new + name[len(old):]
        if dequantize and name in layers.scales:
            tensors.append(MtpTensor(renamed, name, DEQUANT_DTYPE, ref.shape, layers.scales[name]))
        else:
            tensors.append(MtpTensor(renamed, name, ref.dtype, ref.shape))
    cfg = {**config, "num_hidden_layers": 1, "architectures": [family.nextn_architecture]}
    if dequantize:
        cfg.pop("quantization_config", None)
        cfg["torch_dtype"] = "bfloat16"
    raw = json.dumps(cfg, indent=2, ensure_ascii=False, sort_keys=True).encode()
    return MtpPlan("sglang", tensors, raw, NEXTN_FILE, sglang_serve(target, out, dequantize), dropped,
                   _read(layers, tensors))
