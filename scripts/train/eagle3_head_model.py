"""The EAGLE-3 draft head as the trainer runs it (train_eagle3_head.py), its reduced draft vocabulary and its
save in the released SafeAILab layout. The forward is the one our runner (src/eagle_convert/runner/heads.py) and
vLLM's llama_eagle3 run: g = fc([h_low ; h_mid ; h_high]) for target rows, the previous step's pre-norm output for
fed-back rows; u = g + Attn([RMS_in(E(t)) ; RMS_hidden(g)]); o = u + MLP(RMS_post(u)); logits = lm_head(RMS(o))
over the draft vocab."""

from __future__ import annotations

import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from eagle_train_loop import apply_rope, rms, rope_cos_sin, rope_inv_freq, unrolled_attention


def draft_vocab(counts: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The `size` most frequent label tokens, as SafeAILab builds it: draft ids in ascending target-id order.
    Returns (draft_to_target ids [size], d2t offsets [size] int64 = target id - draft id, t2d [V] bool)."""
    ids = counts.argsort(descending=True, stable=True)[:size].sort().values
    t2d = torch.zeros(len(counts), dtype=torch.bool)
    t2d[ids] = True
    return ids, ids - torch.arange(size), t2d


def coverage(counts: torch.Tensor, ids: torch.Tensor) -> float:
    """Share of the counted tokens that the draft vocab `ids` contains."""
    return float(counts[ids].sum() / max(int(counts.sum()), 1))


class Eagle3Head(nn.Module):
    def __init__(self, H, nh, nkv, hd, inter, eps, theta, n_aux, embed, draft_ids):
        super().__init__()
        self.H, self.nh, self.nkv, self.hd, self.eps = H, nh, nkv, hd, eps
        self.fc = nn.Linear(n_aux * H, H, bias=False)
        self.input_norm = nn.Parameter(torch.ones(H))
        self.hidden_norm = nn.Parameter(torch.ones(H))
        self.q_proj = nn.Linear(2 * H, nh * hd, bias=False)
        self.k_proj = nn.Linear(2 * H, nkv * hd, bias=False)
        self.v_proj = nn.Linear(2 * H, nkv * hd, bias=False)
        self.o_proj = nn.Linear(nh * hd, H, bias=False)
        self.post_norm = nn.Parameter(torch.ones(H))
        self.gate_proj = nn.Linear(H, inter, bias=False)
        self.up_proj = nn.Linear(H, inter, bias=False)
        self.down_proj = nn.Linear(inter, H, bias=False)
        self.norm = nn.Parameter(torch.ones(H))
        self.lm_head = nn.Linear(H, len(draft_ids), bias=False)
        self.register_buffer("embed", embed, persistent=False)
        self.register_buffer("draft_ids", draft_ids, persistent=False)  # draft id -> target id
        self.inv_freq = rope_inv_freq(theta, hd)

    def unrolled(self, tokens_next, aux, steps: int):
        """tokens_next [B, T] (row p: token p+1), aux [B, T, n_aux*H] (row p: the target's aux states at p).
        Returns the pre-norm outputs o per step, [B, T, H] each: step s row p predicts token p+2 as the s-th draft of
        the chain started at row p - s (rows p < s have no chain; the caller masks them)."""
        B, T, _ = aux.shape
        cos, sin = rope_cos_sin(self.inv_freq, T)
        emb_normed = rms(F.embedding(tokens_next, self.embed), self.input_norm, self.eps)
        rep = self.nh // self.nkv
        outs, ks, vs = [], [], []
        g = self.fc(aux)
        for _ in range(steps):
            g_normed = rms(g, self.hidden_norm, self.eps)
            x = torch.cat([emb_normed, g_normed], -1)
            q = apply_rope(self.q_proj(x).view(B, T, self.nh, self.hd).transpose(1, 2), cos, sin)
            ks.append(apply_rope(self.k_proj(x).view(B, T, self.nkv, self.hd).transpose(1, 2), cos, sin))
            vs.append(self.v_proj(x).view(B, T, self.nkv, self.hd).transpose(1, 2))
            a = unrolled_attention(q, ks, vs, rep)
            u = g + self.o_proj(a.transpose(1, 2).reshape(B, T, -1))
            un = rms(u, self.post_norm, self.eps)
            o = u + self.down_proj(F.silu(self.gate_proj(un)) * self.up_proj(un))
            outs.append(o)
            g = F.pad(o, (0, 0, 1, 0))[:, :T]  # the next step's row p feeds back row p - 1's output
        return outs

    def logits(self, o):
        return self.lm_head(rms(o, self.norm, self.eps))

    def state_dict_safeailab(self) -> dict:
        m = "midlayer."
        d = {"fc.weight": self.fc.weight, m + "input_layernorm.weight": self.input_norm,
             m + "hidden_norm.weight": self.hidden_norm, m + "post_attention_layernorm.weight": self.post_norm,
             "norm.weight": self.norm, "lm_head.weight": self.lm_head.weight}
        for n in ("q", "k", "v", "o"):
            d[f"{m}self_attn.{n}_proj.weight"] = getattr(self, f"{n}_proj").weight
        for n in ("gate", "up", "down"):
            d[f"{m}mlp.{n}_proj.weight"] = getattr(self, f"{n}_proj").weight
        out = {k: v.detach().float().contiguous().clone() for k, v in d.items()}
        vocab = self.embed.shape[0]
        out["d2t"] = (self.draft_ids - torch.arange(len(self.draft_ids))).to(torch.int64)
        t2d = torch.zeros(vocab, dtype=torch.bool)
        t2d[self.draft_ids] = True
        out["t2d"] = t2d
        return out

    def load_safeailab(self, sd: dict):
        own = self.state_dict_safeailab()
        with torch.no_grad():
            params = dict(zip(own, [self.fc.weight, self.input_norm, self.hidden_norm, self.post_norm, self.norm,
                                    self.lm_head.weight] + [getattr(self, f"{n}_proj").weight for n in
                                                            ("q", "k", "v", "o", "gate", "up", "down")]))
            for name, p in params.items():
                p.copy_(sd[name])
            self.draft_ids.copy_(torch.arange(len(sd["d2t"])) + sd["d2t"])


def save_safeailab_eagle3(head: Eagle3Head, target_cfg: dict, theta: float, aux_layers, out: str, extra: dict):
    """pytorch_model.bin (flat fp32 dict + int64 d2t + bool t2d, no embedding: engines share the target's) and the
    release's config.json, with the aux layer ids stated explicitly (vLLM and our runner read them)."""
    os.makedirs(out, exist_ok=True)
    cfg = target_cfg
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": cfg["hidden_size"],
        "intermediate_size": cfg["intermediate_size"],
        "num_attention_heads": cfg["num_attention_heads"],
        "num_key_value_heads": cfg.get("num_key_value_heads") or cfg["num_attention_heads"],
        "head_dim": head.hd,
        "num_hidden_layers": 1,
        "max_position_embeddings": 2048,
        "rms_norm_eps": cfg.get("rms_norm_eps", 1e-6),
        "rope_theta": theta,
        "vocab_size": cfg["vocab_size"],
        "draft_vocab_size": int(head.lm_head.weight.shape[0]),
        "target_hidden_size": cfg["hidden_size"],
        "eagle_aux_hidden_state_layer_ids": list(aux_layers),
        "hidden_act": "silu",
        "bos_token_id": cfg.get("bos_token_id"),
        "eos_token_id": cfg.get("eos_token_id"),
        "pad_token_id": cfg.get("pad_token_id"),
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
    }
    tmp = out + "/pytorch_model.bin.tmp"
    torch.save(head.state_dict_safeailab(), tmp)
    os.replace(tmp, out + "/pytorch_model.bin")
    json.dump(config, open(out + "/config.json", "w"), indent=2)
    json.dump(extra, open(out + "/training_log.json", "w"), indent=2)
