"""Tiny, offline example checkpoints in the exact released layouts: a Llama/Qwen2 target and EAGLE-1/EAGLE-3 heads.

Used by `eagle-convert demo`, the tests and the benchmarks. `agree=True` builds a head that provably predicts what its
target will say: a target whose attention outputs are zero (o_proj = 0) and whose MLPs after the first are zero
(down_proj = 0) is a function of the current token only, at the full cost of its depth, and an EAGLE-1 head whose
fc passes the embedding through, whose attention is zeroed the same way and which copies that layer's MLP and
post-attention norm reproduces the target's pre-norm state; with an all-ones final norm (a positive rescaling) the
argmax through the shared LM head is the target's own."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import save_file

WORDS = ["<unk>", "<s>", "</s>"]  # ids 0..2; the rest are "t<i>" as in tests/golden
ROLES = ["<|system|>", "<|user|>", "<|assistant|>", "<|tool|>"]  # the text tokenizer's role headers, ids from 256
# Every printable ASCII character but space (whitespace splits words), alone and as a word's continuation: with them
# any English text (the built-in prompts and long-context documents) tokenizes without <unk>.
CHARACTERS = [chr(c) for c in range(33, 127)]


@dataclass
class TinyConfig:
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int = 128
    vocab_size: int = 256
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = False
    model_type: str = "llama"  # or "qwen2" (q/k/v biases)
    torch_dtype: str = "float32"
    # False: the word-level "t<i>" tokenizer and bare template the tests' numbers were made with (tests/golden's);
    # True: "t<i>" words plus characters, and a chat template with role headers (the demo pair: every README command)
    text_tokenizer: bool = False
    extra: dict = field(default_factory=dict)

    def hf_config(self) -> dict:
        arch = "Qwen2ForCausalLM" if self.model_type == "qwen2" else "LlamaForCausalLM"
        cfg = {
            "architectures": [arch], "model_type": self.model_type, "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size, "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads, "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.hidden_size // self.num_attention_heads, "hidden_act": "silu",
            "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": self.rope_theta,
            "tie_word_embeddings": self.tie_word_embeddings, "vocab_size": self.vocab_size, "bos_token_id": 1,
            "eos_token_id": 2, "torch_dtype": self.torch_dtype,
        }
        if self.model_type == "llama":
            cfg["attention_bias"] = False
        cfg.update(self.extra)
        return cfg



# The demo pair's shapes (`eagle-convert demo`, the README's Python example): one layer, small enough to run in seconds;
# 512 ids hold the text tokenizer (t<i> words, role headers, characters); 16k positions take the README's
# `--context-lengths 1k,2k,4k,8k` with its 256 new tokens.
DEMO_CONFIG = TinyConfig(hidden_size=64, num_hidden_layers=1, vocab_size=512, text_tokenizer=True,
                         extra={"max_position_embeddings": 16384})

def _rand(gen: torch.Generator, *shape: int, scale: float = 0.05) -> torch.Tensor:
    return torch.randn(*shape, generator=gen) * scale


def _norm(gen: torch.Generator, n: int) -> torch.Tensor:
    return 1.0 + _rand(gen, n, scale=0.1)


def target_tensors(cfg: TinyConfig, seed: int = 0, zero_attention: bool = False) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    h, i, v = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    kv = cfg.num_key_value_heads * (h // cfg.num_attention_heads)
    t = {"model.embed_tokens.weight": _rand(g, v, h, scale=1.0), "model.norm.weight": _norm(g, h)}
    for n in range(cfg.num_hidden_layers):
        p = f"model.layers.{n}."
        t.update({
            p + "self_attn.q_proj.weight": _rand(g, h, h, scale=0.2),
            p + "self_attn.k_proj.weight": _rand(g, kv, h, scale=0.2),
            p + "self_attn.v_proj.weight": _rand(g, kv, h, scale=0.2),
            p + "self_attn.o_proj.weight": _rand(g, h, h, scale=0.2),
            p + "mlp.gate_proj.weight": _rand(g, i, h, scale=0.2), p + "mlp.up_proj.weight": _rand(g, i, h, scale=0.2),
            p + "mlp.down_proj.weight": _rand(g, h, i, scale=0.2),
            p + "input_layernorm.weight": _norm(g, h), p + "post_attention_layernorm.weight": _norm(g, h),
        })
        if zero_attention:  # attention output zero everywhere, MLPs after the first zero: a function of the token
            t[p + "self_attn.o_proj.weight"].zero_()
            if n > 0:
                t[p + "mlp.down_proj.weight"].zero_()
        if cfg.model_type == "qwen2":
            for proj, width in (("q", h), ("k", kv), ("v", kv)):
                t[p + f"self_attn.{proj}_proj.bias"] = _rand(g, width, scale=0.1)
    if zero_attention:
        t["model.norm.weight"] = torch.ones(h)
    if not cfg.tie_word_embeddings:
        t["lm_head.weight"] = _rand(g, v, h, scale=0.5)
    return t


# Zephyr's shape: a role header before each message, EOS after it; the generation prompt is the assistant header, so
# SpecForge's assistant spans (benchmark/token_counts.assistant_markers) are found in it.
ROLE_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }}{{ eos_token }} "
                 "{% endfor %}{% if add_generation_prompt %}<|assistant|> {% endif %}")
BARE_TEMPLATE = "{{ bos_token }}{% for m in messages %}{{ m['content'] }} {% endfor %}"


def write_tokenizer(folder: Path, vocab_size: int, *, text: bool = False) -> None:
    """A word-level tokenizer ("t<i>" = id i), a chat template and generation config, like tests/golden's; `text`:
    the demo's (TinyConfig.text_tokenizer) that also covers any ASCII text and renders role headers."""
    added = [{"id": k, "content": w, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for k, w in enumerate(WORDS)]
    model = {"type": "WordLevel", "vocab": _word_vocab(vocab_size, {}), "unk_token": "<unk>"}
    if text:
        pieces = ROLES + CHARACTERS + ["##" + c for c in CHARACTERS]
        if vocab_size < 256 + len(pieces):
            raise ValueError(f"the text tokenizer needs vocab_size >= {256 + len(pieces)}, not {vocab_size}")
        taken = {w: 256 + k for k, w in enumerate(pieces)}  # t3..t255 keep their ids (the tests' prompts use them)
        added += [{**added[0], "id": taken[w], "content": w} for w in ROLES]
        model = {"type": "WordPiece", "vocab": _word_vocab(vocab_size, taken), "unk_token": "<unk>",
                 "continuing_subword_prefix": "##", "max_input_chars_per_word": 100}
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None, "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None,
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": False}, "model": model,
    }
    (folder / "tokenizer.json").write_text(json.dumps(tok))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "chat_template": ROLE_TEMPLATE if text else BARE_TEMPLATE, "tokenizer_class": "PreTrainedTokenizerFast"}))
    (folder / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))


def _word_vocab(vocab_size: int, taken: dict[str, int]) -> dict[str, int]:
    """The special words at 0..2, `taken` pieces at their ids, and "t<i>" at every other id i."""
    used = set(taken.values())
    return ({w: k for k, w in enumerate(WORDS)} | taken
            | {f"t{k}": k for k in range(len(WORDS), vocab_size) if k not in used})


def save_checkpoint(folder: Path, config: dict, tensors: dict[str, torch.Tensor], *, shards: int = 1,
                    fmt: str = "safetensors", last_shard: tuple[str, ...] = ("lm_head.weight",)) -> None:
    """Write an HF checkpoint: one file, or `shards` files plus an index, with `last_shard` tensors in the last."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    ext = "safetensors" if fmt == "safetensors" else "bin"
    stem = "model" if fmt == "safetensors" else "pytorch_model"

    def save(part: dict[str, torch.Tensor], name: str) -> None:
        part = {k: v.contiguous() for k, v in part.items()}
        (save_file(part, folder / name, metadata={"format": "pt"}) if fmt == "safetensors"
         else torch.save(part, folder / name))

    if shards == 1:
        save(tensors, f"{stem}.{ext}")
        return
    names = sorted(n for n in tensors if n not in last_shard)
    groups = [names[k::shards - 1] for k in range(shards - 1)] + [[n for n in last_shard if n in tensors]]
    weight_map = {}
    for k, group in enumerate(groups):
        file = f"{stem}-{k + 1:05d}-of-{shards:05d}.{ext}"
        save({n: tensors[n] for n in group}, file)
        weight_map.update({n: file for n in group})
    index = {"metadata": {"total_size": sum(t.nbytes for t in tensors.values())}, "weight_map": weight_map}
    (folder / f"{stem}.{ext}.index.json").write_text(json.dumps(index, indent=2))


def make_target(folder: Path, cfg: TinyConfig | None = None, *, seed: int = 0, shards: int = 1,
                fmt: str = "safetensors", zero_attention: bool = False) -> dict[str, torch.Tensor]:
    cfg = cfg or TinyConfig()
    tensors = target_tensors(cfg, seed, zero_attention)
    save_checkpoint(folder, cfg.hf_config(), tensors, shards=shards, fmt=fmt)
    write_tokenizer(folder, cfg.vocab_size, text=cfg.text_tokenizer)
    return tensors


def eagle1_head_tensors(cfg: TinyConfig, target: dict[str, torch.Tensor], *, seed: int = 1, fc_bias: bool = True,
                        embed: bool = True, agree: bool = False) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    h, i = cfg.hidden_size, cfg.intermediate_size
    kv = cfg.num_key_value_heads * (h // cfg.num_attention_heads)
    p = "layers.0."
    t = {
        "fc.weight": _rand(g, h, 2 * h, scale=0.1),
        p + "self_attn.q_proj.weight": _rand(g, h, h, scale=0.2),
        p + "self_attn.k_proj.weight": _rand(g, kv, h, scale=0.2),
        p + "self_attn.v_proj.weight": _rand(g, kv, h, scale=0.2),
        p + "self_attn.o_proj.weight": _rand(g, h, h, scale=0.2),
        p + "mlp.gate_proj.weight": _rand(g, i, h, scale=0.2), p + "mlp.up_proj.weight": _rand(g, i, h, scale=0.2),
        p + "mlp.down_proj.weight": _rand(g, h, i, scale=0.2), p + "post_attention_layernorm.weight": _norm(g, h),
    }
    if fc_bias:
        t["fc.bias"] = _rand(g, h, scale=0.05)
    if cfg.model_type == "qwen2":
        for proj, width in (("q", h), ("k", kv), ("v", kv)):
            t[p + f"self_attn.{proj}_proj.bias"] = _rand(g, width, scale=0.1)
    if agree:  # see the module docstring
        t["fc.weight"] = torch.cat([torch.eye(h), torch.zeros(h, h)], dim=1)
        if fc_bias:
            t["fc.bias"] = torch.zeros(h)
        t[p + "self_attn.o_proj.weight"] = torch.zeros(h, h)
        for name in ("mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
                     "post_attention_layernorm.weight"):
            t[p + name] = target["model.layers.0." + name].clone()
    if embed:
        t["embed_tokens.weight"] = target["model.embed_tokens.weight"].clone()
    return t


def eagle1_release_config(cfg: TinyConfig, *, fc_bias: bool) -> dict:
    """A SafeAILab-style config: the target family's config, one layer, `bias` = fc bias, a 2048 position limit."""
    c = cfg.hf_config()
    c.update(num_hidden_layers=1, max_position_embeddings=2048, bias=fc_bias)
    c.pop("attention_bias", None)
    if cfg.model_type == "qwen2":
        c["qkv_bias"] = True
    return c


def make_eagle1_head(folder: Path, cfg: TinyConfig, target: dict[str, torch.Tensor], *, fmt: str = "bin",
                     dtype: torch.dtype = torch.float32, **kwargs) -> dict[str, torch.Tensor]:
    tensors = {k: v.to(dtype) for k, v in eagle1_head_tensors(cfg, target, **kwargs).items()}
    save_checkpoint(folder, eagle1_release_config(cfg, fc_bias="fc.bias" in tensors), tensors, fmt=fmt)
    return tensors


def make_eagle3_head(folder: Path, cfg: TinyConfig, target: dict[str, torch.Tensor], *, draft_vocab: int = 64,
                     seed: int = 2, embed: bool = False, prefix: str = "midlayer.", fmt: str = "safetensors",
                     aux_layer_ids: list[int] | None = None) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    h, i, v = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    kv = cfg.num_key_value_heads * (h // cfg.num_attention_heads)
    used = torch.sort(torch.randperm(v, generator=g)[:draft_vocab]).values
    t2d = torch.zeros(v, dtype=torch.bool)
    t2d[used] = True
    t = {
        "fc.weight": _rand(g, h, 3 * h, scale=0.1), "norm.weight": _norm(g, h),
        "lm_head.weight": _rand(g, draft_vocab, h, scale=0.5),
        "d2t": (used - torch.arange(draft_vocab)).to(torch.int64), "t2d": t2d,
        prefix + "self_attn.q_proj.weight": _rand(g, h, 2 * h, scale=0.2),
        prefix + "self_attn.k_proj.weight": _rand(g, kv, 2 * h, scale=0.2),
        prefix + "self_attn.v_proj.weight": _rand(g, kv, 2 * h, scale=0.2),
        prefix + "self_attn.o_proj.weight": _rand(g, h, h, scale=0.2),
        prefix + "mlp.gate_proj.weight": _rand(g, i, h, scale=0.2),
        prefix + "mlp.up_proj.weight": _rand(g, i, h, scale=0.2),
        prefix + "mlp.down_proj.weight": _rand(g, h, i, scale=0.2),
        prefix + "input_layernorm.weight": _norm(g, h), prefix + "hidden_norm.weight": _norm(g, h),
        prefix + "post_attention_layernorm.weight": _norm(g, h),
    }
    if embed:
        t["embed_tokens.weight"] = target["model.embed_tokens.weight"].clone()
    c = cfg.hf_config()
    c.update(architectures=["LlamaForCausalLMEagle3"], num_hidden_layers=1, max_position_embeddings=2048,
             draft_vocab_size=draft_vocab)
    c.pop("attention_bias", None)
    if aux_layer_ids is not None:
        c["eagle_aux_hidden_state_layer_ids"] = aux_layer_ids
    save_checkpoint(folder, c, t, fmt=fmt)
    return t
