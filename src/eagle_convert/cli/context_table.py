"""The human table of `bench --context-lengths`: one row per bucket (and per bucket of the reference head)."""

from __future__ import annotations


def _fmt(value, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def _share(value) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _lossless(block: dict) -> str:
    ll = block["lossless"]
    if not ll["checked"]:
        return "-"
    return "yes" if ll["identical"] else f"NO ({len(ll['diverged_prompts'])})"


def bucket_rows(name: str, buckets: list[dict]) -> list[str]:
    rows = []
    for b in buckets:
        acc = b["acceptance"]
        rates = " ".join(_fmt(r, ".2f") for r in acc["per_position_rates"])
        rows.append(f"{name:<9} {b['label']:>6} {len(b['prompts']):>4} {acc['drafts']:>6} "
                    f"{_fmt(acc['mean_acceptance_length']):>6}  {rates:<{5 * acc['k']}} "
                    f"{_share(b['drafting_disabled_share']):>8} {_share(b['all_rejected_share']):>8} "
                    f"{_share(b['draft_vocab_coverage']):>8} {_lossless(b):>8}  {acc['histogram']}")
    return rows


def context_report(data: dict) -> str:
    s, context = data["settings"], data["context"]
    engine = data.get("engine")
    who = f"{engine['name']} {engine.get('version') or ''} {engine['mode']}" if engine else "our runner"
    limit = context.get("draft_position_limit")
    lines = [f"bench --context-lengths: {s['draft_kind'].upper()} head on {s['target']} ({who}), k={s['k']}, "
             f"{s['dtype']} on {s['device']}, max_new_tokens {s['max_new_tokens']}, "
             f"{context['documents_per_bucket']} document(s) per bucket",
             f"documents: {context['documents']['source']}; kept: the document's start; chat template "
             f"{'on' if context['protocol']['chat_template'] else 'off'}",
             f"draft position limit: {limit if limit is not None else 'none known'} (drafting stops past it, as in "
             "vLLM 0.32)",
             *([f"reference head's position limit: {context['reference']['draft_position_limit']}"]
               if context.get("reference") else []),
             f"{'head':<9} {'bucket':>6} {'docs':>4} {'drafts':>6} {'tau':>6}  {'per-position':<{5 * s['k']}} "
             f"{'disabled':>8} {'rejected':>8} {'d-vocab':>8} {'lossless':>8}  histogram"]
    lines += bucket_rows("draft", context["buckets"])
    if context.get("reference"):
        lines += bucket_rows("reference", context["reference"]["buckets"])
    lines.append("disabled: rounds past the draft's position limit (dummy drafts; '-' where an engine's counters "
                 "cannot tell); rejected: rounds that accepted no draft; d-vocab: emitted tokens in the draft "
                 "vocabulary")
    for check in data["gate"]["checks"]:
        lines.append(f"gate {check['name']}: {'passed' if check['passed'] else 'FAILED'}")
    return "\n".join(lines)
