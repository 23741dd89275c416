"""Training helpers shared by the EAGLE-1 and EAGLE-3 trainers: length-bucketed batches, the teacher-forced collate,
the unrolled multi-step attention of the training-time test, the chain metrics of the held-out evaluation, the
learning-rate schedule and the answer-token counts (EAGLE-1's CE vocab, EAGLE-3's draft vocab). Pure tensor code."""

from __future__ import annotations

import math
import random

import torch
import torch.nn.functional as F
from eagle_train_data import Sample


def rope_inv_freq(theta: float, head_dim: int) -> torch.Tensor:
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))


def rope_cos_sin(inv_freq: torch.Tensor, T: int):
    """Llama RoPE tables for positions 0..T-1 (a training row's chain starts at position 0 of its sample)."""
    freqs = torch.arange(T).float()[:, None] * inv_freq
    emb = torch.cat([freqs, freqs], -1)
    return emb.cos(), emb.sin()


def apply_rope(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin


def rms(x, w, eps):
    x32 = x.float()
    return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)



def make_batches(samples: list[Sample], max_tokens: int, max_len: int, rng: random.Random | None):
    """Length-bucketed batches of sample indices (long samples are cut at max_len)."""
    order = sorted(range(len(samples)), key=lambda i: len(samples[i].tokens))
    batches, cur, cur_max = [], [], 0
    for i in order:
        n = min(len(samples[i].tokens), max_len)
        if cur and max(cur_max, n) * (len(cur) + 1) > max_tokens:
            batches.append(cur)
            cur, cur_max = [], 0
        cur.append(i)
        cur_max = max(cur_max, n)
    if cur:
        batches.append(cur)
    if rng is not None:
        rng.shuffle(batches)
    return batches


def collate(samples: list[Sample], idx: list[int], max_len: int, ce_map: torch.Tensor | None):
    """Rows p = 0..T-1: token_next[p] = t_{p+1}, feat[p] = f_p, target[p] = f_{p+1}, label[p] = t_{p+2} (answer
    tokens only, else -1). T = (sequence length - 2)."""
    T = min(max(len(samples[i].tokens) for i in idx), max_len) - 2
    H = samples[idx[0]].features.shape[1]
    B = len(idx)
    tok_next = torch.zeros(B, T, dtype=torch.long)
    feat = torch.zeros(B, T + 1, H)
    label = torch.full((B, T), -1, dtype=torch.long)
    for j, i in enumerate(idx):
        s = samples[i]
        L = min(len(s.tokens), max_len)
        n = L - 2
        tok_next[j, :n] = s.tokens[1:n + 1]
        feat[j, :n + 1] = s.features[:n + 1]
        lab = s.tokens[2:n + 2].clone()
        lab[~s.answer[2:n + 2]] = -1
        label[j, :n] = lab
    return tok_next, feat[:, :T], feat[:, 1:T + 1], label


def answer_label_counts(samples: list[Sample], vocab: int) -> torch.Tensor:
    """How often each token is a training label (a target-produced answer token at row p + 2)."""
    counts = torch.zeros(vocab, dtype=torch.long)
    for s in samples:
        counts += torch.bincount(s.tokens[2:][s.answer[2:]], minlength=vocab)
    return counts


def lr_at(base: float, step: int, warmup_steps: int, frac: float, min_ratio: float) -> float:
    """Linear warmup over steps, then cosine decay to min_ratio x base over the wall-clock fraction `frac`."""
    warm = min(1.0, (step + 1) / warmup_steps)
    return base * warm * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))


def unrolled_attention(q: torch.Tensor, ks: list[torch.Tensor], vs: list[torch.Tensor], rep: int) -> torch.Tensor:
    """Attention of unrolled step s = len(ks) - 1 (q [B, nh, T, hd], ks/vs per step [B, nkv, T, hd]). Row p of step s
    is the s-th draft of the chain started at row p - s: it sees the true-feature (step 0) keys at rows <= p - s and
    the chain's own step-r keys at row p - s + r, exactly the context the chain has at inference."""
    s = len(ks) - 1
    if s == 0:
        return F.scaled_dot_product_attention(q, ks[0], vs[0], is_causal=True, enable_gqa=True)
    T = q.shape[2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril(-s)
    sc0 = (q @ ks[0].repeat_interleave(rep, 1).transpose(-1, -2)) * scale
    sc0 = sc0.masked_fill(~causal[None, None], float("-inf"))
    extra_s, extra_v = [], []
    for r in range(1, s + 1):
        kr, vr = ks[r].repeat_interleave(rep, 1), vs[r].repeat_interleave(rep, 1)
        shift = s - r  # row p pairs with row p - shift of step r
        if shift:
            kr = F.pad(kr, (0, 0, shift, 0))[:, :, :T]
            vr = F.pad(vr, (0, 0, shift, 0))[:, :, :T]
        extra_s.append((q * kr).sum(-1, keepdim=True) * scale)
        extra_v.append(vr)
    probs = torch.nan_to_num(torch.softmax(torch.cat([sc0] + extra_s, -1), -1))  # rows p < s: no chain, masked later
    a = probs[..., :T] @ vs[0].repeat_interleave(rep, 1)
    for r in range(s):
        a = a + probs[..., T + r:T + r + 1] * extra_v[r]
    return a


class ChainStats:
    """Teacher-forced chain metrics over held-out answers. preds[s][p] is unrolled step s's token at row p (the s-th
    draft of the chain started at row p - s); label[p] the target's greedy token there (-1 outside answers).
    tau: a chain after every answer token; bench_like_tau: the bench's walk (next chain right after the bonus token),
    which weighs hard stretches as the bench does."""

    def __init__(self, k: int):
        self.k = k
        self.hits = self.total = self.chains = 0
        self.accepted = [0] * (k + 1)  # accepted[m] = chains whose first m drafts were all accepted
        self.walk_rounds = [0] * (k + 1)
        self.walk_accepted = [[0] * (k + 1) for _ in range(k + 1)]  # [kk][m]: rounds of a k=kk walk accepting >= m

    def add(self, preds: list[torch.Tensor], label: torch.Tensor):
        k, T = self.k, len(label)
        ok0 = label >= 0
        self.hits += int((preds[0][ok0] == label[ok0]).sum())
        self.total += int(ok0.sum())
        lab = label.tolist()
        pr = [p.tolist() for p in preds]

        def run(j, kk):
            a = 0
            while a < kk and j + a < T and lab[j + a] >= 0 and pr[a][j + a] == lab[j + a]:
                a += 1
            return a

        for j in range(T):
            if lab[j] < 0:
                continue
            self.chains += 1
            for m in range(1, run(j, k) + 1):
                self.accepted[m] += 1
        answer_rows = ok0.nonzero().flatten().tolist()
        for kk in range(1, k + 1):
            j = answer_rows[0] if answer_rows else T
            while j < T and lab[j] >= 0:
                a = run(j, kk)
                self.walk_rounds[kk] += 1
                for m in range(1, a + 1):
                    self.walk_accepted[kk][m] += 1
                j += a + 1

    def result(self) -> dict:
        k = self.k
        rates = [self.accepted[m] / max(self.chains, 1) for m in range(1, k + 1)]
        walk_tau = [1 + sum(self.walk_accepted[kk][1:]) / max(self.walk_rounds[kk], 1) for kk in range(1, k + 1)]
        return {"top1": self.hits / max(self.total, 1), "rows": self.total,
                "tau": [1 + sum(rates[:kk]) for kk in range(1, k + 1)], "per_position": rates,
                "bench_like_tau": walk_tau,
                "bench_like_per_position_k5": [self.walk_accepted[k][m] / max(self.walk_rounds[k], 1)
                                               for m in range(1, k + 1)]}
