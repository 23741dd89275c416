"""A small byte-level BPE tokenizer with a ChatML template, trained here (deterministic, < 1 s): the word-level tiny
tokenizer cannot show what a cut inside a word does to BPE merges, and the real SmolLM2 target is not in CI. Same
pipeline as SmolLM2's tokenizer.json (ByteLevel pre-tokenizer with the GPT-2 regex, BPE, ChatML special tokens)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
WORDS = ("the of and to in is that for it was with be on not this are from at which but have an they you were her "
         "there been one all would when if so will more can said who what about out up into some could than time "
         "only like other then also two may first after any these most unbelievable counting tokenizer merges").split()


def sample_text(rng: random.Random, words: int) -> str:
    """Prose with what moves a BPE cut: capitals, punctuation, digits, runs of spaces and newlines, non-ASCII."""
    parts = []
    for _ in range(words):
        word = rng.choice(WORDS)
        roll = rng.random()
        if roll < 0.08:
            word = word.capitalize() + rng.choice([",", ".", "'s", "'re", "!", "?"])
        elif roll < 0.11:
            word = str(rng.randint(0, 99999))
        elif roll < 0.13:
            word = rng.choice(["   ", "\n\n", " \n", "\t"]) + word
        elif roll < 0.15:
            word = rng.choice(["naïve", "日本語", "🙂🙂", "ĳssel", "e\u0301t\u00e9"])
        parts.append(word)
    return " ".join(parts)


def train_bpe(vocab_size: int = 700) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    rng = random.Random(7)
    tokenizer.train_from_iterator([sample_text(rng, 200) for _ in range(60)], trainer)
    return tokenizer


def make_bpe_target(folder: Path) -> Path:
    """tokenizer.json + tokenizer_config.json (ChatML template) that both our ChatTokenizer and transformers read."""
    folder.mkdir(parents=True, exist_ok=True)
    train_bpe().save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": None, "eos_token": "<|im_end|>", "unk_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
        "chat_template": CHATML, "tokenizer_class": "PreTrainedTokenizerFast"}))
    return folder


class EncodeSpy:
    """A tokenizer that records how many characters each text it is asked to encode holds (the bounded-tokenizing
    tests assert no encode call sees more than a bounded prefix)."""

    def __init__(self, tokenizer):
        self.tokenizer, self.lengths = tokenizer, []

    def encode(self, text, add_special_tokens):
        self.lengths.append(len(text))
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens)

    def encode_batch(self, texts, add_special_tokens):
        self.lengths += [len(t) for t in texts]
        return self.tokenizer.encode_batch(texts, add_special_tokens=add_special_tokens)
