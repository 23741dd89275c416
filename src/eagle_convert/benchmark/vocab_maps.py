"""`vocab-map build` and `vocab-map coverage` (api.py is their door): draft vocabulary maps selected from a corpus
counted with the target's chat renderer (token_counts.py), and the share of the target's own greedy tokens each draft
vocabulary cannot propose (coverage.py counts, stream.py decodes)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..vocab.service import MapOutput, VocabMapResult, write_output

if TYPE_CHECKING:
    from .token_counts import CountSettings


def vocab_build(target: str, prompts: str, sizes: list[int], settings: CountSettings,
                output: MapOutput) -> VocabMapResult:
    """Count the corpus once (or read the cached counts) the `settings.compat` producer's way, select every size."""
    import jinja2

    from ..errors import EagleConvertError
    from ..vocab.formats import DEFAULT_FORMAT, format_for
    from ..vocab.head import check_out
    from ..vocab.map import config_vocab_size
    from ..vocab.rules import VocabMapError, rule_for
    from ..vocab.selection import select
    from .chat import ChatTokenizer
    from .token_counts import count_tokens
    from .unknown_tokens import warn_unknown_counts

    folder = Path(target)
    if not (folder / "tokenizer.json").is_file() or not (folder / "config.json").is_file():
        raise VocabMapError(f"{target} is not a local target folder with config.json and tokenizer.json.",
                            "Counting renders the corpus with the target's own tokenizer and chat template; "
                            "download the target first (huggingface-cli download).")
    fmt = format_for(output.format or DEFAULT_FORMAT[rule_for(settings.compat).compat])
    check_out(output.out, output.force, [folder, Path(prompts)])  # before counting: refuse early
    vocab = config_vocab_size(json.loads((folder / "config.json").read_text()))
    if vocab is None:
        raise VocabMapError(f"{target}'s config.json states no vocab_size (nor text_config.vocab_size).",
                            "t2d is sized by the config vocabulary; give the target's own config.json.")
    try:
        counted = count_tokens(folder, prompts, settings)
    except (ValueError, jinja2.TemplateError) as error:
        if isinstance(error, EagleConvertError):
            raise
        raise VocabMapError(f"The target's chat template could not render the corpus: {error}.",
                            "Give a target folder whose tokenizer_config.json (or chat_template.jinja) holds its "
                            "chat template.") from error
    warn_unknown_counts(ChatTokenizer.from_dir(folder).tokenizer, counted.counts.counts, str(prompts))
    maps = [select(counted.counts, n, vocab, settings.compat, special_ids(folder)) for n in sizes]
    files, applied = write_output(maps, output, fmt, [folder, Path(prompts)], describes_head=False)
    counts = {**{k: v for k, v in counted.counts.as_json().items() if k not in ("ids", "counts")},
              "distinct": len(counted.counts.counts), "prompt_only_rows": counted.prompt_only_rows,
              "cache_file": str(counted.cache_file), "cache_used": counted.cache_used}
    return VocabMapResult(files, maps, fmt.name, counts=counts, applied=applied)


def special_ids(folder: Path) -> list[int]:
    """bos, eos, pad, unk: the ids NeMo forces into the draft vocabulary first."""
    from .chat import ChatTokenizer

    chat = ChatTokenizer.from_dir(folder)
    names = ("bos_token", "eos_token", "pad_token", "unk_token")
    ids = [chat.tokenizer.token_to_id(chat.special_tokens[n]) for n in names if n in chat.special_tokens]
    return [i for i in ids if i is not None]


@dataclass(frozen=True)
class CoverageSources:
    """The draft vocabularies `vocab_coverage` measures: one map per size in `sizes`, built from `corpus` (the
    prompts file when None) with `counting`'s producer rules; a map file (`map_file`, any registry format); a head's
    own map (`head`: its d2t, or the whole vocabulary for a head without one)."""
    sizes: tuple[int, ...] = ()
    counting: CountSettings | None = None
    corpus: str | None = None
    map_file: str | None = None
    map_format: str | None = None
    head: str | None = None


@dataclass
class CoverageReport:
    stream: dict  # prompts, generated tokens, max_new_tokens, how it was decoded
    rows: list  # benchmark.coverage.Coverage, one per draft vocabulary
    counts: dict | None = None  # the counting behind built maps: samples, tokens, cache

    def to_dict(self) -> dict:
        return {"stream": self.stream, "rows": [r.to_dict() for r in self.rows], "counts": self.counts}


def _coverage_vocabularies(target: Path, prompts: str, sources: CoverageSources, vocab: int):
    """(label, target ids) per vocabulary, and the counting's summary; every refusal before the target runs."""
    import torch

    from ..checkpoint.open import open_input
    from ..vocab.check import check_map, refuse_errors
    from ..vocab.head import head_facts
    from ..vocab.map import VocabMap
    from ..vocab.rules import VocabMapError
    from ..vocab.selection import select
    from ..vocab.token_map import read_token_map
    from .token_counts import count_tokens

    found, counts = [], None
    if sources.sizes:
        corpus = sources.corpus or prompts
        counted = count_tokens(target, corpus, sources.counting)
        if not counted.counts.tokens:
            raise VocabMapError(f"{corpus}: counting the {sources.counting.compat} way counted no token (rows without "
                                "an assistant turn count nothing under its loss mask).",
                                "Give --corpus with the assistant's answers (the data the head trains on), or "
                                "--compat modelopt, which counts every template token.")
        counts = {"corpus": str(corpus), "compat": sources.counting.compat, "samples": counted.counts.samples,
                  "tokens": counted.counts.tokens, "distinct": len(counted.counts.counts),
                  "cache_file": str(counted.cache_file), "cache_used": counted.cache_used}
        found += [(f"{sources.counting.compat} N={n}",
                   select(counted.counts, n, vocab, sources.counting.compat, special_ids(target)).ids_tensor())
                  for n in sources.sizes]
    if sources.map_file:
        found.append((f"map {sources.map_file}",
                      read_token_map(sources.map_file, vocab, sources.map_format).ids_tensor()))
    if sources.head:
        facts = head_facts(open_input(sources.head, role="draft").checkpoint, vocab)
        refuse_errors(check_map(facts), sources.head)
        if facts.d2t is None:
            found.append((f"head {sources.head} (no d2t: the whole vocabulary)", torch.arange(vocab)))
        else:
            found.append((f"head {sources.head} (d2t)", VocabMap.from_d2t(facts.d2t, vocab).ids_tensor()))
    if not found:
        raise VocabMapError("vocab-map coverage was given no draft vocabulary to measure.",
                            "Pass -n N (with --compat), --map FILE or --head HEAD.")
    return found, counts


def vocab_coverage(target: str, prompts: str, sources: CoverageSources, *, max_new_tokens: int = 128,
                   progress: bool = False) -> CoverageReport:
    """The share of the target's own greedy tokens on `prompts` that each draft vocabulary cannot propose: a hard
    ceiling on per-position acceptance (benchmark/coverage.py counts, benchmark/stream.py decodes)."""
    from ..vocab.map import config_vocab_size
    from ..vocab.rules import VocabMapError
    from .coverage import coverage
    from .stream import greedy_stream

    folder = Path(target)
    if not (folder / "config.json").is_file():
        raise VocabMapError(f"{target} is not a local target folder.", "coverage runs the target: download it first.")
    vocab = config_vocab_size(json.loads((folder / "config.json").read_text()))
    vocabularies, counts = _coverage_vocabularies(folder, prompts, sources, vocab)
    stream = greedy_stream(folder, prompts, max_new_tokens, progress=progress)
    flat = stream.flat()
    return CoverageReport(stream.to_dict(), [coverage(flat, ids, label) for label, ids in vocabularies], counts)
