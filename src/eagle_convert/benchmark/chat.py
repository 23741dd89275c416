"""Prompts as the target's users send them: the target's `tokenizer.json` (via `tokenizers`) and its chat template
rendered with jinja2 the way transformers' `apply_chat_template` renders it, without importing transformers.

Matching transformers matters because acceptance depends on the prompt format: a head trained on chat-formatted
data drafts badly on raw text, and a wrong template reads as a broken conversion.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

# The named special tokens transformers hands to every template (its SPECIAL_TOKENS_ATTRIBUTES).
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


class _GenerationTag(jinja2.ext.Extension):
    """transformers' `{% generation %}...{% endgeneration %}` (marks assistant text for masks); here it just renders."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers replaces jinja's tojson, which would HTML-escape the text
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[_GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


@functools.lru_cache(maxsize=8)
def _compiled(template: str) -> jinja2.Template:
    # compiling a chat template costs ~10-40 ms; counting a corpus renders it once per conversation
    return _environment().from_string(template)


def render_chat(template: str, messages: list[dict], *, add_generation_prompt: bool = True,
                special_tokens: dict[str, str] | None = None, **extra) -> str:
    """Render as transformers does: special tokens as variables, `tools`/`documents` present but None (templates test
    `tools is not none`), messages without None-valued keys."""
    messages = [{key: value for key, value in m.items() if value is not None} for m in messages]
    variables = {**(special_tokens or {}), **extra}
    return _compiled(template).render(
        messages=messages, tools=None, documents=None, add_generation_prompt=add_generation_prompt, **variables)


def _token_text(value) -> str | None:
    # tokenizer_config stores a special token as a string or as a serialized AddedToken {"content": ...}
    return value.get("content") if isinstance(value, dict) else value


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def load_chat_template(model_dir: str | Path) -> str | None:
    """`chat_template.jinja` wins over tokenizer_config's `chat_template`, as in transformers; a list of named
    templates yields the one named "default"."""
    model_dir = Path(model_dir)
    if (model_dir / "chat_template.jinja").is_file():
        return (model_dir / "chat_template.jinja").read_text(encoding="utf-8")
    template = _read_json(model_dir / "tokenizer_config.json").get("chat_template")
    if isinstance(template, list):
        named = {t["name"]: t["template"] for t in template}
        if "default" not in named:
            raise ValueError(f"{model_dir}: several chat templates ({sorted(named)}) and none named 'default'")
        template = named["default"]
    return template


def _as_ids(value) -> list[int]:
    if value is None:
        return []
    return [value] if isinstance(value, int) else list(value)


def load_eos_token_ids(model_dir: str | Path, tokenizer: Tokenizer | None = None) -> tuple[int, ...]:
    """Union of `eos_token_id` in generation_config.json and config.json (an int or a list; Llama-3 instruct models
    list several); only when both lack it, the tokenizer's eos_token."""
    model_dir = Path(model_dir)
    ids: list[int] = []
    for name in ("generation_config.json", "config.json"):
        ids += [i for i in _as_ids(_read_json(model_dir / name).get("eos_token_id")) if i not in ids]
    if not ids and tokenizer is not None:
        eos = _token_text(_read_json(model_dir / "tokenizer_config.json").get("eos_token"))
        if eos is not None and tokenizer.token_to_id(eos) is not None:
            ids.append(tokenizer.token_to_id(eos))
    return tuple(ids)


@dataclass
class ChatTokenizer:
    tokenizer: Tokenizer
    chat_template: str | None
    special_tokens: dict[str, str] = field(default_factory=dict)
    eos_token_ids: tuple[int, ...] = ()

    @classmethod
    def from_dir(cls, model_dir: str | Path) -> ChatTokenizer:
        model_dir = Path(model_dir)
        if not (model_dir / "tokenizer.json").is_file():
            raise FileNotFoundError(f"{model_dir} has no tokenizer.json; the bench tokenizes with the target's own "
                                    "fast tokenizer file")
        tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        config = {**_read_json(model_dir / "special_tokens_map.json"),
                  **_read_json(model_dir / "tokenizer_config.json")}
        special = {name: _token_text(config[name]) for name in SPECIAL_TOKEN_NAMES if config.get(name) is not None}
        return cls(tokenizer, load_chat_template(model_dir), special, load_eos_token_ids(model_dir, tokenizer))

    def render(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        if self.chat_template is None:
            raise ValueError("this tokenizer has no chat template; run without one (--chat-template none)")
        return render_chat(self.chat_template, messages, add_generation_prompt=add_generation_prompt,
                           special_tokens=self.special_tokens)

    def encode_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> list[int]:
        """The rendered template already holds BOS and friends, so (as transformers) no special tokens are added."""
        return self.tokenizer.encode(self.render(messages, add_generation_prompt), add_special_tokens=False).ids

    def encode_text(self, text: str) -> list[int]:
        """Raw text, with the special tokens the tokenizer's post-processor adds (typically BOS)."""
        return self.tokenizer.encode(text, add_special_tokens=True).ids

    def decode(self, ids: Iterable[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)
