"""`bench --context-lengths`: acceptance against context length, on real long documents (documents.py).

Protocol, the same in every bucket: for a bucket of n tokens, each document (the first `per_bucket` of them) is cut
to the number of tokens that makes the whole prompt exactly n tokens long, in the target's own tokenizer: the chat
template's opening, the document's START (its first tokens), a blank line, the question (the document's own, or
documents.DEFAULT_QUESTION), the template's closing and generation prompt. The start is kept, not the end, so the
buckets of one document are prefixes of each other: between buckets only the length changes, not the text. The
prompts go to the bench as token ids (both engines see the very same ids), each in the category of its bucket, so the
bench loop, the baseline (lossless check), the reference head and `--engine vllm` run unchanged; this module only
builds the prompts and summarises the report per bucket (the report's `context` block, schema in session.py).

"k" in a length means 1000 tokens (8k = 8000): a target with 8192 positions then still has room for the answer."""

from __future__ import annotations

from pathlib import Path

from ..engines.generation import add_counters, zero_counters
from ..errors import EagleConvertError
from ..io.interrupts import immediate
from ..runner.metrics import merge_stats
from ..settings.bench import ContextSettings
from .bench_report import BenchReport, PromptReport
from .chat import ChatTokenizer
from .documents import Document, DocumentsError, builtin_documents, load_documents
from .prompts import Prompt
from .token_head import encode_head
from .unknown_tokens import warn_mostly_unknown

SENTINEL = "\x00EAGLE-CONVERT-DOCUMENT\x00"


class ContextLengthsError(EagleConvertError, ValueError):
    """--context-lengths that are not a list of positive token counts."""


def parse_lengths(text: str) -> tuple[int, ...]:
    """"1k,2k,4k,8k" -> (1000, 2000, 4000, 8000); plain numbers are tokens. Increasing, no repeats."""
    lengths = []
    for part in filter(None, (p.strip().lower() for p in text.split(","))):
        try:
            value = float(part[:-1]) * 1000 if part.endswith("k") else float(part)
        except ValueError:
            value = 0
        if value < 1 or value != int(value):
            raise ContextLengthsError(f"--context-lengths: {part!r} is not a token count.",
                                      "Give positive counts separated by commas, e.g. 1k,2k,4k,8k (k = 1000) or "
                                      "512,1024.")
        lengths.append(int(value))
    if not lengths or lengths != sorted(set(lengths)):
        raise ContextLengthsError(f"--context-lengths {text!r}: give at least one length, increasing, no repeats.",
                                  "For example 1k,2k,4k,8k.")
    return tuple(lengths)


def bucket_label(length: int) -> str:
    return f"{length // 1000}k" if length % 1000 == 0 else str(length)


def check_buckets_fit(lengths: tuple[int, ...], max_new_tokens: int, limit: int | None) -> None:
    """Refuse buckets the target cannot hold: a bucket of n prompt tokens needs n + max_new_tokens positions, and
    past the target's max_position_embeddings (`limit`; None: none stated) the bench refuses the prompt as an engine
    does (prompts.check_prompt_fits). Said before any document is read: no document can make such a bucket fit."""
    if limit is None:
        return
    over = [n for n in lengths if n + max_new_tokens > limit]
    if not over:
        return
    fit = [bucket_label(n) for n in lengths if n + max_new_tokens <= limit]
    most = limit - max_new_tokens
    what_to_do = (f"Keep the buckets that fit (--context-lengths {','.join(fit)})" if fit else
                  f"Use buckets of at most {most} tokens" if most >= 1 else "Lower --max-new-tokens first")
    raise ContextLengthsError(
        f"--context-lengths {','.join(map(bucket_label, over))}: the target holds {limit} positions (its "
        f"max_position_embeddings), and a bucket of n tokens needs n + --max-new-tokens ({max_new_tokens}) of them, "
        f"so at most {max(most, 0)} tokens fit; longer documents cannot change that.",
        f"{what_to_do}, lower --max-new-tokens, or bench a target with a longer context.")


def _frame(tokenizer: ChatTokenizer, use_template: bool, question: str) -> tuple[list[int], list[int]]:
    """The ids before and after the document: the template rendered around a placeholder, each side encoded alone."""
    content = f"{SENTINEL}\n\n{question}"
    if use_template:
        before, _, after = tokenizer.render([{"role": "user", "content": content}]).partition(SENTINEL)
        return (tokenizer.tokenizer.encode(before, add_special_tokens=False).ids,
                tokenizer.tokenizer.encode(after, add_special_tokens=False).ids)
    return tokenizer.encode_text(""), tokenizer.tokenizer.encode(content.partition(SENTINEL)[2],
                                                                  add_special_tokens=False).ids


def bucket_prompts(target: str | Path, documents: list[Document], context: ContextSettings, *,
                   chat_template: str = "auto") -> tuple[list[Prompt], bool]:
    """Per bucket, the first `per_bucket` documents cut to exactly that many prompt tokens; and whether the chat
    template was used. Refuses (DocumentsError) documents too short for the longest bucket, naming them."""
    tokenizer = ChatTokenizer.from_dir(target)
    use_template = chat_template == "auto" and tokenizer.chat_template is not None
    chosen = documents[:context.per_bucket]
    if len(chosen) < context.per_bucket:
        raise DocumentsError(f"{context.per_bucket} documents per bucket asked, {len(documents)} given.",
                             "Lower --documents-per-bucket or give more documents.")
    longest, short = context.lengths[-1], []
    # a document's first `longest` tokens are all a bucket can keep (its start): a 10 MB document costs what they
    # cost; no engine is started yet, nothing written: a CLI Ctrl-C while tokenizing acts at once
    with immediate():
        framed = [(doc, *_frame(tokenizer, use_template, doc.question),
                   encode_head(tokenizer.tokenizer, doc.text, longest).ids) for doc in chosen]
    warn_mostly_unknown(tokenizer.tokenizer, [(doc.id, ids) for doc, _, _, ids in framed], "documents")
    for doc, before, after, ids in framed:
        if len(before) + len(ids) + len(after) < longest:
            short.append(f"{doc.id!r} ({len(before) + len(ids) + len(after)} tokens with the prompt around it)")
    if short:
        raise DocumentsError(f"Too short for the {bucket_label(longest)} bucket ({longest} tokens): "
                             f"{', '.join(short)}.",
                             "Give longer documents, drop them from the file, or lower the longest --context-lengths.")
    prompts = []
    for length in context.lengths:
        label = bucket_label(length)
        for doc, before, after, ids in framed:
            room = length - len(before) - len(after)
            if room < 1:
                raise ContextLengthsError(f"--context-lengths {length}: the prompt around the document alone takes "
                                          f"{len(before) + len(after)} tokens.", "Use longer context lengths.")
            prompts.append(Prompt(f"{label}/{doc.id}", (f"{doc.id}, first {room} tokens",),
                                  tuple(before + ids[:room] + after), category=label))
    return prompts, use_template


def bucket_blocks(report: BenchReport, lengths: tuple[int, ...], draft_vocab: set[int] | None,
                  checked: bool) -> list[dict]:
    """Per bucket: acceptance pooled over its prompts, the rounds drafting was off / every draft rejected, the share
    of emitted tokens the draft vocabulary holds, and the lossless check."""
    k = report.settings["k"]
    blocks = []
    for length in lengths:
        label = bucket_label(length)
        prompts = [p for p in report.prompts if p.category == label]
        blocks.append(_bucket(label, length, prompts, k, draft_vocab, checked))
    return blocks


def _bucket(label: str, length: int, prompts: list[PromptReport], k: int, draft_vocab: set[int] | None,
            checked: bool) -> dict:
    stats = merge_stats((p.stats for p in prompts), k)
    drafts = stats.drafts
    disabled = (None if any(p.drafting_disabled_rounds is None for p in prompts)
                else sum(p.drafting_disabled_rounds for p in prompts))
    emitted = [t for p in prompts for turn in p.output_token_ids for t in turn]
    coverage = (None if draft_vocab is None or not emitted
                else sum(t in draft_vocab for t in emitted) / len(emitted))
    diverged = [p.id for p in prompts if checked and p.first_divergence is not None]
    return {"label": label, "length": length, "prompts": [p.id for p in prompts],
            "prompt_tokens": [p.prompt_tokens[0] for p in prompts], "acceptance": stats.to_dict(),
            "drafting_disabled_rounds": disabled,
            "drafting_disabled_share": None if disabled is None or not drafts else disabled / drafts,
            "all_rejected_share": stats.histogram[0] / drafts if drafts else None,
            "draft_vocab_coverage": coverage, "generated_tokens": len(emitted),
            "lossless": {"checked": checked, "identical": (not diverged) if checked else None,
                         "diverged_prompts": diverged}}


def documents_for(context: ContextSettings) -> tuple[list[Document], str]:
    if context.documents is None:
        return builtin_documents()
    return load_documents(context.documents), f"{context.documents} (the user's documents file)"


def context_block(report: BenchReport, context: ContextSettings, documents: list[Document], provenance: str, *,
                  use_template: bool, limits: dict, draft_vocab: set[int] | None) -> dict:
    checked = report.lossless["mode"] != "not_checked"
    chosen = documents[:context.per_bucket]
    block = {"lengths": list(context.lengths), "documents_per_bucket": context.per_bucket,
             "documents": {"source": provenance, "ids": [d.id for d in chosen],
                           "sha256": {d.id: d.sha256 for d in chosen}},
             "protocol": {"kept": "start", "chat_template": use_template,
                          "questions": sorted({d.question for d in chosen})},
             "draft_position_limit": limits.get("draft"), "buckets": bucket_blocks(report, context.lengths,
                                                                                   draft_vocab, checked)}
    if report.engine is not None:  # the engine's own counters, summed per bucket (per prompt: engine.counters)
        per_prompt = {row["id"]: row for row in report.engine["counters"]["prompts"]}
        for bucket in block["buckets"]:
            total = zero_counters(report.settings["k"])
            for prompt_id in bucket["prompts"]:
                total = add_counters(total, per_prompt[prompt_id])
            bucket["engine_counters"] = total
    if report.reference is not None:
        block["reference"] = {"draft_position_limit": limits.get("reference"),
                              "buckets": bucket_blocks(report.reference, context.lengths, draft_vocab, False)}
    return block
