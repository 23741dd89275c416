"""Human lines for the position and RoPE checks (positions/checks.py) that `inspect` and `convert` print."""

from __future__ import annotations


def position_lines(positions: dict | None) -> list[str]:
    """The summary and every finding, as `inspect` prints them."""
    if not positions:
        return []
    draft, target = positions["draft"], positions["target"]
    lines = [f"positions: draft limit {draft['engine_limit']}"
             + (f" (made for {draft['source_max_position_embeddings']})"
                if draft.get("source_max_position_embeddings") else "")
             + (f", target limit {target['engine_limit']}" if target else "")
             + (f", --max-model-len {positions['max_model_len']}" if positions["max_model_len"] else ""),
             f"rope: draft {_rope(draft['rope'])} (from {', '.join(draft['rope_keys']) or 'defaults'})"
             + (f"; target {_rope(target['rope'])}" if target else "")]
    lines.append("position findings:" if positions["findings"] else "position findings: none")
    said: set[str] = set()  # an engine's behaviour is printed once, under the first finding that names it
    for finding in positions["findings"]:
        lines += finding_lines(finding, indent="  ", said=said)
    return lines


def finding_lines(finding: dict, indent: str = "", said: set[str] | None = None) -> list[str]:
    lines = [f"{indent}- {finding['severity']} {finding['name']}: {finding['message']}"]
    if finding["hint"]:
        lines.append(f"{indent}  fix: {finding['hint']}")
    for engine, what in finding.get("engines", {}).items():
        if said is None or what not in said:
            lines.append(f"{indent}  {engine}: {what}")
        if said is not None:
            said.add(what)
    return lines


def _rope(rope: dict) -> str:
    params = ", ".join(f"{k} {v}" for k, v in rope.items()
                       if k not in ("rope_type", "rope_theta") and (k, v) != ("partial_rotary_factor", 1.0))
    return f"{rope['rope_type']} theta {rope['rope_theta']:g}" + (f" ({params})" if params else "")
