"""Train an EAGLE-1 draft head for a Llama-family target on CPU, the EAGLE-paper way, and save it in the released
SafeAILab layout (issue 7).

  python scripts/train/train_eagle_head.py --target /work/real/smollm2 --out /work/real/eagle1-smollm2 \
      --work /work/real/train            # defaults: 22 min of data generation, 30 min of training

Stages (each cached under --work, so a rerun resumes where it stopped):
 1. data: the target answers our own prompt set (real_prompts.py; 1/3 of the conversations get a second turn
    conditioned on the target's own first answer), greedy, with continuous batching (a finished row is refilled at
    once). The target's final post-norm hidden state (HF `output_hidden_states[-1]`) at every position is kept from
    the same passes that generate the tokens: prompt rows from the prefill, answer rows from the decode steps, so the
    features are exactly those of one teacher-forced pass over the final sequence, without paying for a second pass.
    The held-out evaluation prompts (scripts/real/data/real_eval_prompts.jsonl) are answered too, for the learning
    curve only.
 2. train: row i pairs feature f_i with token t_{i+1}; the head predicts f_{i+1}. Loss = w_reg * smoothL1(f^, f) +
    w_ce * CE(lm_head(f^), target's greedy token) over answer rows, with uniform noise on the input features, and an
    unrolled multi-step loss (EAGLE-3's training-time test): step s feeds the head's own predicted feature back, and
    its rows attend to the true-feature rows up to the draft's start plus their own earlier steps, exactly the
    context the chain has at inference. AdamW, warmup + cosine decay over a wall-clock budget, bf16 autocast.
    Initialisation (measured, docs/benchmarks.md): fc = the closed-form ridge regression of f_{i+1} on
    [E(t_{i+1}) ; f_i ; 1] (top-1 0.32 before any step), the layer random with o_proj/down_proj scaled by 0.1, so the
    head starts as that linear predictor. fc = [0 ; I] pass-through, or the layer copied from the target's last
    layer (--fc-init feature, --init target-last) start at top-1 0.02 / 0.005 and were still at 0.02 after 3 minutes.
    Data generation runs the target in bf16 (AMX; its greedy token equals the fp32 argmax at 98.9% of positions,
    features within 2% RMS): 3x faster than fp32 here. Evaluation and bench are fp32.
 3. save: pytorch_model.bin (fp32, flat dict, no `model.` prefix) + SafeAILab config.json, plus training_log.json.

Offline metrics printed along the way (held-out answers, teacher-forced): top-1 agreement of the first draft with the
target's greedy token, and the "every-position chain tau" at k = 1..5 (a chain started after every answer token,
accepted prefix counted as in greedy verification); `eagle-convert bench` measures the real thing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from eagle_train_data import BatchedTarget, Sample, Tok, add_data_args, ensure_data, load_samples, log
from eagle_train_loop import (
    ChainStats,
    answer_label_counts,
    apply_rope,
    collate,
    lr_at,
    make_batches,
    rms,
    rope_cos_sin,
    rope_inv_freq,
    unrolled_attention,
)

# ------------------------------------------------------------------------------------------------------------- head


class Eagle1Head(nn.Module):
    """x = fc([E(t) ; f]) + b; y = x + Attn(x); f^ = y + MLP(RMS_post(y)); logits = lm_head(f^)."""

    def __init__(self, H, nh, nkv, hd, inter, eps, theta, embed, lm_head):
        super().__init__()
        self.H, self.nh, self.nkv, self.hd, self.eps = H, nh, nkv, hd, eps
        self.fc = nn.Linear(2 * H, H, bias=True)
        self.q_proj = nn.Linear(H, nh * hd, bias=False)
        self.k_proj = nn.Linear(H, nkv * hd, bias=False)
        self.v_proj = nn.Linear(H, nkv * hd, bias=False)
        self.o_proj = nn.Linear(nh * hd, H, bias=False)
        self.post_norm = nn.Parameter(torch.ones(H))
        self.gate_proj = nn.Linear(H, inter, bias=False)
        self.up_proj = nn.Linear(H, inter, bias=False)
        self.down_proj = nn.Linear(inter, H, bias=False)
        self.register_buffer("embed", embed, persistent=False)
        self.register_buffer("lm_head", lm_head, persistent=False)
        self.inv_freq = rope_inv_freq(theta, hd)

    def unrolled(self, tokens_next, feats, steps: int, noise: float = 0.0):
        """tokens_next [B, T] (row p: token p+1), feats [B, T, H] (row p: target feature p).
        Returns predicted features per step, each [B, T, H]: step s row p predicts f_{p+1} from the chain that
        started at row p - s (rows p < s are garbage and must be masked by the caller)."""
        B, T, H = feats.shape
        cos, sin = rope_cos_sin(self.inv_freq, T)
        emb = F.embedding(tokens_next, self.embed)
        if noise:
            feats = feats + (torch.rand_like(feats) - 0.5) * noise
        outs, ks, vs = [], [], []
        rep = self.nh // self.nkv
        f_in = feats
        for _ in range(steps):
            x = self.fc(torch.cat([emb, f_in], -1))
            q = apply_rope(self.q_proj(x).view(B, T, self.nh, self.hd).transpose(1, 2), cos, sin)
            k = apply_rope(self.k_proj(x).view(B, T, self.nkv, self.hd).transpose(1, 2), cos, sin)
            v = self.v_proj(x).view(B, T, self.nkv, self.hd).transpose(1, 2)
            ks.append(k)
            vs.append(v)
            a = unrolled_attention(q, ks, vs, rep)
            y = x + self.o_proj(a.transpose(1, 2).reshape(B, T, -1))
            xn = rms(y, self.post_norm, self.eps)
            out = y + self.down_proj(F.silu(self.gate_proj(xn)) * self.up_proj(xn))
            outs.append(out)
            # the next step's row p takes the prediction made at row p - 1 (which predicts f_p)
            f_in = F.pad(out, (0, 0, 1, 0))[:, :T]
        return outs

    def state_dict_safeailab(self) -> dict:
        d = {
            "embed_tokens.weight": self.embed, "fc.weight": self.fc.weight, "fc.bias": self.fc.bias,
            "layers.0.self_attn.q_proj.weight": self.q_proj.weight,
            "layers.0.self_attn.k_proj.weight": self.k_proj.weight,
            "layers.0.self_attn.v_proj.weight": self.v_proj.weight,
            "layers.0.self_attn.o_proj.weight": self.o_proj.weight,
            "layers.0.mlp.gate_proj.weight": self.gate_proj.weight, "layers.0.mlp.up_proj.weight": self.up_proj.weight,
            "layers.0.mlp.down_proj.weight": self.down_proj.weight,
            "layers.0.post_attention_layernorm.weight": self.post_norm,
        }
        return {k: v.detach().float().contiguous().clone() for k, v in d.items()}


@torch.no_grad()
def fit_linear_fc(samples: list[Sample], embed: torch.Tensor, max_rows: int = 150_000, ridge: float = 1e-3):
    """Closed-form ridge regression of the next feature on [E(t_{i+1}) ; f_i ; 1]: the best linear next-feature
    predictor, used as fc's initial value (the decoder layer then starts as a near-identity and learns the rest)."""
    H = embed.shape[1]
    xtx = torch.zeros(2 * H + 1, 2 * H + 1, dtype=torch.float64)
    xty = torch.zeros(2 * H + 1, H, dtype=torch.float64)
    rows = 0
    for s in random.Random(0).sample(samples, len(samples)):
        n = len(s.tokens) - 2
        if n <= 0:
            continue
        x = torch.cat([embed[s.tokens[1:n + 1]], s.features[:n], torch.ones(n, 1)], 1)
        xtx += (x.T @ x).double()  # fp32 products per sequence, fp64 sums
        xty += (x.T @ s.features[1:n + 1]).double()
        rows += n
        if rows >= max_rows:
            break
    lam = ridge * xtx.diagonal().mean()
    w = torch.linalg.solve(xtx + lam * torch.eye(len(xtx), dtype=torch.float64), xty)  # [2H+1, H]
    return w[:-1].T.float().contiguous(), w[-1].float(), rows


def init_head(head: Eagle1Head, target: BatchedTarget, mode: str, fc_mode: str, fc_noise: float, seed: int,
              samples: list[Sample] | None = None, branch_scale: float = 1.0):
    torch.manual_seed(seed)
    H = head.H
    with torch.no_grad():
        if fc_mode == "lstsq":
            w, b, rows = fit_linear_fc(samples, head.embed)
            head.fc.weight.copy_(w + torch.randn_like(w) * fc_noise)
            head.fc.bias.copy_(b)
            log(f"fc initialised by ridge regression on {rows} rows")
        elif fc_mode != "random":
            w = torch.randn(H, 2 * H) * fc_noise
            eye = torch.eye(H)
            if fc_mode == "feature":
                w[:, H:] += eye
            elif fc_mode == "embedding":
                w[:, :H] += eye
            elif fc_mode == "both":
                w[:, :H] += 0.5 * eye
                w[:, H:] += 0.5 * eye
            head.fc.weight.copy_(w)
            head.fc.bias.zero_()
        if mode.startswith("target"):
            layer = target.L - 1 if mode == "target-last" else int(mode.split(":")[1])
            p = f"model.layers.{layer}."
            t = target.raw
            w_in = t[p + "input_layernorm.weight"].float()
            # the head's layer 0 has no input norm: fold the target layer's input-norm weight into q/k/v
            head.q_proj.weight.copy_(t[p + "self_attn.q_proj.weight"].float() * w_in)
            head.k_proj.weight.copy_(t[p + "self_attn.k_proj.weight"].float() * w_in)
            head.v_proj.weight.copy_(t[p + "self_attn.v_proj.weight"].float() * w_in)
            head.o_proj.weight.copy_(t[p + "self_attn.o_proj.weight"].float())
            head.post_norm.copy_(t[p + "post_attention_layernorm.weight"].float())
            head.gate_proj.weight.copy_(t[p + "mlp.gate_proj.weight"].float())
            head.up_proj.weight.copy_(t[p + "mlp.up_proj.weight"].float())
            head.down_proj.weight.copy_(t[p + "mlp.down_proj.weight"].float())
        # residual branches start small: the head begins as (almost) its fc, and the layer learns corrections
        head.o_proj.weight.mul_(branch_scale)
        head.down_proj.weight.mul_(branch_scale)


# ---------------------------------------------------------------------------------------------------------- metrics


@torch.no_grad()
def evaluate(head: Eagle1Head, samples: list[Sample], k: int = 5, max_len: int = 2048, fast: bool = False) -> dict:
    """Teacher-forced metrics on held-out answers: top-1 agreement of step 0, and the every-position chain tau.
    fast: bf16 compute (for the learning curve; the final numbers are fp32)."""
    if fast:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return evaluate(head, samples, k, max_len)
    head.eval()
    stats = ChainStats(k)
    for s in samples:
        tok_next, feat, _, label = collate([s], [0], max_len, None)
        outs = head.unrolled(tok_next, feat, k)
        stats.add([F.linear(o[0], head.lm_head).argmax(-1) for o in outs], label[0])  # full vocab
    head.train()
    return stats.result()


# ------------------------------------------------------------------------------------------------------------ train


def train(head, samples, evals, args, log_rows):
    params = [p for p in head.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95))
    # CE over the most frequent label tokens (full-vocab CE costs 10x the rest of the head); rows whose label is
    # outside that set keep only the regression loss. Evaluation always uses the full vocab.
    counts = answer_label_counts(samples, head.embed.shape[0])
    if args.ce_vocab and args.ce_vocab < len(counts):
        keep = counts.argsort(descending=True)[: args.ce_vocab]
        keep = keep.sort().values
        coverage = float(counts[keep].sum() / counts.sum())
    else:
        keep = torch.arange(len(counts))
        coverage = 1.0
    ce_map = torch.full((len(counts),), -1, dtype=torch.long)
    ce_map[keep] = torch.arange(len(keep))
    ce_weight_rows = keep
    log(f"CE vocab {len(keep)} tokens covers {coverage:.4f} of answer labels ({int((counts > 0).sum())} distinct)")
    feat_rms = float(torch.cat([s.features[:64] for s in samples[:200]]).pow(2).mean().sqrt())
    noise = args.noise * feat_rms
    log(f"feature RMS {feat_rms:.3f}; uniform input noise of width {noise:.3f}")
    rng = random.Random(args.seed)
    budget = args.train_minutes * 60
    t0 = time.perf_counter()
    step = tokens_seen = epoch = 0
    next_eval = args.eval_every * 60
    step_weights = [args.step_decay ** s for s in range(args.steps)]
    done = False
    while not done:
        epoch += 1
        for idx in make_batches(samples, args.batch_tokens, args.max_len, rng):
            elapsed = time.perf_counter() - t0
            if elapsed >= budget or (args.max_train_steps and step >= args.max_train_steps):
                done = True
                break
            frac = elapsed / budget
            lr = lr_at(args.lr, step, args.warmup_steps, frac, args.min_lr_ratio)
            for g in opt.param_groups:
                g["lr"] = lr
            tok_next, feat, target, label = collate(samples, idx, args.max_len, ce_map)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                outs = head.unrolled(tok_next, feat, args.steps, noise=noise)
            loss = 0.0
            parts = []
            rows_all = label >= 0
            W = head.lm_head[ce_weight_rows]
            for s, out in enumerate(outs):
                valid = rows_all.clone()
                valid[:, :s] = False  # a chain needs its start row p - s >= 0
                if s:  # and a target row (not a truncated one) at its start... the label mask already covers it
                    pass
                if not valid.any():
                    continue
                o = out[valid].float()
                reg = F.smooth_l1_loss(o, target[valid], reduction="mean")
                lab = ce_map[label[valid]]
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                    logits = F.linear(o, W)
                ce = F.cross_entropy(logits.float(), lab, ignore_index=-1)
                acc = float((logits.argmax(-1) == lab)[lab >= 0].float().mean())
                loss = loss + step_weights[s] * (args.w_reg * reg + args.w_ce * ce)
                parts.append((float(reg.detach()), float(ce.detach()), acc))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, args.clip)
            opt.step()
            step += 1
            tokens_seen += int(rows_all.sum())
            if step % args.log_every == 0:
                el = time.perf_counter() - t0
                log(f"step {step} ep {epoch} lr {lr:.2e} loss {float(loss):.4f} "
                    + " ".join(f"s{s}:reg {r:.4f} ce {c:.3f} acc {a:.3f}" for s, (r, c, a) in enumerate(parts))
                    + f" | {tokens_seen / el:.0f} rows/s")
            if time.perf_counter() - t0 >= next_eval and evals:
                next_eval += args.eval_every * 60
                te = time.perf_counter()
                m = evaluate(head, evals[: args.eval_conversations], fast=True)
                el = te - t0
                log_rows.append({"minutes": el / 60, "step": step, "epoch": epoch, "rows_seen": tokens_seen, **m})
                log(f"EVAL at {el / 60:.1f} min (step {step}, {tokens_seen} rows): top1 {m['top1']:.3f} tau "
                    + "/".join(f"{x:.2f}" for x in m["tau"]) + " bench-like tau "
                    + "/".join(f"{x:.2f}" for x in m["bench_like_tau"]) + f" ({time.perf_counter() - te:.0f}s)")
                t0 += time.perf_counter() - te  # evaluation time does not count against the training budget
    el = time.perf_counter() - t0
    return {"steps": step, "epochs": epoch, "rows_seen": tokens_seen, "train_seconds": el, "ce_vocab": len(keep),
            "ce_coverage": coverage, "feature_rms": feat_rms}


# ------------------------------------------------------------------------------------------------------------- save


def save_safeailab(head: Eagle1Head, target: BatchedTarget, out: str, extra: dict):
    os.makedirs(out, exist_ok=True)
    cfg = target.cfg
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "bias": True,
        "hidden_size": cfg["hidden_size"],
        "intermediate_size": cfg["intermediate_size"],
        "num_attention_heads": cfg["num_attention_heads"],
        "num_key_value_heads": cfg.get("num_key_value_heads") or cfg["num_attention_heads"],
        "num_hidden_layers": 1,
        "max_position_embeddings": 2048,
        "rms_norm_eps": cfg.get("rms_norm_eps", 1e-6),
        "rope_theta": target.theta,
        "vocab_size": cfg["vocab_size"],
        "hidden_act": "silu",
        "bos_token_id": cfg.get("bos_token_id"),
        "eos_token_id": cfg.get("eos_token_id"),
        "pad_token_id": cfg.get("pad_token_id"),
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
    }
    if "head_dim" in cfg:
        config["head_dim"] = cfg["head_dim"]
    tmp = out + "/pytorch_model.bin.tmp"
    torch.save(head.state_dict_safeailab(), tmp)
    os.replace(tmp, out + "/pytorch_model.bin")
    json.dump(config, open(out + "/config.json", "w"), indent=2)
    json.dump(extra, open(out + "/training_log.json", "w"), indent=2)


# -------------------------------------------------------------------------------------------- deliberate mistakes


def write_mistakes(head_dir: str, converted_v0: str, out: str, seed: int = 0):
    """Copies of a trained head converted *wrongly* on purpose, for `eagle-convert bench` to catch:
      fc-swapped/        SafeAILab layout with fc's input halves swapped ([feature ; embedding])
      lm-head-permuted/  the vllm-v0 conversion with its spliced LM head's rows permuted (another model's head)
      lm-head-perturbed/ the vllm-v0 conversion with N(0, rms) noise added to the LM head (another model's head)
    The third mistake of issue 7, the fc bias dropped, is made by the converter itself:
      eagle-convert convert HEAD --target T --to vllm --fc-bias drop"""
    import shutil

    from safetensors.torch import load_file, save_file

    sd = torch.load(os.path.join(head_dir, "pytorch_model.bin"), weights_only=True)
    H = sd["fc.weight"].shape[0]
    swapped = dict(sd)
    swapped["fc.weight"] = torch.cat([sd["fc.weight"][:, H:], sd["fc.weight"][:, :H]], 1).contiguous()
    d = os.path.join(out, "fc-swapped")
    os.makedirs(d, exist_ok=True)
    shutil.copy(os.path.join(head_dir, "config.json"), d)
    torch.save(swapped, os.path.join(d, "pytorch_model.bin"))

    g = torch.Generator().manual_seed(seed)
    tensors = load_file(os.path.join(converted_v0, "model.safetensors"))
    lm = tensors["lm_head.weight"]
    for name, new in (("lm-head-permuted", lm[torch.randperm(lm.shape[0], generator=g)]),
                      ("lm-head-perturbed", lm + torch.randn(lm.shape, generator=g) * lm.pow(2).mean().sqrt())):
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        shutil.copy(os.path.join(converted_v0, "config.json"), d)
        save_file({**tensors, "lm_head.weight": new.contiguous()}, os.path.join(d, "model.safetensors"),
                  metadata={"format": "pt"})
    log(f"wrote {out}/{{fc-swapped,lm-head-permuted,lm-head-perturbed}}")


# ------------------------------------------------------------------------------------------------------------- main


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "mistakes":
        ap = argparse.ArgumentParser(prog="train_eagle_head.py mistakes", description=write_mistakes.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
        ap.add_argument("--head", required=True, help="the trained head (SafeAILab layout)")
        ap.add_argument("--converted", required=True, help="its vllm-v0 conversion (holds the spliced LM head)")
        ap.add_argument("--out", required=True)
        a = ap.parse_args(sys.argv[2:])
        write_mistakes(a.head, a.converted, a.out)
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", required=True)
    ap.add_argument("--out", required=True, help="head folder (SafeAILab layout)")
    ap.add_argument("--work", required=True, help="cache folder for the generated data (several hundred MB)")
    ap.add_argument("--threads", type=int, default=2,
                    help="torch threads; on a machine shared with other jobs 1 is much faster (no OpenMP stalls)")
    ap.add_argument("--seed", type=int, default=0)
    add_data_args(ap)
    g = ap.add_argument_group("training")
    g.add_argument("--train-minutes", type=float, default=30)
    g.add_argument("--max-train-steps", type=int, default=0)
    g.add_argument("--train-subset", type=int, default=0, help="use only the first N samples (experiments)")
    g.add_argument("--lr", type=float, default=1e-3)
    g.add_argument("--min-lr-ratio", type=float, default=0.05)
    g.add_argument("--warmup-steps", type=int, default=20)
    g.add_argument("--weight-decay", type=float, default=0.0)
    g.add_argument("--clip", type=float, default=0.5)
    g.add_argument("--batch-tokens", type=int, default=4096)
    g.add_argument("--max-len", type=int, default=1024)
    g.add_argument("--w-reg", type=float, default=1.0)
    g.add_argument("--w-ce", type=float, default=0.2)
    g.add_argument("--ce-vocab", type=int, default=8192, help="0 = full vocab")
    g.add_argument("--noise", type=float, default=0.1, help="uniform noise width on input features, x feature RMS")
    g.add_argument("--steps", type=int, default=3, help="unrolled draft steps in the loss (1 = EAGLE-1 only)")
    g.add_argument("--step-decay", type=float, default=0.8)
    g.add_argument("--resume", metavar="HEAD", help="start from this saved head instead of initialising")
    g.add_argument("--init", default="random", help="decoder layer: random | target-last | target:<layer>")
    g.add_argument("--fc-init", default="lstsq", choices=["random", "lstsq", "feature", "embedding", "both"],
                   help="lstsq: ridge-regression fit of the next feature (closed form); feature/embedding: [0;I]/[I;0]")
    g.add_argument("--fc-noise", type=float, default=0.0)
    g.add_argument("--branch-scale", type=float, default=0.1, help="scale of o_proj/down_proj at init")
    g.add_argument("--no-bf16", dest="bf16", action="store_false")
    g.add_argument("--eval-every", type=float, default=5, help="minutes between held-out evaluations")
    g.add_argument("--log-every", type=int, default=20)
    g.add_argument("--eval-conversations", type=int, default=10, help="held-out conversations in the periodic eval")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    os.makedirs(args.work, exist_ok=True)
    t_all = time.perf_counter()
    target = BatchedTarget(args.target, dtype=getattr(torch, args.gen_dtype))
    tok = Tok(args.target)
    samples, evals, info = ensure_data(target, tok, args.work, args)
    if args.train_minutes <= 0:
        log(f"data only: {info}")
        return
    for extra in args.extra_data:
        more = load_samples(os.path.join(extra, "data.pt"))
        log(f"+ {len(more)} conversations from {extra}")
        samples += more
    if args.train_subset:
        samples = samples[: args.train_subset]
    log(f"data: {len(samples)} conversations, {sum(len(s.tokens) for s in samples)} tokens, "
        f"{sum(int(s.answer.sum()) for s in samples)} answer tokens (generated in {info['gen_seconds'] / 60:.1f} min); "
        f"held-out: {len(evals)} conversations, {sum(int(s.answer.sum()) for s in evals)} answer tokens")

    cfg = target.cfg
    head = Eagle1Head(target.H, target.nh, target.nkv, target.hd, cfg["intermediate_size"], target.eps, target.theta,
                      target.embed, target.lm_head)
    if args.resume:
        sd = torch.load(os.path.join(args.resume, "pytorch_model.bin"), weights_only=True)
        names = {"fc.weight": head.fc.weight, "fc.bias": head.fc.bias,
                 "layers.0.post_attention_layernorm.weight": head.post_norm}
        for n in ("q", "k", "v", "o"):
            names[f"layers.0.self_attn.{n}_proj.weight"] = getattr(head, f"{n}_proj").weight
        for n in ("gate", "up", "down"):
            names[f"layers.0.mlp.{n}_proj.weight"] = getattr(head, f"{n}_proj").weight
        with torch.no_grad():
            for name, param in names.items():
                param.copy_(sd[name])
        log(f"resumed from {args.resume}")
    else:
        init_head(head, target, args.init, args.fc_init, args.fc_noise, args.seed, samples, args.branch_scale)
    curve = []
    m0 = evaluate(head, evals[: args.eval_conversations], fast=True)
    curve.append({"minutes": 0.0, "step": 0, "epoch": 0, "rows_seen": 0, **m0})
    log(f"EVAL at init: top1 {m0['top1']:.3f} tau " + "/".join(f"{x:.2f}" for x in m0["tau"]))
    stats = train(head, samples, evals, args, curve)
    m = evaluate(head, evals)  # fp32, all held-out conversations
    curve.append({"final_fp32": True, "minutes": stats["train_seconds"] / 60, "step": stats["steps"],
                  "epoch": stats["epochs"], "rows_seen": stats["rows_seen"], **m})
    log(f"EVAL final: top1 {m['top1']:.3f} tau " + "/".join(f"{x:.2f}" for x in m["tau"])
        + " bench-like tau " + "/".join(f"{x:.2f}" for x in m["bench_like_tau"])
        + " per-position " + "/".join(f"{x:.3f}" for x in m["per_position"]))
    extra = {"args": vars(args), "data": info, "train": stats, "curve": curve,
             "wall_minutes_total": (time.perf_counter() - t_all) / 60}
    save_safeailab(head, target, args.out, extra)
    log(f"saved {args.out} ({stats['train_seconds'] / 60:.1f} min training, {stats['steps']} steps, "
        f"{stats['epochs']} epochs started)")


if __name__ == "__main__":
    main()
