"""The bench gates a CI step fails on (exit code 3): pure functions over bench reports.

- `min_acceptance_length`: τ below an absolute floor. Catches collapse (τ ≈ 1), not a head that lost a little.
- `reference_draft`: the converted head against the head as released, benched on the same prompts in the same run.
  In fp32 greedy both runs are deterministic and see the same contexts (speculative output equals plain greedy, so
  every turn's conversation is the same), and a correct conversion changes no draft decision: the verify rounds must
  be identical, round by round, and so must the tokens. The rule is exact on purpose: a conversion that perturbs a
  head a little (a perturbed LM head, a dropped fc bias) shows up only as a few changed rounds. A correct
  `--fc-bias fold` changes the head's arithmetic by float rounding only (~1e-7 relative); it could flip a draft only
  where the head's top two logits nearly tie. Such a flip fails the gate too, reported with both heads' top-1 minus
  top-2 logit margins at that draft step, so the report itself shows whether it was a near-tie (margin ~1e-5 of the
  logits) or a real change: a gate that let near-ties pass would need a threshold that a wrong conversion could hide
  under, and none of the folds measured here flipped a draft (docs/benchmarks.md).
  In bf16/fp16, or when sampling, one flipped draft or draw is enough to send the two runs down different token paths
  (measured: a correct fold in bf16 sampling moved τ by 0.05 on 8 prompts, docs/benchmarks.md), after which their τ
  differ by sampling noise, not by anything the conversion did. So there |Δτ| must stay within Z_SCORE standard
  errors of the difference of two means of per-round acceptance (and at least MIN_TAU_TOLERANCE): loose on a few
  prompts, tight on a real benchmark, and wrong only about 0.3 % of the time for two independent runs of one head
  (less for these correlated ones).
- `reference_report`: τ against a stored `--json` report of the same settings and prompts; fails when τ dropped by
  more than `max_tau_drop` overall or in any prompt category.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import IncomparableReportError
from ..runner.metrics import AcceptanceStats, merge_stats

# The reference-draft gate in half precision or with sampling: |τ - τ_reference| <= max(MIN_TAU_TOLERANCE,
# Z_SCORE * standard error of the difference), from the per-round accepted counts of both runs.
Z_SCORE = 3.0
MIN_TAU_TOLERANCE = 0.03  # above the largest |Δτ| of a correct conversion in bf16 greedy on the tiny pair (0.019)

# Settings that must agree between a run and a stored report for their τ to be comparable.
COMPARABLE_SETTINGS = ("draft_kind", "k", "tree", "max_new_tokens", "temperature", "seed", "dtype", "chat_template",
                       "ignore_eos", "num_prompts")
# Settings a report holds only when they differ from their default (older reports lack them): compared with it.
DEFAULTED_SETTINGS = {"concurrency": 1}


@dataclass
class GateResult:
    name: str  # "min_acceptance_length" | "reference_draft" | "reference_report"
    passed: bool
    message: str  # one paragraph: what was compared and, on failure, where it differs and what to check
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"name": self.name, "passed": self.passed, "message": self.message, **self.details}


def _tau(stats: AcceptanceStats) -> float | None:
    tau = stats.mean_acceptance_length
    return None if math.isnan(tau) else tau


def _fmt(tau: float | None) -> str:
    return "-" if tau is None else f"{tau:.3f}"


def min_acceptance_length(report, floor: float) -> GateResult:
    tau = _tau(report.stats)
    passed = tau is not None and tau >= floor
    message = (f"mean acceptance length τ = {_fmt(tau)} {'>=' if passed else 'is below'} --min-acceptance-length "
               f"{floor}.")
    if not passed:
        message += (" A τ near 1 on a real pair usually means a broken conversion (wrong LM head, swapped fc halves, "
                    "dropped fc bias, wrong RoPE base, missing d2t, wrong aux layers or chat template): run "
                    "`eagle-convert inspect` on the head.")
    return GateResult("min_acceptance_length", passed, message, {"min_acceptance_length": floor, "tau": tau})


def _first_round_difference(prompt, reference) -> dict | None:
    """The first turn and verify round where two runs of one prompt differ (drafted tokens, accepted count, or the
    tokens emitted)."""
    for turn, (rounds, ref_rounds) in enumerate(zip(prompt.accepted_per_turn, reference.accepted_per_turn)):
        drafts = prompt.drafted_per_turn[turn] if turn < len(prompt.drafted_per_turn) else []
        ref_drafts = reference.drafted_per_turn[turn] if turn < len(reference.drafted_per_turn) else []
        for index in range(max(len(rounds), len(ref_rounds))):
            a = rounds[index] if index < len(rounds) else None
            b = ref_rounds[index] if index < len(ref_rounds) else None
            drafted_alike = (drafts[index] if index < len(drafts) else None) == (
                ref_drafts[index] if index < len(ref_drafts) else None)
            if a != b or not drafted_alike:  # a draft past the rejection point counts too: the head changed
                return {"prompt": prompt.id, "turn": turn, "round": index, "accepted": a, "reference_accepted": b,
                        **_draft_step_difference(prompt, reference, turn, index)}
        if prompt.output_token_ids[turn] != reference.output_token_ids[turn]:
            return {"prompt": prompt.id, "turn": turn, "round": None, "accepted": None, "reference_accepted": None,
                    "message": "same rounds, different tokens"}
    return None


def _draft_step_difference(prompt, reference, turn: int, index: int) -> dict:
    """Where, within one verify round, the two heads' drafts first differ, with each head's top-1 minus top-2 logit
    margin at that step (greedy only: the rounds' drafts are recorded then)."""
    try:
        drafted = prompt.drafted_per_turn[turn][index]
        ref_drafted = reference.drafted_per_turn[turn][index]
        margins = prompt.margins_per_turn[turn][index]
        ref_margins = reference.margins_per_turn[turn][index]
    except (IndexError, TypeError):
        return {}
    step = next((j for j, (x, y) in enumerate(zip(drafted, ref_drafted)) if x != y), None)
    if step is None:
        return {"drafted": drafted, "reference_drafted": ref_drafted}
    return {"draft_step": step, "drafted": drafted, "reference_drafted": ref_drafted,
            "margin": margins[step], "reference_margin": ref_margins[step]}


def tau_tolerance(report, reference) -> tuple[float, float]:
    """(tolerance, standard error of τ - τ_reference) for two runs, from their per-round accepted counts: τ is 1 plus
    the mean of those counts, so its standard error is that of a mean."""
    def variance_of_mean(run) -> float:
        counts = [a for p in run.prompts for rounds in p.accepted_per_turn for a in rounds]
        if len(counts) < 2:
            return math.inf
        mean = sum(counts) / len(counts)
        return sum((a - mean) ** 2 for a in counts) / (len(counts) - 1) / len(counts)

    error = math.sqrt(variance_of_mean(report) + variance_of_mean(reference))
    return max(MIN_TAU_TOLERANCE, Z_SCORE * error), error


def reference_draft(report, reference, label: str, inexact: str | None = None) -> GateResult:
    """`report` (the converted head) against `reference` (the head as released, same prompts, same run). `inexact`:
    why this conversion cannot match round by round even when correct (then τ is compared within the tolerance)."""
    tau, ref_tau = _tau(report.stats), _tau(reference.stats)
    s = report.settings
    exact = s["dtype"] == "float32" and s["temperature"] == 0 and inexact is None
    details = {"reference_draft": label, "mode": "exact" if exact else "tau_tolerance", "tau": tau,
               "reference_tau": ref_tau, "tolerance": None, "first_difference": None, "not_exact_because": inexact}
    if exact:
        first = next((d for p, r in zip(report.prompts, reference.prompts) if (d := _first_round_difference(p, r))),
                     None)
        details["first_difference"] = first
        if first is None:
            return GateResult("reference_draft", True,
                              f"every draft, verify round and token equals the reference head's "
                              f"({label}, τ = {_fmt(ref_tau)}): the conversion changed nothing the head decides.",
                              details)
        # Prompts, turns and rounds are counted from 0 (as in --json), draft steps from 1 (step 1 = first draft).
        where = (f"prompt {first['prompt']!r}, turn {first['turn']}, "
                 + (f"round {first['round']}" if first["round"] is not None else "after its last round"))
        what = (f"the converted head had {first['accepted']} drafts accepted, "
                f"the reference {first['reference_accepted']}"
                if first["round"] is not None else first["message"])
        if "draft_step" in first:
            what += (f"; at draft step {first['draft_step'] + 1} it drafted token "
                     f"{first['drafted'][first['draft_step']]}"
                     f" (top-2 logit margin {first['margin']:.3g}), the reference token "
                     f"{first['reference_drafted'][first['draft_step']]} (margin {first['reference_margin']:.3g})")
        return GateResult("reference_draft", False, (
            f"the converted head does not behave like the head as released ({label}): first difference at {where}: "
            f"{what}. τ = {_fmt(tau)} against the reference's {_fmt(ref_tau)}. A correct conversion changes no draft "
            "decision in fp32 greedy; a margin near 0 would be a near-tie of float rounding, anything else is a wrong "
            "conversion (LM head, fc, fc bias, d2t, aux layers, norm flags): compare `eagle-convert inspect` of both."),
            details)
    tolerance, error = tau_tolerance(report, reference)
    details.update(tolerance=tolerance, standard_error=error)
    passed = tau is not None and ref_tau is not None and abs(tau - ref_tau) <= tolerance
    return GateResult("reference_draft", passed, (
        f"τ = {_fmt(tau)} against the reference head's ({label}) {_fmt(ref_tau)}: "
        + (f"not compared round by round because {inexact}; " if inexact else "")
        + f"{'within' if passed else 'outside'} the {s['dtype']} / temperature {s['temperature']} tolerance of "
        f"{tolerance:.3f} ({Z_SCORE:g} standard errors of the difference, at least {MIN_TAU_TOLERANCE})."
        + ("" if passed else " Re-run in fp32 greedy (--dtype float32 --temperature 0) on a float32 conversion, "
                             "where the comparison is exact, to find the first round that differs.")), details)


def _category_stats(prompts: list[dict], k: int) -> dict[str, AcceptanceStats]:
    groups: dict[str, list[AcceptanceStats]] = {}
    for p in prompts:
        if p.get("category") is not None:
            groups.setdefault(p["category"], []).append(AcceptanceStats(k, tuple(p["acceptance"]["histogram"])))
    return {name: merge_stats(stats, k) for name, stats in groups.items()}


def check_settings(schema_version: int, settings: dict, stored: dict, path: str) -> None:
    """The part of check_comparable that needs no run: called before benching too, so that a mismatch costs nothing."""
    if not isinstance(stored, dict) or not isinstance(stored.get("settings"), dict):
        raise IncomparableReportError(f"{path} is not a bench --json report.",
                                      "Pass a report written by `eagle-convert bench --json` (or --report).")
    if stored.get("schema_version") != schema_version:
        raise IncomparableReportError(
            f"{path} is a bench report of schema version {stored.get('schema_version')}, this bench writes version "
            f"{schema_version} (v4 adds drafting_disabled_rounds and the context block; v3 added tree drafting "
            "settings and fields; v2 per-category τ and prompt hashes).",
            "Store a new reference report with this version: run bench with --report on the reference head.")
    b = stored["settings"]
    differ = [f"{key} {b.get(key)!r} (now {settings[key]!r})" for key in COMPARABLE_SETTINGS
              if key in settings and settings[key] != b.get(key)]
    differ += [f"{key} {b.get(key, default)!r} (now {settings.get(key, default)!r})"
               for key, default in DEFAULTED_SETTINGS.items() if settings.get(key, default) != b.get(key, default)]
    if differ:
        raise IncomparableReportError(
            f"The stored report {path} was made with other settings: {'; '.join(differ)}.",
            "Compare like with like: re-run bench with the stored report's settings and prompts, or store a new "
            "reference report.")


def check_comparable(current: dict, stored: dict, path: str) -> None:
    """Refuse a stored report made with other settings or prompts: its τ would not mean the same thing."""
    check_settings(current["schema_version"], current["settings"], stored, path)
    if wrong := _stored_fields_problem(stored):
        raise IncomparableReportError(f"The stored report {path} is damaged: {wrong}.",
                                      "Pass a report written by `eagle-convert bench --json` (or --report), unedited.")
    differ = []
    if [p["id"] for p in current["prompts"]] != [p.get("id") for p in stored.get("prompts", [])]:
        differ.append("the prompts (ids differ)")
    else:
        for p, q in zip(current["prompts"], stored["prompts"]):
            if p.get("prompt_ids_sha256", [None])[0] != (q.get("prompt_ids_sha256") or [None])[0]:
                differ.append(f"prompt {p['id']!r} (its first turn tokenizes differently)")
                break
    if differ:
        raise IncomparableReportError(
            f"The stored report {path} was made with other prompts: {'; '.join(differ)}.",
            "Compare like with like: re-run bench with the stored report's prompts, or store a new reference report.")


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _stored_fields_problem(stored: dict) -> str | None:
    """What the τ comparison reads from a stored report, missing or of another type (found by the fuzzer: each was a
    KeyError / TypeError traceback), or None."""
    acceptance = stored.get("overall", {}).get("acceptance") if isinstance(stored.get("overall"), dict) else None
    if not isinstance(acceptance, dict) or "mean_acceptance_length" not in acceptance:
        return "overall.acceptance.mean_acceptance_length is missing"
    if acceptance["mean_acceptance_length"] is not None and not _is_number(acceptance["mean_acceptance_length"]):
        return "overall.acceptance.mean_acceptance_length is not a number"
    prompts = stored.get("prompts", [])
    if not isinstance(prompts, list) or not all(isinstance(p, dict) for p in prompts):
        return "prompts is not a list of objects"
    for i, p in enumerate(prompts):
        if not isinstance(p.get("prompt_ids_sha256") or [], list):
            return f"prompts[{i}].prompt_ids_sha256 is not a list"
        if p.get("category") is None:
            continue
        histogram = p.get("acceptance", {}).get("histogram") if isinstance(p.get("acceptance"), dict) else None
        if not isinstance(p["category"], str):
            return f"prompts[{i}].category is not a string"
        if not isinstance(histogram, list) or not all(isinstance(n, int) and n >= 0 for n in histogram):
            return f"prompts[{i}].acceptance.histogram is not a list of counts"
    return None


def reference_report(current: dict, stored: dict, path: str, max_tau_drop: float) -> GateResult:
    """τ of this run (`current`, a report dict) against a stored one, overall and per prompt category."""
    check_comparable(current, stored, path)
    k = current["settings"]["k"]
    overall = (current["overall"]["acceptance"]["mean_acceptance_length"],
               stored["overall"]["acceptance"]["mean_acceptance_length"])
    rows = {"overall": overall}
    now, before = _category_stats(current["prompts"], k), _category_stats(stored["prompts"], k)
    rows.update({name: (_tau(now[name]), _tau(before[name])) for name in sorted(now) if name in before})
    drops = {name: (None if tau is None or ref is None else ref - tau) for name, (tau, ref) in rows.items()}
    failed = [name for name, drop in drops.items() if drop is None or drop > max_tau_drop]
    table = {name: {"tau": tau, "reference_tau": ref, "drop": drops[name]} for name, (tau, ref) in rows.items()}
    details = {"reference_report": path, "max_tau_drop": max_tau_drop, "categories": table}
    if not failed:
        return GateResult("reference_report", True, f"τ = {_fmt(overall[0])} against the stored {_fmt(overall[1])} "
                          f"({path}): no drop above {max_tau_drop} overall or in any of {len(rows) - 1} categories.",
                          details)
    worst = ", ".join(f"{name} {_fmt(rows[name][1])} -> {_fmt(rows[name][0])}" for name in failed)
    return GateResult("reference_report", False, (
        f"τ dropped by more than --max-tau-drop {max_tau_drop} against the stored report {path}: {worst}. The head or "
        "its conversion changed since that report: bench against the released head with --reference-draft to find "
        "the first round that differs."), details)
