"""`bench --context-lengths` end to end: the bucket prompts (context.py) through the ordinary bench (api.run: our
runner, `--engine vllm`, the reference head, the baseline and gates), then the per-bucket `context` block and the
plot (plot.py)."""

from __future__ import annotations

from dataclasses import replace

import torch

from ..draft.load import tensor_reader
from ..runner.draft_gate import draft_position_limit
from ..settings.bench import BenchSettings
from ..settings.common import HubOptions
from . import gates as gate_checks
from .bench_report import BenchReport
from .context import bucket_prompts, check_buckets_fit, context_block, documents_for
from .entry import run
from .inputs import BenchInputs
from .plot import check_plot_path, write_plot


def run_context(target: str, draft: str | None, settings: BenchSettings, hub: HubOptions = HubOptions()
                ) -> BenchReport:
    """bench --context-lengths (`settings.context`): the documents cut to each length, benched as one run (api.run),
    then the report's `context` block per bucket."""
    context, decode, gates, engine = settings.context, settings.decode, settings.gates, settings.engine
    if context.plot is not None:
        check_plot_path(context.plot)
    inputs = BenchInputs(target, draft, hub)  # each checkpoint opened once: here, in the bench, for the context block
    target_config = inputs.target.checkpoint.config
    target_limit = target_config.get("max_position_embeddings")
    check_buckets_fit(context.lengths, decode.max_new_tokens, target_limit)
    documents, provenance = documents_for(context)
    prompts, use_template = bucket_prompts(target, documents, context, chat_template=decode.chat_template)
    own_length = any(arg.startswith("max_model_len=") for arg in (engine.args if engine else ()))
    if engine is not None and engine.url is None and not own_length and target_limit:
        # vLLM's max_model_len as the target states it (bench's default caps it at 4096): the longest bucket fits
        engine = replace(engine, args=(*engine.args, f"max_model_len={target_limit}"))
    report = run(target, draft, replace(settings, decode=replace(decode, prompts=prompts), engine=engine), hub,
                 inputs=inputs)
    drop = settings.drop
    head = inputs.head(target_config, drop) if draft is not None else None  # a server's head: unknown here
    limits = {"draft": _limit(head, target_limit, served=report.engine) if head is not None else None}
    if gates.reference_draft is not None and report.reference is not None:
        reference = inputs.with_draft(gates.reference_draft).head(target_config, drop)
        limits["reference"] = _limit(reference, target_limit, served=None)
    if limits.get("reference") is not None and limits["reference"] != limits["draft"]:
        _gate_where_both_draft(report, gates.reference_draft, limits["reference"])
    report.context = context_block(report, context, documents, provenance, use_template=use_template,
                                   limits=limits, draft_vocab=_draft_vocab(head))
    if context.plot is not None:
        write_plot(report.context, context.plot)
    return report


def _limit(head, target_limit: int | None, *, served: dict | None) -> int | None:
    """Where drafting stops (runner/draft_gate.py). An engine served a converted copy when it could not load the
    layout (engine.draft.conversion): convert raises the limit to the target's, so that copy's limit is the rule's."""
    config = dict(head.spec.extra)
    if served is not None and (served.get("draft") or {}).get("conversion"):
        config["max_position_embeddings"] = max(head.spec.max_position_embeddings, target_limit or 0)
    return draft_position_limit(config, target_limit)


def _draft_vocab(head) -> set[int] | None:
    """The target ids an EAGLE-3 draft vocabulary holds (target id = draft id + d2t); None without a map."""
    if head is None or "d2t" not in head.tensors:
        return None
    d2t = tensor_reader(head)("d2t").to(torch.int64)
    return set((torch.arange(len(d2t)) + d2t).tolist())


def _gate_where_both_draft(report: BenchReport, label: str, reference_limit: int) -> None:
    """The reference gate compares round by round; past the released head's position limit the converted head (whose
    limit convert raised) drafts and the released one does not: what the raised limit is for, not a mistake. So the
    gate is taken again on the prompts in which neither head stopped drafting."""
    index = next(i for i, gate in enumerate(report.gates) if gate.name == "reference_draft")
    pairs = [(p, r) for p, r in zip(report.prompts, report.reference.prompts)
             if not p.drafting_disabled_rounds and not r.drafting_disabled_rounds]
    why = (f"past the released head's position limit ({reference_limit}) only the converted head drafts, which is "
           "what convert's raised limit is for")
    if not pairs:
        report.gates[index] = gate_checks.GateResult("reference_draft", False, (
            f"no prompt in which both heads drafted throughout: {why}. Add a context length below "
            f"{reference_limit} to compare the two heads."), {"reference_draft": label, "prompts_compared": []})
        return
    old = report.gates[index]
    gate = gate_checks.reference_draft(BenchReport(report.settings, [p for p, _ in pairs]),
                                       BenchReport(report.reference.settings, [r for _, r in pairs]), label,
                                       inexact=old.details.get("not_exact_because"))
    gate.message += (f" Compared on the {len(pairs)} of {len(report.prompts)} prompts in which both heads drafted: "
                     f"{why}.")
    gate.details["prompts_compared"] = [p.id for p, _ in pairs]
    report.gates[index] = gate
