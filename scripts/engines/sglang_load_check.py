"""Load an EAGLE draft through SGLang 0.5.23's own loader and check every parameter against the checkpoint.

Run with the SGLang environment's python (`make sglang-env`):
`python scripts/engines/sglang_load_check.py DIR [DIR ...]`.
For each DIR (a `--to sglang` output): SGLang's ModelConfig reads config.json, its ModelRegistry picks the class
(LlamaForCausalLMEagle / LlamaForCausalLMEagle3), the model is built at TP=1 over gloo, every parameter is filled
with NaN, and SGLang's safetensors iterator + `load_weights` fill them. Then, independently of SGLang's own mapping:
every parameter must equal the checkpoint tensor it comes from (q/k/v stacked into qkv_proj, gate/up into
gate_up_proj), and every checkpoint tensor must land on a parameter (SGLang drops unknown names silently). The only
parameters allowed to stay unloaded are those SGLang's server replaces with the target's or its forward never reads
(`not_from_checkpoint`, each with the line that says so). Prints one JSON line per DIR: {"dir", "architecture",
"class", "checked", "problems", "not_from_checkpoint"}. Exit 0 when no DIR has a problem, 1 otherwise."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

os.environ.setdefault("SGLANG_ENABLE_TORCH_COMPILE", "0")

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

STACKED = {"q_proj": ("qkv_proj", 0), "k_proj": ("qkv_proj", 1), "v_proj": ("qkv_proj", 2),
           "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1)}
# SGLang's legacy names (llama_eagle3.py load_weights): midlayer -> layers.0, aux_norm_* -> fc_norm.*
LEGACY = {"midlayer.": "layers.0.", "aux_norm_low.": "fc_norm.0.", "aux_norm_mid.": "fc_norm.1.",
          "aux_norm_high.": "fc_norm.2."}


def init_sglang():
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler
    from sglang.test.layer_ut_utils import init_single_process_dist

    set_global_server_args_for_scheduler(ServerArgs(model_path="dummy", tp_size=1, device="cpu"))
    init_single_process_dist(backend="gloo")


def expected_params(ckpt: dict[str, torch.Tensor], eagle3: bool, top: str = "model.") -> tuple[dict[str, list],
                                                                                                list[str]]:
    """SGLang param name -> [(shard index or None, tensor)], written from SGLang's documented layout, not its code.
    `top`: the prefix of the draft's own modules ("" for DFlash, whose modules sit at the top: models/dflash.py)."""
    expected: dict[str, list] = {}
    unplaced = []
    for name, tensor in ckpt.items():
        if name in ("d2t", "t2d"):
            continue
        canonical = name
        for old, new in LEGACY.items():
            canonical = canonical.replace(old, new)
        if "lm_head" in canonical:
            param = canonical if eagle3 else None
        else:
            param = top + canonical
        if param is None:
            unplaced.append(name)
            continue
        shard = None
        for part, (stacked, index) in STACKED.items():
            if f".{part}." in param:
                param, shard = param.replace(f".{part}.", f".{stacked}."), index
        expected.setdefault(param, []).append((shard, tensor))
    return expected, unplaced


def stacked_value(shards: list) -> torch.Tensor:
    """q/k/v rows concatenated in that order, gate/up likewise (TP=1)."""
    return torch.cat([t for _, t in sorted(shards, key=lambda s: s[0])], dim=0)


def not_from_checkpoint(config: dict, params: dict, ckpt: dict, eagle3: bool) -> dict[str, str]:
    """SGLang parameters that may stay unloaded, and why (SGLang 0.5.23 source)."""
    allowed = {}
    if not eagle3:
        allowed["lm_head.weight"] = "the server shares the target's LM head (eagle_worker_v2.py:378 set_embed_and_head)"
    elif ("embed_tokens.weight" not in ckpt
          and config.get("target_hidden_size", config["hidden_size"]) == config["hidden_size"]):
        allowed["model.embed_tokens.weight"] = (
            "the server shares the target's embedding (eagle_worker_v2.py:363 set_embed)")
    for name in params:
        m = re.fullmatch(r"model\.layers\.([1-9]\d*)\.input_layernorm\.weight", name)
        if eagle3 and m:
            allowed[name] = "built by LlamaDecoderLayer, never read after layer 0 (llama_eagle3.py:97-105 hidden_norm)"
        if params[name].numel() == 0:
            allowed[name] = "zero-sized (fc over no aux states: use_aux_hidden_state false)"
    return allowed


def check(folder: Path) -> dict:
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_loader.loader import DefaultModelLoader, _initialize_model

    config = json.loads((folder / "config.json").read_text())
    arch = config["architectures"][0]
    eagle3, dflash = arch.endswith("Eagle3"), arch == "DFlashDraftModel"
    algorithm = "DFLASH" if dflash else "EAGLE3" if eagle3 else "EAGLE"
    mc = ModelConfig(model_path=str(folder), is_draft_model=True, dtype="float32", speculative_algorithm=algorithm)
    load_config = LoadConfig(load_format="auto")
    with torch.device("cpu"):
        model = _initialize_model(mc, load_config)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for p in params.values():
            p.fill_(float("nan"))
    loader = DefaultModelLoader(load_config)
    DefaultModelLoader.load_weights_and_postprocess(model, loader._get_all_weights(mc, model), torch.device("cpu"))

    ckpt = {}
    for file in sorted(folder.glob("*.safetensors")):
        ckpt.update(load_file(file))
    expected, unplaced = expected_params(ckpt, eagle3, top="" if dflash else "model.")
    problems = [f"checkpoint tensor {n} has no place in SGLang's {arch} (dropped silently)" for n in unplaced]
    checked = 0
    for name, shards in expected.items():
        if name not in params:
            problems.append(f"checkpoint tensor(s) for {name} map to no SGLang parameter (dropped silently)")
            continue
        value = shards[0][1] if shards[0][0] is None else stacked_value(shards)
        got = params[name].detach()
        if tuple(got.shape) != tuple(value.shape):
            problems.append(f"{name}: SGLang parameter {tuple(got.shape)} vs checkpoint {tuple(value.shape)}")
        elif not torch.equal(got, value.to(got.dtype)):
            problems.append(f"{name}: SGLang's parameter differs from the checkpoint tensor")
        else:
            checked += 1
    allowed = {} if dflash else not_from_checkpoint(config, params, ckpt, eagle3)
    for name, p in params.items():
        if name not in expected and name not in allowed:
            problems.append(f"SGLang parameter {name} {tuple(p.shape)} was not loaded from the checkpoint")
    if eagle3 and "d2t" in ckpt:
        hot = model.get_hot_token_id()
        if hot is None or not torch.equal(hot, ckpt["d2t"] + torch.arange(ckpt["d2t"].shape[0])):
            problems.append("hot_token_id != d2t + arange (the draft-to-target map)")
        else:
            checked += 1
    view = sglang_view(model, mc.hf_config) if eagle3 else dflash_view(model, mc.hf_config) if dflash else None
    return {"dir": str(folder), "architecture": arch, "class": f"{type(model).__module__}.{type(model).__name__}",
            "checked": checked, "problems": problems, "not_from_checkpoint": allowed,
            "sglang_view": view}


def dflash_view(model, hf_config) -> dict:
    """The DFlash head as SGLang's server reads it: parse_dflash_draft_config + resolve_target_layer_ids (what
    spec_aux_hidden_state.py does for the target, in layer OUTPUTS), the inputs the target captures for them
    (models/llama.py, qwen3.py set_dflash_layers_to_capture add 1), block size, mask token and fc's input."""
    from sglang.srt.speculative.dflash_utils import parse_dflash_draft_config

    parsed = parse_dflash_draft_config(draft_hf_config=hf_config)
    ids = parsed.resolve_target_layer_ids(target_num_layers=int(parsed.num_target_layers),
                                          draft_num_layers=parsed.require_num_layers())
    return {"target_layer_ids": ids, "layers_to_capture": [v + 1 for v in ids],
            "block_size": parsed.resolve_block_size(), "mask_token_id": parsed.mask_token_id,
            "fc_input": model.fc.in_features}


def sglang_view(model, hf_config) -> dict:
    """The variant as SGLang built it: its modules' flags, and the target layers whose inputs it would capture
    (spec_aux_hidden_state.py reads eagle_config; models/llama.py set_eagle3_layers_to_capture adds 1)."""
    inner = model.model
    eagle_config = getattr(hf_config, "eagle_config", None) or {}
    ids = eagle_config.get("eagle_aux_hidden_state_layer_ids")
    return {"norm_before_fc": inner.input_norm is not None, "fc_norm": inner.fc_norm is not None,
            "norm_output": bool(inner.norm_output), "num_aux_hidden_states": inner.num_aux_hidden_states,
            "num_layers": len(inner.layers), "use_aux_hidden_state": eagle_config.get("use_aux_hidden_state", True),
            "layers_to_capture": [v + 1 for v in ids] if ids is not None else None,
            "draft_vocab_size": model.config.draft_vocab_size, "fc_input": inner.fc.in_features}


def run_checks(check_one) -> int:
    """`check_one(folder) -> {"dir", "problems", ...}` for each folder on the command line, one JSON line each (what
    the tests read); SGLang's own loader raising is a finding too. Exit 1 when any folder has a problem."""
    parser = argparse.ArgumentParser()
    parser.add_argument("dirs", nargs="+", type=Path)
    args = parser.parse_args()
    init_sglang()
    failed = False
    for folder in args.dirs:
        try:
            result = check_one(folder)
        except Exception as exc:  # SGLang's own loader raised: that is the finding
            result = {"dir": str(folder), "problems": [f"SGLang raised {type(exc).__name__}: {exc}"]}
        failed |= bool(result["problems"])
        print(json.dumps(result), flush=True)
    return 1 if failed else 0


def main() -> int:
    return run_checks(check)


if __name__ == "__main__":
    sys.exit(main())
