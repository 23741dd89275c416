"""Counting a corpus's tokens the way a producer does, for `vocab-map build`: the target's tokenizer.json and chat
template through our renderer (chat.py), then the producer's loss mask and length rule (vocab/selection.py's table).
One pass gives the counts for every N; they are cached in a file keyed by the corpus, the tokenizer and template,
the producer and the length limit, so sweeping N re-reads nothing.

Masks (what each producer trains on, so what it counts):
* assistant-span (SpecForge, EAGLE, NeMo): the whole conversation rendered once (no generation prompt); counted are
  the tokens from after each assistant header up to and including its end-of-turn marker, located as SpecForge does
  (regex on the text, token index = length of the re-encoded prefix). The header and end-of-turn marker are read off
  the target's own template (what SpecForge's template registry states by hand).
* after-generation-prompt (speculators): one row per assistant turn (not the first message): tokens after the render
  of the conversation so far with the generation prompt; a turn whose context alone fills --max-length is skipped.
* all-tokens (ModelOpt): every template token, all conversations rendered as one message list, as its script does.
Tokenizing is bounded by --max-length (token_head.py): a render is encoded only up to a prefix that settles its first
max_length tokens, so a 10 MB line costs what 2048 tokens cost. ModelOpt keeps every token: its render is encoded in
windows spliced where two cuts agree (token_head.encode_windows), so the tokens held at once are bounded too.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import EagleConvertError
from ..io.digest import hash_file_range
from ..io.interrupts import immediate, shielded
from ..io.progress import Progress, tracked
from ..vocab.counts import TokenCounts
from ..vocab.rules import SelectionRule, rule_for
from .chat import ChatTokenizer
from .prompts import PromptFileError, read_jsonl, user_turns
from .token_head import HeadEncoder, encode_head, encode_windows, tokens_before

COUNT_FORMAT = 1  # bump when counting changes, so old cache files are not reused
SENTINEL = "EAGLECONVERTSENTINEL"


class TemplateMarkerError(EagleConvertError, ValueError):
    """The target's chat template does not show where an assistant turn starts and ends."""


@dataclass(frozen=True)
class CountSettings:
    compat: str
    max_length: int = 2048
    cache_dir: Path | None = None  # None: $XDG_CACHE_HOME/eagle-convert/vocab-counts (~/.cache/...)
    progress: bool = True


@dataclass
class CountResult:
    counts: TokenCounts
    cache_file: Path
    cache_used: bool
    prompt_only_rows: int  # rows with no assistant turn: nothing to count under a loss mask


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "eagle-convert" / "vocab-counts"


def _normalize(message: dict) -> dict:
    """ShareGPT {"from", "value"} or OpenAI {"role", "content"}; human/gpt as SpecForge and speculators map them."""
    if not isinstance(message, dict):
        raise ValueError(f"a turn is a JSON {type(message).__name__}; each turn must be an object "
                         '{"from": ..., "value": ...} or {"role": ..., "content": ...}')
    role = message.get("role", message.get("from", ""))
    role = {"human": "user", "gpt": "assistant"}.get(role, role)
    return {"role": role, "content": message.get("content") or message.get("value") or ""}


def _conversation(item: dict, number: int) -> list[dict]:
    if isinstance(item, dict) and "prompt_ids" in item:
        raise ValueError("pre-tokenized prompt_ids have no text to render through the chat template")
    return _row_messages(item)


def _row_messages(item: dict) -> list[dict]:
    for key in ("conversations", "messages", "conversation"):
        if isinstance(item, dict) and key in item:
            if not isinstance(item[key], list):
                raise ValueError(f'"{key}" is a JSON {type(item[key]).__name__}; it must be a list of turns')
            return [_normalize(m) for m in item[key]]
    return [{"role": "user", "content": t} for t in user_turns(item)]


def read_conversations(path: str | Path) -> list[list[dict]]:
    """JSONL rows: {"conversations"|"messages": [...]} (ShareGPT or OpenAI messages) or the prompt forms bench reads
    ({"turns": [...]}, {"prompt": ...}: user turns only). Pre-tokenized rows cannot be rendered and are refused."""
    rows = read_jsonl(path, _conversation, lambda number, error: PromptFileError(
        f"{path}, line {number}: not a conversation ({error}).",
        'Each line must be {"conversations": [{"from": "human", "value": ...}, ...]}, '
        '{"messages": [{"role": ..., "content": ...}]}, {"turns": [...]} or {"prompt": ...}.'))
    if not rows:
        raise PromptFileError(f"{path} holds no conversations.", "Give a JSONL file with one conversation per line.")
    return rows


def assistant_markers(chat: ChatTokenizer) -> tuple[str, str]:
    """(assistant header, end-of-turn) as the template renders them: the generation prompt is the header; what
    follows an assistant message's content in its render is the end of turn."""
    user = [{"role": "user", "content": "hi"}]
    bare, prompted = chat.render(user, add_generation_prompt=False), chat.render(user, add_generation_prompt=True)
    full = chat.render(user + [{"role": "assistant", "content": SENTINEL}], add_generation_prompt=False)
    header = prompted[len(bare):] if prompted.startswith(bare) else ""
    if not header or not full.startswith(prompted) or SENTINEL not in full:
        raise TemplateMarkerError("The target's chat template has no generation prompt that starts an assistant "
                                  "turn, so the assistant spans SpecForge trains on cannot be located.",
                                  "Use --compat speculators (boundary by generation prompt) or modelopt (all tokens).")
    return header, full[full.index(SENTINEL) + len(SENTINEL):]


def specforge_messages(messages: list[dict]) -> list[dict]:
    """SpecForge's GeneralParser.parse before rendering: a leading system message kept, other leading non-user
    messages dropped, and the conversation cut at the first message out of role order (tool messages aside)."""
    kept = messages[:1] if messages and messages[0]["role"] == "system" else []
    rest = messages[len(kept):]
    while rest and rest[0]["role"] != "user":
        rest = rest[1:]
    for j, message in enumerate(rest):
        if j and message["role"] == "assistant" and rest[j - 1]["role"] not in ("user", "tool"):
            break
        if j and message["role"] == "tool" and rest[j - 1]["role"] not in ("assistant", "tool"):
            break
        kept.append(message)
    return kept


def _span_sample(chat: ChatTokenizer, messages: list[dict], pattern: re.Pattern, rule: SelectionRule,
                 max_length: int) -> list[int] | None:
    if rule.compat == "specforge":
        messages = specforge_messages(messages)
    text = chat.render(messages, add_generation_prompt=False)
    head = encode_head(chat.tokenizer, text, max_length)  # never more than max_length tokens are kept
    if head.truncated and rule.length == "drop":
        return None
    ids = head.ids
    mask = [0] * len(ids)
    # SpecForge's index arithmetic: a span's token bounds are the lengths of its re-encoded text prefixes
    for match in pattern.finditer(text):
        start, end = (min(tokens_before(chat.tokenizer, text, head, c, max_length), len(ids)) for c in match.span(1))
        mask[start:end] = [1] * (end - start)
    return [i for i, m in zip(ids, mask) if m]


def _boundary_rows(chat: ChatTokenizer, messages: list[dict], max_length: int) -> Iterator[list[int]]:
    # vLLM's /render truncates on the right: each render's first max_length tokens, never encoded past them
    encode = HeadEncoder(chat.tokenizer, max_length)
    for j, turn in enumerate(messages):
        if turn["role"] != "assistant" or j == 0:
            continue
        prompt = encode(chat.render(messages[:j], add_generation_prompt=True)).ids
        if len(prompt) >= max_length:
            continue  # speculators skips a turn whose context alone fills the window
        full = encode(chat.render(messages[:j + 1], add_generation_prompt=False)).ids
        boundary = len(prompt) if full[:len(prompt)] == prompt else _common_prefix(prompt, full)
        yield full[boundary:]


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _progress(items: list, enabled: bool, what: str):
    return tracked(items, what, "conversation", enabled=enabled)


def _count_windows(counts: TokenCounts, chat: ChatTokenizer, text: str, settings: CountSettings) -> None:
    """ModelOpt's one sample, every token of `text` in stream order, encoded a bounded window at a time."""
    with Progress(f"counting tokens ({settings.compat})", len(text), "character", enabled=settings.progress) as shown:
        for ids, settled in encode_windows(chat.tokenizer, text):
            counts.add_sample(ids, ascending_per_sample=False)
            shown.update(settled - shown.done)
    counts.samples = 1  # one render, added window by window


def count_corpus(chat: ChatTokenizer, rows: list[list[dict]], settings: CountSettings) -> tuple[TokenCounts, int]:
    """The counts and the number of rows without an assistant turn. One pass over the rows."""
    rule = rule_for(settings.compat)
    counts = TokenCounts()
    prompt_only = sum(1 for messages in rows if not any(m["role"] == "assistant" for m in messages))
    if rule.mask == "all-tokens":
        flat = [m for messages in rows for m in messages]  # ModelOpt renders every conversation as one message list
        _count_windows(counts, chat, chat.render(flat, add_generation_prompt=False), settings)
        return counts, prompt_only
    if rule.mask == "assistant-span":
        header, end = assistant_markers(chat)
        pattern = re.compile(re.escape(header) + r"([\s\S]*?(?:" + re.escape(end) + "|$))", re.DOTALL)
    for messages in _progress(rows, settings.progress, f"counting tokens ({settings.compat})"):
        samples = (_boundary_rows(chat, messages, settings.max_length) if rule.mask == "after-generation-prompt"
                   else [_span_sample(chat, messages, pattern, rule, settings.max_length)])
        for ids in samples:
            if ids is None:
                counts.skipped += 1
            else:
                counts.add_sample(ids, ascending_per_sample=rule.ascending_per_sample)
    return counts, prompt_only


def cache_key(corpus: Path, target_dir: Path, chat: ChatTokenizer, settings: CountSettings) -> str:
    digest = hashlib.sha256()
    for part in (f"v{COUNT_FORMAT}", settings.compat, str(settings.max_length), chat.chat_template or "",
                 json.dumps(chat.special_tokens, sort_keys=True)):
        digest.update(part.encode() + b"\0")
    for path in (corpus, target_dir / "tokenizer.json"):  # hashed from a map of the file: memory stays flat
        digest.update(bytes.fromhex(hash_file_range(str(path), 0, path.stat().st_size)))
    return digest.hexdigest()


def count_tokens(target_dir: str | Path, corpus: str | Path, settings: CountSettings) -> CountResult:
    """The counts for this corpus, target and producer: from the cache when counted before (the corpus is then only
    hashed, not parsed or rendered), else counted in one pass and cached."""
    target_dir, corpus = Path(target_dir), Path(corpus)
    chat = ChatTokenizer.from_dir(target_dir)
    cache_file = (settings.cache_dir or default_cache_dir()) / f"{cache_key(corpus, target_dir, chat, settings)}.json"
    if cache_file.is_file():
        cached = json.loads(cache_file.read_text())
        return CountResult(TokenCounts.from_json(cached), cache_file, True, cached["prompt_only_rows"])
    with immediate():  # nothing written yet, and a long line is one GIL-holding tokenizer call: Ctrl-C acts at once
        counts, prompt_only = count_corpus(chat, read_conversations(corpus), settings)
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    partial = cache_file.with_suffix(f".{os.getpid()}.tmp")
    with shielded():  # a Ctrl-C here is acted on after the rename, so that no .tmp file is left behind
        partial.write_text(json.dumps({**counts.as_json(), "prompt_only_rows": prompt_only}))
        os.replace(partial, cache_file)  # atomic: a killed run leaves no half-written cache entry
    return CountResult(counts, cache_file, False, prompt_only)
