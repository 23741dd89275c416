"""The target's own greedy output on a prompt file, as token ids: the stream `vocab-map coverage` measures draft
vocabularies against (what a verify would check drafts against at temperature 0). Each row's first user turn (with
a system message before it, if any) through the target's chat template, then plain greedy decoding with our runner
up to `max_new_tokens` or EOS (kept: a draft must propose it too). Later turns would need the target's own earlier
answers, so they are not run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..io.interrupts import immediate
from ..io.progress import Progress
from ..runner.speculate import plain_generate
from ..runner.text_model import runner_target
from .chat import ChatTokenizer
from .prompts import Prompt, PromptFileError, encode_fitting, sample_ids
from .session import load_target, local_checkpoint
from .token_counts import read_conversations
from .unknown_tokens import warn_mostly_unknown


@dataclass(frozen=True)
class Stream:
    ids: tuple[tuple[int, ...], ...]  # per prompt, the generated ids (prompt excluded)
    max_new_tokens: int

    @property
    def prompts(self) -> int:
        return len(self.ids)

    @property
    def tokens(self) -> int:
        return sum(len(i) for i in self.ids)

    def flat(self) -> list[int]:
        return [t for ids in self.ids for t in ids]

    def to_dict(self) -> dict:
        return {"prompts": self.prompts, "generated_tokens": self.tokens, "max_new_tokens": self.max_new_tokens,
                "decoding": "greedy, our runner, fp32, first user turn of each row"}


def first_turn(messages: list[dict]) -> list[dict]:
    """The messages up to and including the first user message."""
    for i, message in enumerate(messages):
        if message["role"] == "user":
            return messages[: i + 1]
    raise PromptFileError("A prompts row has no user message to answer.",
                          "Give rows with at least one user turn ({\"turns\": [...]} or a conversation).")


def greedy_stream(target: str | Path, prompts: str | Path, max_new_tokens: int, *, progress: bool = False) -> Stream:
    chat, ckpt = ChatTokenizer.from_dir(target), local_checkpoint(target)
    limit = runner_target(ckpt).config.get("max_position_embeddings")
    with immediate():  # nothing written yet; encoding a long prompt is one GIL-holding call: Ctrl-C acts at once
        turns = [first_turn(messages) for messages in read_conversations(prompts)]
        # a prompt that cannot fit the target's positions with max_new_tokens is refused as bench refuses it, from
        # a bounded head: a 10 MB prompt is not encoded whole first
        encoded = [encode_fitting(chat.tokenizer, chat.render(turn), Prompt(f"row {n}", (turn[-1]["content"],)), 0,
                                  max_new_tokens, limit) for n, turn in enumerate(turns, start=1)]
        warn_mostly_unknown(chat.tokenizer, [(f"row {n}", sample_ids(chat.tokenizer, turn[-1]["content"]))
                                             for n, turn in enumerate(turns, start=1)], "prompts")
    model = load_target(ckpt, dtype=torch.float32, device="cpu")
    rows = []
    with Progress("greedy stream", len(encoded), "prompt", enabled=progress) as shown:
        for ids in encoded:
            rows.append(tuple(plain_generate(model, ids, max_new_tokens=max_new_tokens, eos_ids=chat.eos_token_ids)))
            shown.note(tokens=sum(map(len, rows)))
            shown.update()
    return Stream(tuple(rows), max_new_tokens)
