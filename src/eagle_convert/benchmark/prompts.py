"""Benchmark prompts: a small built-in set written for this project, and JSONL files in the MT-bench layout
({"question_id", "turns": [...]}, later turns answered in context) or {"prompt": "..."} lines."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from tokenizers import Tokenizer

from ..errors import EagleConvertError, PromptTooLongError
from ..io.text import text_lines
from .token_head import encode_head

T = TypeVar("T")
SAMPLE_TOKENS = 1 << 14  # what the unknown-token check reads of a text: its share settles long before that


class PromptFileError(EagleConvertError, ValueError):
    """A prompts file that is not JSONL of {"question_id", "turns": [...]} or {"prompt": ...} objects."""


@dataclass(frozen=True)
class Prompt:
    id: str
    turns: tuple[str, ...]
    token_ids: tuple[int, ...] | None = None  # a pre-tokenized single-turn prompt: no tokenizer, no template
    category: str | None = None  # MT-bench's "category" (built-in prompts: their id); gates compare τ per category


# A small built-in set, written for this project, one or two per MT-bench category; two are two-turn conversations.
BUILTIN_PROMPTS = (
    Prompt("writing", ("Write a short travel blog post about a weekend in a coastal town, with one paragraph on the "
                       "food and one on the people you met.", "Rewrite your post so that every sentence starts "
                       "with the letter A.")),
    Prompt("roleplay", ("You are a lighthouse keeper in 1890. Describe your evening routine to a visiting child.",)),
    Prompt("reasoning", ("Anna is taller than Ben. Ben is taller than Carl. Dana is shorter than Carl. Who is the "
                         "second shortest? Explain step by step.",)),
    Prompt("math", ("A train travels 180 km in 2 hours and then 120 km in 1.5 hours. What is its average speed for "
                    "the whole trip? Show your work.", "If it then returns the whole way at 100 km/h, what is the "
                    "average speed for the round trip?")),
    Prompt("coding", ("Write a Python function that returns the n-th Fibonacci number iteratively, with a docstring "
                      "and two doctests.",)),
    Prompt("extraction", ("List every city and year mentioned in this text as JSON: 'The congress met in Vienna in "
                          "1814, moved to Paris in 1815 and ended in London two years later.'",)),
    Prompt("stem", ("Explain why the sky is blue, then explain why sunsets are red, for a high-school student.",)),
    Prompt("humanities", ("Summarise the main causes of the French Revolution in five bullet points.",)),
)


BUILTIN_PROMPTS = tuple(Prompt(p.id, p.turns, category=p.id) for p in BUILTIN_PROMPTS)  # one per category


def _category(item: dict) -> str | None:
    category = item.get("category")
    return None if category is None else str(category)


def read_jsonl(path: str | Path, parse: Callable[[dict, int], T],
               refuse: Callable[[int, Exception], EagleConvertError]) -> list[T]:
    """Each non-empty line of a JSONL file through `parse(object, line number)`. A line that fails (not JSON, a key
    missing or of the wrong type) is refused as `refuse(line number, what failed)` says: one paragraph naming it; a
    file that is not UTF-8, as io/text.py refuses it. Read a line at a time: the rows are kept, the file's text not."""
    rows = []
    for number, line in text_lines(path):
        if not line.strip():
            continue
        try:
            rows.append(parse(_json_row(line), number))
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise refuse(number, error) from error
    return rows


def _json_row(line: str) -> object:
    try:
        return json.loads(line)
    except RecursionError as error:  # json's parser gives up past Python's recursion limit: no row is that deep
        raise ValueError("its JSON is nested too deeply to read") from error


def _prompt(item: dict, number: int) -> Prompt:
    if isinstance(item, dict) and "prompt_ids" in item:
        ids = item["prompt_ids"]
        if not ids or not all(isinstance(i, int) and i >= 0 for i in ids):
            raise ValueError("prompt_ids must be a non-empty list of token ids")
        return Prompt(str(item.get("id", number)), (f"<{len(ids)} token ids>",), tuple(ids), _category(item))
    turns = tuple(user_turns(item))
    return Prompt(str(item.get("question_id", item.get("id", number))), turns, category=_category(item))


def user_turns(item: dict) -> list[str]:
    """A row's "turns" (a non-empty list of strings) or its one "prompt" string; a ValueError that says which is
    wrong otherwise."""
    if not isinstance(item, dict):
        raise ValueError(f"the line is a JSON {type(item).__name__}, not an object")
    if "turns" not in item and "prompt" not in item:
        raise ValueError(f"no \"turns\" or \"prompt\" key (keys: {', '.join(map(repr, item)) or 'none'})")
    turns = item["turns"] if "turns" in item else [item["prompt"]]
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) for t in turns):
        raise ValueError('"turns" must be a non-empty list of strings, "prompt" a string')
    return turns


def load_prompts(path: str | Path) -> list[Prompt]:
    """JSONL: MT-bench lines {"question_id": ..., "turns": [...]}, {"prompt": "..."}, or pre-tokenized
    {"prompt_ids": [...]} (id: "question_id", "id" or the line number)."""
    prompts = read_jsonl(path, _prompt, lambda number, error: PromptFileError(
        f"{path}, line {number}: not a prompt ({error}).",
        'Each line must be {"question_id": ..., "turns": ["..."]}, {"prompt": "..."} or {"prompt_ids": [1, 2, ...]}.'))
    if not prompts:
        raise PromptFileError(f"{path} holds no prompts.", "Give a JSONL file with one prompt object per line.")
    return prompts


def check_prompt_fits(prompt: Prompt, turn: int, num_tokens: int | None, max_new_tokens: int,
                      limit: int | None) -> None:
    """Refuse a turn whose prompt + max_new_tokens pass the target's max_position_embeddings (`limit`; None: none
    stated), as vLLM's server refuses prompt + max_tokens > max_model_len: past it the target runs at positions it
    was never trained for, and the answer would be benched in silence where an engine says no. `num_tokens` None:
    more than `limit` (encode_fitting stops counting there)."""
    if limit is None or (num_tokens is not None and num_tokens + max_new_tokens <= limit):
        return
    which = f"Prompt {prompt.id!r}" + (f" (turn {turn + 1})" if len(prompt.turns) > 1 else "")
    if num_tokens is None:
        raise PromptTooLongError(
            f"{which} is more than {limit} tokens long (counted no further), more than the target's "
            f"max_position_embeddings ({limit}) before any of --max-new-tokens {max_new_tokens}.",
            "To bench it, shorten the prompt (it alone fills the context); engines refuse such a request too.")
    room = limit - num_tokens
    what_to_do = (f"lower --max-new-tokens to at most {room}, or shorten the prompt" if room >= 1 else
                  "shorten the prompt (it alone fills the context)")
    raise PromptTooLongError(
        f"{which} is {num_tokens} tokens long; with --max-new-tokens {max_new_tokens} it needs "
        f"{num_tokens + max_new_tokens} positions, more than the target's max_position_embeddings ({limit}).",
        f"To bench it, {what_to_do}; engines refuse such a request too.")


def encode_fitting(tokenizer: Tokenizer, text: str, prompt: Prompt, turn: int, max_new_tokens: int,
                   limit: int | None) -> list[int]:
    """encode(text) (no special tokens added), refused as check_prompt_fits refuses; past `limit` tokens the text
    is refused from a bounded head (token_head.py), so a 10 MB prompt costs what `limit` tokens cost."""
    if limit is None:
        ids = tokenizer.encode(text, add_special_tokens=False).ids
    else:
        head = encode_head(tokenizer, text, limit)
        ids = None if head.truncated else head.ids  # not truncated: the whole text's encoding
    check_prompt_fits(prompt, turn, None if ids is None else len(ids), max_new_tokens, limit)
    return ids


def sample_ids(tokenizer: Tokenizer, text: str) -> list[int]:
    """A text's first SAMPLE_TOKENS tokens (all of a shorter one), for checks on what a text is made of (the unknown
    token's share): what a target reads of a prompt or document, at a cost bounded whatever the text's length."""
    return encode_head(tokenizer, text, SAMPLE_TOKENS).ids
