"""`bench --compare`: our runner beside the engine on the same prompts, prompt by prompt (pure functions over the two
`--json` reports). In fp32 greedy both are deterministic and decode the same token ids, so a correct conversion and a
correct engine give identical counters and tokens: any difference fails the gate (exit 3). In half precision or when
sampling, the two legitimately drift apart after a near-tie or a draw; the table is then shown, not gated."""

from __future__ import annotations

from .bench_report import first_difference
from .gates import GateResult


def _counts(acceptance: dict) -> dict:
    return {key: acceptance[key] for key in ("drafts", "drafted", "accepted", "histogram", "mean_acceptance_length")}


def compare_rows(ours: dict, engine: dict) -> list[dict]:
    """One row per prompt (matched by id): both sides' counters, τ and the first differing output token."""
    theirs = {p["id"]: p for p in engine["prompts"]}
    rows = []
    for mine in ours["prompts"]:
        other = theirs.get(mine["id"])
        a = _counts(mine["acceptance"])
        b = _counts(other["acceptance"]) if other else None
        diff = (first_difference(mine["output_token_ids"], other["output_token_ids"], ("ours", "engine"))
                if other else None)
        same = other is not None and diff is None and {k: v for k, v in a.items() if k != "mean_acceptance_length"} \
            == {k: v for k, v in b.items() if k != "mean_acceptance_length"}
        rows.append({"id": mine["id"], "ours": a, "engine": b, "first_difference": diff, "identical": same})
    return rows


def exact_comparison(ours: dict, engine: dict) -> str | None:
    """Why the two runs need not agree token for token, or None when they must (fp32 greedy on both sides)."""
    a, b = ours["settings"], engine["settings"]
    if a["temperature"] != 0:
        return f"sampling (temperature {a['temperature']})"
    if a["dtype"] != "float32" or b["dtype"] != "float32":
        return f"dtype {a['dtype']} (ours) / {b['dtype']} (engine), not float32 on both"
    return None


def first_differing(rows: list[dict]) -> tuple[dict, str]:
    """The first prompt whose runs differ, and where: its first differing token, or "the same tokens"."""
    first = next(r for r in rows if not r["identical"])
    where = (f"first differing token at turn {first['first_difference']['turn']}, index "
             f"{first['first_difference']['index']}" if first["first_difference"] else "the same tokens")
    return first, where


def compare_gate(ours: dict, engine: dict, engine_name: str) -> tuple[GateResult, list[dict]]:
    rows = compare_rows(ours, engine)
    loose = exact_comparison(ours, engine)
    differing = [r["id"] for r in rows if not r["identical"]]
    if loose is not None:
        return GateResult("engine_compare", True, f"ours and {engine_name} side by side ({loose}: the runs may "
                          "drift apart after a near-tie or a draw, so they are shown, not gated).",
                          {"exact": False, "differing_prompts": differing}), rows
    if not differing:
        return GateResult("engine_compare", True, f"ours and {engine_name} agree on every prompt (fp32 greedy: "
                          "identical counters and tokens).", {"exact": True, "differing_prompts": []}), rows
    first, where = first_differing(rows)
    return GateResult("engine_compare", False, (
        f"ours and {engine_name} differ in fp32 greedy decoding on {len(differing)} of {len(rows)} prompts: prompt "
        f"{first['id']!r} drafts/accepted {first['ours']['drafts']}/{first['ours']['accepted']} (ours) vs "
        f"{(first['engine'] or {}).get('drafts')}/{(first['engine'] or {}).get('accepted')} ({engine_name}), {where}. "
        "The engine loads the head differently from how we read it: a dropped fc bias, a wrong layout or config key "
        "(check `eagle-convert inspect` on the head the engine loads and the layout given with --to), or the engine "
        "runs other settings (--engine-arg)."), {"exact": True, "differing_prompts": differing}), rows


def _tau(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def compare_table(rows: list[dict], engine_name: str) -> str:
    lines = [f"compare: ours vs {engine_name}",
             f"{'prompt':<12} {'drafts':>6} {'accepted':>8} {'tau':>6} | {'drafts':>6} {'accepted':>8} {'tau':>6} | "
             "first differing token"]
    for row in rows:
        a, b, diff = row["ours"], row["engine"] or {}, row["first_difference"]
        where = "-" if diff is None else (f"turn {diff['turn']} index {diff['index']}: {diff['ours']} vs "
                                          f"{diff['engine']}")
        lines.append(f"{str(row['id'])[:12]:<12} {a['drafts']:>6} {a['accepted']:>8} "
                     f"{_tau(a['mean_acceptance_length']):>6} | {b.get('drafts', '-'):>6} {b.get('accepted', '-'):>8} "
                     f"{_tau(b.get('mean_acceptance_length')):>6} | {where}")
    if rows and rows[0].get("drafted_note"):  # an engine whose drafts cannot match ours (llamacpp_bench.py)
        lines.append(f"gated: {', '.join(rows[0]['compared'])}; drafts differ by design: {rows[0]['drafted_note']}")
    return "\n".join(lines)
