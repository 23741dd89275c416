"""The data stage shared by the EAGLE-1 and EAGLE-3 trainers (train_eagle_head.py, train_eagle3_head.py): a
batched bf16/fp32 Llama forward with a slotted KV cache, the chat-template tokenizer, and continuous-batching greedy
generation of the target's own answers (features of the generating passes kept). `BatchedTarget.forward` can also
return the inputs of chosen decoder layers (HF `hidden_states[i]`, vLLM's aux hidden states), which EAGLE-3 reads."""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass

import real_prompts  # beside this file: a trainer runs from scripts/train, which Python puts first on the path
import torch
import torch.nn.functional as F
from safetensors import safe_open

# ----------------------------------------------------------------------------------------------------------- target


def log(*args):
    print(time.strftime("%H:%M:%S"), *args, flush=True)


class BatchedTarget:
    """A batched Llama forward with a slotted static KV cache (one slot per conversation in flight), for generation.
    Returns post-norm hidden states; logits are the caller's (lm_head = tied embedding or lm_head.weight)."""

    def __init__(self, target_dir: str, dtype=torch.float32):
        cfg = json.load(open(os.path.join(target_dir, "config.json")))
        self.cfg = cfg
        if cfg.get("model_type") != "llama":
            raise SystemExit(f"this trainer implements llama targets; got {cfg.get('model_type')!r}")
        self.H = cfg["hidden_size"]
        self.nh = cfg["num_attention_heads"]
        self.nkv = cfg.get("num_key_value_heads") or self.nh
        self.hd = cfg.get("head_dim") or self.H // self.nh
        self.L = cfg["num_hidden_layers"]
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        rope = cfg.get("rope_parameters") or {}
        self.theta = float(cfg.get("rope_theta") or rope.get("rope_theta") or 10000.0)
        if (cfg.get("rope_scaling") or {}).get("rope_type", "default") not in ("default", None):
            raise SystemExit("rope scaling is not implemented in this trainer")
        self.dtype = dtype
        files = [f for f in os.listdir(target_dir) if f.endswith(".safetensors")]
        t = {}
        for name in files:
            with safe_open(os.path.join(target_dir, name), "pt") as f:
                for k in f.keys():
                    t[k] = f.get_tensor(k)
        g = lambda k: t[k].to(dtype)  # noqa: E731
        self.embed = t["model.embed_tokens.weight"].float()  # fp32 master copy (the head's frozen embedding)
        self.lm_head = (t["lm_head.weight"] if "lm_head.weight" in t and not cfg.get("tie_word_embeddings") else
                        t["model.embed_tokens.weight"]).float()
        self.embed_c, self.lm_head_c = self.embed.to(dtype), self.lm_head.to(dtype)
        self.norm = g("model.norm.weight")
        self.layers = []
        for i in range(self.L):
            p = f"model.layers.{i}."
            qkv = torch.cat([g(p + "self_attn.q_proj.weight"), g(p + "self_attn.k_proj.weight"),
                             g(p + "self_attn.v_proj.weight")])
            gu = torch.cat([g(p + "mlp.gate_proj.weight"), g(p + "mlp.up_proj.weight")])
            self.layers.append((g(p + "input_layernorm.weight"), qkv, g(p + "self_attn.o_proj.weight"),
                                g(p + "post_attention_layernorm.weight"), gu, g(p + "mlp.down_proj.weight")))
        self.raw = t  # for the head's initialisation
        inv = 1.0 / (self.theta ** (torch.arange(0, self.hd, 2, dtype=torch.int64).float() / self.hd))
        self.inv_freq = inv

    def rope(self, positions: torch.Tensor):
        freqs = positions.float()[..., None] * self.inv_freq
        emb = torch.cat([freqs, freqs], -1)
        return emb.cos().to(self.dtype), emb.sin().to(self.dtype)

    def new_cache(self, slots: int, capacity: int):
        shape = (slots, self.nkv, capacity, self.hd)
        return [(torch.zeros(shape, dtype=self.dtype), torch.zeros(shape, dtype=self.dtype)) for _ in range(self.L)]

    @staticmethod
    def _rms(x, w, eps):
        x32 = x.float()
        return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, cache, kv_len: int,
                aux_layers: tuple[int, ...] = ()):
        """ids/positions [B, T] for cache slots [B]; every row's earlier positions are cached. Keys are read up to
        kv_len (> every position). Returns post-norm hidden [B, T, H] (compute dtype); with aux_layers, also the
        inputs of those decoder layers concatenated low to high, [B, T, len * H] (HF hidden_states[i], the residual
        stream vLLM's EAGLE-3 path captures)."""
        aux = []
        B, T = ids.shape
        h = F.embedding(ids, self.embed_c)
        cos, sin = self.rope(positions)  # [B, T, hd]
        cos, sin = cos[:, None], sin[:, None]
        half = self.hd // 2
        kpos = torch.arange(kv_len)
        mask = (kpos[None, None, :] <= positions[:, :, None])[:, None]  # [B, 1, T, kv_len]
        all_slots = B == cache[0][0].shape[0] and bool((slots == torch.arange(B)).all())
        bidx = slots[:, None].expand(B, T)
        for layer, ((w_in, qkv, o, w_post, gu, down), (ck, cv)) in enumerate(zip(self.layers, cache)):
            if layer in aux_layers:
                aux.append(h)
            x = self._rms(h, w_in, self.eps)
            q, k, v = F.linear(x, qkv).split([self.nh * self.hd, self.nkv * self.hd, self.nkv * self.hd], -1)
            q = q.view(B, T, self.nh, self.hd).transpose(1, 2)
            k = k.view(B, T, self.nkv, self.hd).transpose(1, 2)
            v = v.view(B, T, self.nkv, self.hd).transpose(1, 2)
            q = q * cos + torch.cat([-q[..., half:], q[..., :half]], -1) * sin
            k = k * cos + torch.cat([-k[..., half:], k[..., :half]], -1) * sin
            ck[bidx, :, positions] = k.transpose(1, 2)
            cv[bidx, :, positions] = v.transpose(1, 2)
            keys = ck[:, :, :kv_len] if all_slots else ck[slots, :, :kv_len]
            vals = cv[:, :, :kv_len] if all_slots else cv[slots, :, :kv_len]
            a = F.scaled_dot_product_attention(q, keys, vals, attn_mask=mask, enable_gqa=True)
            h = h + F.linear(a.transpose(1, 2).reshape(B, T, -1), o)
            x = self._rms(h, w_post, self.eps)
            gate, up = F.linear(x, gu).chunk(2, -1)
            h = h + F.linear(F.silu(gate) * up, down)
        out = self._rms(h, self.norm, self.eps)
        if aux_layers:
            return out, torch.cat(aux, -1)  # appended in layer order: low to high
        return out


# ------------------------------------------------------------------------------------------------------------- data


@dataclass
class Sample:
    tokens: torch.Tensor  # [L] int64
    features: torch.Tensor  # [L - 1, H] float32: f_p for every position the target was fed
    answer: torch.Tensor  # [L] bool: token p was produced by the target (greedy) -> a training label
    conv: int = -1  # index of the conversation it answers


def load_samples(path: str) -> list[Sample]:
    return [Sample(**d) for d in torch.load(path, weights_only=True)]


class Tok:
    def __init__(self, target_dir):
        from transformers import AutoTokenizer
        self.tok = AutoTokenizer.from_pretrained(target_dir)
        gen = json.load(open(os.path.join(target_dir, "generation_config.json")))
        eos = gen.get("eos_token_id", self.tok.eos_token_id)
        self.eos = set(eos if isinstance(eos, list) else [eos])
        if self.tok.eos_token_id is not None:
            self.eos.add(self.tok.eos_token_id)

    def prompt_ids(self, turns: list[str], answers: list[str]) -> list[int]:
        msgs = []
        for i, u in enumerate(turns):
            msgs.append({"role": "user", "content": u})
            if i < len(answers):
                msgs.append({"role": "assistant", "content": answers[i]})
        text = self.tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def decode(self, ids):
        return self.tok.decode([i for i in ids if i not in self.eos], skip_special_tokens=True)


def generate_data(target: BatchedTarget, tok: Tok, conversations: list[list[str]], *, batch: int, max_new: int,
                  minutes: float, temperature: float = 0.0, seed: int = 0, label: str = "") -> list[Sample]:
    """Continuous-batching greedy generation. Conversations with two user turns are answered twice: the second prompt
    contains the target's own first answer (re-rendered by the chat template, as the bench does), and only the full
    two-turn sequence is kept (its first turn is a prefix). Stops taking new work after `minutes`; rows still in
    flight are kept as truncated samples."""
    gen = torch.Generator().manual_seed(seed)
    capacity = 2 * max_new + 400
    cache = target.new_cache(batch, capacity)
    queue = [(ci, 0, []) for ci in range(len(conversations))]  # (conversation, turn, earlier answers)
    queue.reverse()
    slot = [None] * batch  # dict per active slot
    samples: list[Sample] = []
    t0 = time.perf_counter()
    produced = 0
    last_log = t0

    def finish(s, truncated=False):
        conv = conversations[s["ci"]]
        tokens = s["prompt"] + s["gen"]
        feats = torch.cat(s["feats"])[: len(tokens) - 1].float()
        answer = torch.zeros(len(tokens), dtype=torch.bool)
        answer[len(s["prompt"]):] = True
        for start, n in s["earlier_spans"]:
            answer[start:start + n] = True
        if not truncated and s["turn"] + 1 < len(conv):
            # queue the next turn, carrying the answer spans that stay valid in the re-rendered prompt
            answers = s["answers"] + [tok.decode(s["gen"])]
            queue.append((s["ci"], s["turn"] + 1, answers, s["earlier_spans"] + [(len(s["prompt"]), len(s["gen"]))],
                          s["gen"]))
            return
        samples.append(Sample(torch.tensor(tokens), feats, answer, s["ci"]))

    def start(b):
        while queue:
            item = queue.pop()
            ci, turn, answers = item[:3]
            prompt = tok.prompt_ids(conversations[ci][: turn + 1], answers)
            spans = []
            if turn:
                prev_spans, prev_gen = item[3], item[4]
                start_, n = prev_spans[-1]
                # keep the previous answer's label span only where re-tokenisation reproduced the generated ids
                if prompt[start_:start_ + n] == prev_gen:
                    spans = prev_spans
                else:
                    spans = prev_spans[:-1]
            if len(prompt) + max_new + 1 > capacity:
                continue
            ids = torch.tensor([prompt])
            h = target.forward(ids, torch.arange(len(prompt))[None], torch.tensor([b]), cache, len(prompt))
            logits = F.linear(h[0, -1:], target.lm_head_c).float()
            nxt = pick(logits)[0]
            slot[b] = {"ci": ci, "turn": turn, "answers": answers, "prompt": prompt, "gen": [int(nxt)],
                       "feats": [h[0].float()], "earlier_spans": spans, "pos": len(prompt)}
            return True
        slot[b] = None
        return False

    def pick(logits):
        if temperature == 0:
            return logits.argmax(-1)
        return torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=gen)[:, 0]

    accepting = True
    for b in range(batch):
        start(b)
    while any(s is not None for s in slot):
        active = [b for b in range(batch) if slot[b] is not None]
        if accepting and time.perf_counter() - t0 > minutes * 60:
            accepting = False
            queue.clear()
            log(f"{label}time budget reached: harvesting {len(active)} rows in flight")
            for b in active:
                finish(slot[b], truncated=True)
                slot[b] = None
            break
        # every slot runs (an idle one decodes a dummy token at position 0): no cache gathering, one batched pass
        ids = torch.tensor([[slot[b]["gen"][-1] if slot[b] else 0] for b in range(batch)])
        pos = torch.tensor([[slot[b]["pos"] if slot[b] else 0] for b in range(batch)])
        kv_len = int(pos.max()) + 1
        h = target.forward(ids, pos, torch.arange(batch), cache, kv_len)  # [B, 1, H]
        logits = F.linear(h[:, 0], target.lm_head_c).float()
        nxt = pick(logits).tolist()
        produced += len(active)
        for b in active:
            j = b
            s = slot[b]
            s["feats"].append(h[j].float())
            s["pos"] += 1
            s["gen"].append(nxt[j])
            if nxt[j] in tok.eos or len(s["gen"]) >= max_new:
                finish(s)
                start(b)
        now = time.perf_counter()
        if now - last_log > 60:
            last_log = now
            log(f"{label}generated {produced} tokens in {now - t0:.0f}s ({produced / (now - t0):.0f} tok/s), "
                f"{len(samples)} samples done, {len(queue)} queued, {len(active)} active")
    dt = time.perf_counter() - t0
    log(f"{label}done: {produced} generated tokens in {dt:.0f}s ({produced / max(dt, 1e-9):.0f} tok/s), "
        f"{len(samples)} samples")
    return samples


@torch.inference_mode()
def teacher_forced_aux(target: BatchedTarget, samples: list[Sample], aux_layers: tuple[int, ...], *,
                       max_batch_tokens: int = 8192, label: str = "") -> list[torch.Tensor]:
    """EAGLE-3's features for cached token sequences: one teacher-forced pass over tokens[:-1] of each sample (the
    positions the generating passes fed), length-bucketed; returns per sample [L - 1, len(aux_layers) * H] in bf16.
    Right padding is harmless: rows only attend to earlier positions."""
    order = sorted(range(len(samples)), key=lambda i: len(samples[i].tokens))
    out: list[torch.Tensor | None] = [None] * len(samples)
    t0 = last = time.perf_counter()
    done = 0
    while order:
        T = len(samples[order[-1]].tokens) - 1
        n = max(1, min(len(order), max_batch_tokens // max(T, 1)))
        idx, order = order[-n:], order[:-n]
        ids = torch.zeros(n, T, dtype=torch.long)
        for j, i in enumerate(idx):
            toks = samples[i].tokens[:-1]
            ids[j, :len(toks)] = toks
        cache = target.new_cache(n, T)
        _, aux = target.forward(ids, torch.arange(T).expand(n, T), torch.arange(n), cache, T, aux_layers=aux_layers)
        for j, i in enumerate(idx):
            out[i] = aux[j, :len(samples[i].tokens) - 1].to(torch.bfloat16).clone()
        done += n
        if time.perf_counter() - last > 60:
            last = time.perf_counter()
            log(f"{label}aux features: {done}/{len(samples)} samples in {last - t0:.0f}s")
    log(f"{label}aux features of {len(samples)} samples in {time.perf_counter() - t0:.0f}s")
    return out


def add_data_args(ap: argparse.ArgumentParser):
    g = ap.add_argument_group("data")
    g.add_argument("--num-conversations", type=int, default=4000,
                   help="upper bound; the time budget usually stops first")
    g.add_argument("--conversation-offset", type=int, default=0,
                   help="skip the first N prompt-set conversations (a second data shard)")
    g.add_argument("--extra-data", nargs="*", default=[], metavar="WORK",
                   help="train on these other --work folders' data.pt too")
    g.add_argument("--gen-minutes", type=float, default=22)
    g.add_argument("--gen-batch", type=int, default=256)
    g.add_argument("--max-new-tokens", type=int, default=300)
    g.add_argument("--gen-dtype", choices=["float32", "bfloat16"], default="bfloat16",
                   help="bf16 (AMX) generates ~3x faster; its greedy tokens = fp32 argmax at 98.9%% of positions")
    here = os.path.dirname(os.path.abspath(__file__))
    g.add_argument("--eval-prompts", default=os.path.join(here, os.pardir, "real", "data", "real_eval_prompts.jsonl"))


def ensure_data(target: BatchedTarget, tok: Tok, work: str, args) -> tuple[list[Sample], list[Sample], dict]:
    """The cached data stage: work/data.pt (training conversations), work/eval_data.pt (the held-out prompts'
    answers, for the learning curve only) and work/data_info.json, generated once (add_data_args' options)."""
    os.makedirs(work, exist_ok=True)
    data_path = os.path.join(work, "data.pt")
    eval_path = os.path.join(work, "eval_data.pt")
    gen_info_path = os.path.join(work, "data_info.json")
    if not os.path.exists(data_path):
        # One continuous batch: the held-out conversations first (answered for the learning curve only), then ours.
        real_prompts.check_disjoint()
        evals_conv = [json.loads(line)["turns"] for line in open(args.eval_prompts)]
        convs = real_prompts.train_conversations(args.conversation_offset + args.num_conversations,
                                                 seed=args.seed)[args.conversation_offset:]
        t = time.perf_counter()
        samples = generate_data(target, tok, evals_conv + convs, batch=args.gen_batch, max_new=args.max_new_tokens,
                                minutes=args.gen_minutes, seed=args.seed)
        gen_seconds = time.perf_counter() - t
        evals = [x for x in samples if x.conv < len(evals_conv)]
        samples = [x for x in samples if x.conv >= len(evals_conv)]
        torch.save([vars(x) for x in evals], eval_path)
        torch.save([vars(x) for x in samples], data_path)
        info = {"conversations": len(samples), "tokens": sum(len(s.tokens) for s in samples),
                "answer_tokens": sum(int(s.answer.sum()) for s in samples), "gen_seconds": gen_seconds,
                "gen_dtype": args.gen_dtype, "gen_batch": args.gen_batch, "max_new_tokens": args.max_new_tokens}
        json.dump(info, open(gen_info_path, "w"), indent=2)
    return load_samples(data_path), load_samples(eval_path), json.load(open(gen_info_path))

