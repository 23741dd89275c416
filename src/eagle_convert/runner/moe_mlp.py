"""Mixture-of-experts MLPs for the target model (qwen3_moe, mixtral): a softmax router picks the top-k experts per
token, each a SwiGLU MLP, mixed by the renormalised router weights, in transformers' order of operations (router in
float32, experts over the tokens routed to them, summed with index_add) so that fp32 logits agree as the dense
families' do.

Expert weights are read in either saved form: one tensor per expert (the Hub's checkpoints, transformers'
`save_original_format`) or transformers 5's stacked `experts.gate_up_proj` [E, 2I, H] / `experts.down_proj` [E, H, I].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

# model_type -> (block prefix under the layer, per-expert names of gate / up / down)
EXPERT_NAMES = {
    "qwen3_moe": ("mlp.", ("gate_proj", "up_proj", "down_proj")),
    "mixtral": ("block_sparse_moe.", ("w1", "w3", "w2")),
}


@dataclass
class MoeMlp:
    router: torch.Tensor  # [E, H]
    gate_up: torch.Tensor  # [E, 2I, H]: gate rows then up rows, as transformers stacks them
    down: torch.Tensor  # [E, H, I]
    top_k: int
    renormalize: bool  # mixtral always; qwen3_moe when norm_topk_prob

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        probs = F.softmax(F.linear(flat, self.router), dim=-1, dtype=torch.float)
        weights, experts = torch.topk(probs, self.top_k, dim=-1)
        if self.renormalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        weights = weights.to(flat.dtype)
        out = torch.zeros_like(flat)
        for e in torch.unique(experts).tolist():
            tokens, slot = torch.where(experts == e)
            gate, up = F.linear(flat[tokens], self.gate_up[e]).chunk(2, dim=-1)
            y = F.linear(F.silu(gate) * up, self.down[e]) * weights[tokens, slot, None]
            out.index_add_(0, tokens, y)
        return out.reshape(shape)


def num_experts(config: dict) -> int:
    # qwen3_moe's Hub configs say num_experts; transformers 5 writes its attribute_map target, num_local_experts.
    return int(config.get("num_experts") or config.get("num_local_experts") or 0)


def is_moe_layer(model_type: str, config: dict, index: int) -> bool:
    """Whether decoder layer `index` has experts (qwen3_moe may keep dense MLPs in some layers)."""
    if model_type == "mixtral":
        return True
    step = config.get("decoder_sparse_step", 1) or 1
    return (index not in (config.get("mlp_only_layers") or ()) and num_experts(config) > 0
            and (index + 1) % step == 0)


def load_moe(get, prefix: str, model_type: str, config: dict) -> MoeMlp:
    """The MoE block of the layer at `prefix`; `get` casts to the model's dtype and device."""
    block, (g, u, d) = EXPERT_NAMES[model_type]
    p = prefix + block
    experts = num_experts(config)
    try:  # transformers 5's stacked form
        gate_up, down = get(p + "experts.gate_up_proj"), get(p + "experts.down_proj")
    except KeyError:  # (MissingTensorError is one) one tensor per expert (the Hub's form)
        gate_up = torch.stack([torch.cat([get(f"{p}experts.{e}.{g}.weight"), get(f"{p}experts.{e}.{u}.weight")])
                               for e in range(experts)])
        down = torch.stack([get(f"{p}experts.{e}.{d}.weight") for e in range(experts)])
    return MoeMlp(router=get(p + "gate.weight"), gate_up=gate_up, down=down, top_k=config["num_experts_per_tok"],
                  renormalize=model_type == "mixtral" or bool(config.get("norm_topk_prob", False)))
