"""Train an EAGLE-3 draft head for a Llama-family target on CPU and save it in the released SafeAILab EAGLE-3 layout
(issue 17). Shares the EAGLE-1 trainer's data stage (scripts/train/eagle_train_data.py) and loop helpers
(scripts/train/eagle_train_loop.py).

  python scripts/train/train_eagle3_head.py --target .real/smollm2 --out .real/eagle3-smollm2 --work .real/train \
      [--extra-data .real/train-shard2]       # reuses the cached token sequences of the EAGLE-1 data stage

Stages (cached under --work):
 1. data: the EAGLE-1 trainer's (the target's own greedy answers; generated only if --work has no data.pt).
 2. aux features: one teacher-forced bf16 pass of the target over every cached sequence, keeping the inputs of the
    aux layers (HF hidden_states[i] for i in --aux-layers, default 2, L//2, L-3: vLLM 0.32's llama.py captures
    `hidden_states + residual` before layer i for i in the draft config's eagle_aux_hidden_state_layer_ids, which
    the saved config states explicitly).
 3. draft vocab: the --draft-vocab most frequent answer tokens of the training data (d2t/t2d); the coverage of the
    held-out greedy tokens and the LM-head cost per draft step at several sizes are measured and logged.
 4. train: CE of lm_head(RMS(o)) against the target's greedy token (rows whose token lies outside the draft vocab are
    skipped: no draft can be accepted there), unrolled over --steps chain steps (the training-time test: step s feeds
    back the previous step's pre-norm output and attends to true-feature rows up to the chain's start plus its own
    earlier steps). Init: fc = ridge fit of the target's next final feature f_{p+1} on the aux states at p; lm_head =
    the target's LM-head rows of the draft vocab; the layer random with o/down scaled by --branch-scale.
 5. save: pytorch_model.bin + config.json (LlamaForCausalLMEagle3) + training_log.json.
"""

from __future__ import annotations

import argparse
import os
import random
import time

import torch
import torch.nn.functional as F
from eagle3_head_model import Eagle3Head, coverage, draft_vocab, save_safeailab_eagle3
from eagle_train_data import (
    BatchedTarget,
    Sample,
    Tok,
    add_data_args,
    ensure_data,
    load_samples,
    log,
    teacher_forced_aux,
)
from eagle_train_loop import ChainStats, answer_label_counts, collate, lr_at, make_batches

VOCAB_SIZES = (1024, 2048, 4096, 8192, 16384, 32000)


def with_aux(target, samples, aux_layers, cache_path, label) -> list[Sample]:
    """The samples with their features replaced by the aux states (cached at cache_path)."""
    if os.path.exists(cache_path):
        aux = torch.load(cache_path, weights_only=True)
    else:
        aux = teacher_forced_aux(target, samples, aux_layers, label=label)
        torch.save(aux, cache_path + ".tmp")
        os.replace(cache_path + ".tmp", cache_path)
    return [Sample(s.tokens, a, s.answer, s.conv) for s, a in zip(samples, aux)]


def vocab_report(train_counts: torch.Tensor, eval_counts: torch.Tensor, H: int, threads: int) -> list[dict]:
    """Held-out coverage and the LM-head matvec time per draft step (1 row, fp32) at each candidate size."""
    rows = []
    x = torch.randn(1, H)
    for n in VOCAB_SIZES + (len(train_counts),):
        ids = train_counts.argsort(descending=True, stable=True)[:n]
        w = torch.randn(n, H)
        for _ in range(20):
            F.linear(x, w)
        t = time.perf_counter()
        for _ in range(200):
            F.linear(x, w)
        ms = (time.perf_counter() - t) / 200 * 1e3
        rows.append({"size": n, "train_coverage": coverage(train_counts, ids),
                     "heldout_coverage": coverage(eval_counts, ids), "lm_head_ms": ms})
        log(f"draft vocab {n:6d}: held-out greedy-token coverage {rows[-1]['heldout_coverage']:.4f} "
            f"(train {rows[-1]['train_coverage']:.4f}), LM head {ms:.3f} ms/step ({threads} thread)")
    return rows


@torch.no_grad()
def fit_fc(samples: list[Sample], final_feats: list[torch.Tensor], max_rows: int, ridge: float = 1e-3):
    """Ridge regression (no intercept: EAGLE-3's fc has no bias) of the next final feature f_{p+1} on aux_p."""
    D = samples[0].features.shape[1]
    xtx = torch.zeros(D, D, dtype=torch.float64)
    xty = torch.zeros(D, final_feats[0].shape[1], dtype=torch.float64)
    rows = 0
    for i in random.Random(0).sample(range(len(samples)), len(samples)):
        n = len(samples[i].tokens) - 2
        if n <= 0:
            continue
        x = samples[i].features[:n].float()
        xtx += (x.T @ x).double()
        xty += (x.T @ final_feats[i][1:n + 1].float()).double()
        rows += n
        if rows >= max_rows:
            break
    lam = ridge * xtx.diagonal().mean()
    return torch.linalg.solve(xtx + lam * torch.eye(D, dtype=torch.float64), xty).T.float().contiguous(), rows


@torch.no_grad()
def evaluate(head: Eagle3Head, samples: list[Sample], k: int = 5, fast: bool = False) -> dict:
    head.eval()
    stats = ChainStats(k)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=fast):
        for s in samples:
            tok_next, feat, _, label = collate([s], [0], 2048, None)
            outs = head.unrolled(tok_next, feat, k)
            stats.add([head.draft_ids[head.logits(o[0]).argmax(-1)] for o in outs], label[0])
    head.train()
    return stats.result()


def train(head: Eagle3Head, samples, evals, args, curve) -> dict:
    opt = torch.optim.AdamW([p for p in head.parameters() if p.requires_grad], lr=args.lr, betas=(0.9, 0.95),
                            weight_decay=0.0)
    to_draft = torch.full((head.embed.shape[0],), -1, dtype=torch.long)
    to_draft[head.draft_ids] = torch.arange(len(head.draft_ids))
    weights = [args.step_decay ** s for s in range(args.steps)]
    rng = random.Random(args.seed)
    budget = args.train_minutes * 60
    t0 = time.perf_counter()
    step = rows_seen = epoch = 0
    next_eval = args.eval_every * 60
    while True:
        epoch += 1
        for idx in make_batches(samples, args.batch_tokens, args.max_len, rng):
            elapsed = time.perf_counter() - t0
            if elapsed >= budget or (args.max_train_steps and step >= args.max_train_steps):
                return {"steps": step, "epochs": epoch, "rows_seen": rows_seen, "train_seconds": elapsed}
            lr = lr_at(args.lr, step, args.warmup_steps, elapsed / budget, args.min_lr_ratio)
            for g in opt.param_groups:
                g["lr"] = lr
            tok_next, feat, _, label = collate(samples, idx, args.max_len, None)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                outs = head.unrolled(tok_next, feat, args.steps)
            d_label = torch.where(label >= 0, to_draft[label.clamp(min=0)], -1)
            loss, parts = 0.0, []
            for s, o in enumerate(outs):
                lab = d_label.clone()
                lab[:, :s] = -1  # no chain starts before row 0
                valid = lab >= 0
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                    logits = head.logits(o[valid])
                ce = F.cross_entropy(logits.float(), lab[valid])
                loss = loss + weights[s] * ce
                parts.append((float(ce.detach()), float((logits.argmax(-1) == lab[valid]).float().mean())))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), args.clip)
            opt.step()
            step += 1
            rows_seen += int((label >= 0).sum())
            if step % args.log_every == 0:
                log(f"step {step} ep {epoch} lr {lr:.2e} loss {float(loss.detach()):.4f} "
                    + " ".join(f"s{s}:ce {c:.3f} acc {a:.3f}" for s, (c, a) in enumerate(parts))
                    + f" | {rows_seen / (time.perf_counter() - t0):.0f} rows/s")
            if time.perf_counter() - t0 >= next_eval and evals:
                next_eval += args.eval_every * 60
                te = time.perf_counter()
                m = evaluate(head, evals[: args.eval_conversations], fast=True)
                curve.append({"minutes": (te - t0) / 60, "step": step, "epoch": epoch, "rows_seen": rows_seen, **m})
                log(f"EVAL at {(te - t0) / 60:.1f} min (step {step}, {rows_seen} rows): top1 {m['top1']:.3f} tau "
                    + "/".join(f"{x:.2f}" for x in m["tau"]) + " bench-like "
                    + "/".join(f"{x:.2f}" for x in m["bench_like_tau"]))
                t0 += time.perf_counter() - te  # evaluation time does not count against the training budget


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", required=True)
    ap.add_argument("--out", required=True, help="head folder (SafeAILab EAGLE-3 layout)")
    ap.add_argument("--work", required=True, help="data folder (the EAGLE-1 trainer's --work is reused as it is)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    add_data_args(ap)
    g = ap.add_argument_group("EAGLE-3")
    g.add_argument("--aux-layers", default="", help="comma-separated target layer ids (default 2, L//2, L-3)")
    g.add_argument("--draft-vocab", type=int, default=8192)
    g.add_argument("--steps", type=int, default=4, help="unrolled chain steps in the loss (training-time test)")
    g.add_argument("--step-decay", type=float, default=0.8)
    g.add_argument("--train-minutes", type=float, default=30)
    g.add_argument("--max-train-steps", type=int, default=0)
    g.add_argument("--lr", type=float, default=1e-3)
    g.add_argument("--min-lr-ratio", type=float, default=0.05)
    g.add_argument("--warmup-steps", type=int, default=20)
    g.add_argument("--clip", type=float, default=0.5)
    g.add_argument("--batch-tokens", type=int, default=4096)
    g.add_argument("--max-len", type=int, default=1024)
    g.add_argument("--fit-rows", type=int, default=150_000, help="rows of the ridge fit that initialises fc")
    g.add_argument("--branch-scale", type=float, default=0.1)
    g.add_argument("--resume", metavar="HEAD", help="start from this saved EAGLE-3 head")
    g.add_argument("--no-bf16", dest="bf16", action="store_false")
    g.add_argument("--eval-every", type=float, default=5)
    g.add_argument("--eval-conversations", type=int, default=10)
    g.add_argument("--log-every", type=int, default=20)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    t_all = time.perf_counter()
    target = BatchedTarget(args.target, dtype=getattr(torch, args.gen_dtype))
    L = target.L
    aux_layers = tuple(int(x) for x in args.aux_layers.split(",")) if args.aux_layers else (2, L // 2, L - 3)
    if sorted(set(aux_layers)) != list(aux_layers) or not all(0 <= i < L for i in aux_layers):
        raise SystemExit(f"--aux-layers must be ascending distinct ids in [0, {L}); got {aux_layers}")
    samples, evals, info = ensure_data(target, Tok(args.target), args.work, args)
    final_feats = [s.features for s in samples]
    tag = "-".join(map(str, aux_layers))
    t = time.perf_counter()
    samples = with_aux(target, samples, aux_layers, os.path.join(args.work, f"aux_{tag}.pt"), "train ")
    evals = with_aux(target, evals, aux_layers, os.path.join(args.work, f"eval_aux_{tag}.pt"), "held-out ")
    for extra in args.extra_data:
        more = load_samples(os.path.join(extra, "data.pt"))
        final_feats += [s.features for s in more]
        samples += with_aux(target, more, aux_layers, os.path.join(extra, f"aux_{tag}.pt"), f"{extra} ")
    aux_seconds = time.perf_counter() - t
    n_ans = sum(int(s.answer.sum()) for s in samples)
    log(f"data: {len(samples)} conversations, {sum(len(s.tokens) for s in samples)} tokens, {n_ans} answer tokens; "
        f"aux features {aux_seconds:.0f}s; held-out {len(evals)} conversations")

    V = target.embed.shape[0]
    counts = answer_label_counts(samples, V)
    report = vocab_report(counts, answer_label_counts(evals, V), target.H, args.threads)
    ids, _, _ = draft_vocab(counts, args.draft_vocab)
    cfg = target.cfg
    head = Eagle3Head(target.H, target.nh, target.nkv, target.hd, cfg["intermediate_size"], target.eps, target.theta,
                      len(aux_layers), target.embed, ids)
    if args.resume:
        head.load_safeailab(torch.load(os.path.join(args.resume, "pytorch_model.bin"), weights_only=True))
        log(f"resumed from {args.resume}")
    else:
        w, rows = fit_fc(samples, final_feats, args.fit_rows)
        feat_rms = float(torch.cat([f[:64] for f in final_feats[:200]]).float().pow(2).mean().sqrt())
        with torch.no_grad():
            head.fc.weight.copy_(w)
            head.lm_head.weight.copy_(target.lm_head[ids])
            head.norm.fill_(feat_rms)  # RMS(o) * rms(f) ~ f: the target's LM head sees features at their own scale
            head.o_proj.weight.mul_(args.branch_scale)
            head.down_proj.weight.mul_(args.branch_scale)
        log(f"fc initialised by ridge regression on {rows} rows; feature RMS {feat_rms:.3f}")
    del final_feats
    curve = []
    m0 = evaluate(head, evals[: args.eval_conversations], fast=True)
    curve.append({"minutes": 0.0, "step": 0, "epoch": 0, "rows_seen": 0, **m0})
    log(f"EVAL at init: top1 {m0['top1']:.3f} tau " + "/".join(f"{x:.2f}" for x in m0["tau"]))
    stats = train(head, samples, evals, args, curve)
    m = evaluate(head, evals)
    curve.append({"final_fp32": True, "minutes": stats["train_seconds"] / 60, **{k: stats[k] for k in
                  ("steps", "epochs", "rows_seen")}, **m})
    log("EVAL final: top1 {:.3f} tau {} bench-like tau {} per-position {}".format(
        m["top1"], "/".join(f"{x:.2f}" for x in m["tau"]), "/".join(f"{x:.2f}" for x in m["bench_like_tau"]),
        "/".join(f"{x:.3f}" for x in m["per_position"])))
    extra = {"args": vars(args), "data": info, "answer_tokens": n_ans, "aux_seconds": aux_seconds,
             "aux_layers": list(aux_layers), "vocab_report": report, "train": stats, "curve": curve,
             "wall_minutes_total": (time.perf_counter() - t_all) / 60}
    save_safeailab_eagle3(head, cfg, target.theta, aux_layers, args.out, extra)
    log(f"saved {args.out} ({stats['train_seconds'] / 60:.1f} min training, {stats['steps']} steps)")


if __name__ == "__main__":
    main()
