"""The one list of target families: lookup by config, the names listed in messages, the table in docs/targets.md."""

from __future__ import annotations

from . import dense, moe, multimodal
from .family import TargetFamily

FAMILIES: dict[str, TargetFamily] = {f.name: f for group in (dense, moe, multimodal) for f in group.FAMILIES}
_BY_MODEL_TYPE = {t: f for f in FAMILIES.values() for t in f.model_types}
_BY_ARCHITECTURE = {a: f for f in FAMILIES.values() for a in f.architectures}


def family_for(config: dict) -> TargetFamily | None:
    """The family a config names by model_type (or, failing that, by architecture); None when unknown."""
    family = _BY_MODEL_TYPE.get(str(config.get("model_type")))
    if family is None:
        family = next((_BY_ARCHITECTURE[a] for a in config.get("architectures") or () if a in _BY_ARCHITECTURE), None)
    return family


def family_names() -> str:
    return ", ".join(FAMILIES)


def markdown_table(checked: dict[str, str]) -> str:
    """The target table of docs/targets.md; `checked` says how each family was checked (kept beside the tests)."""
    rows = ["| family | architectures | LM head / embedding (every naming) | sizes in | RoPE | bench runner "
            "| checked |",
            "|---|---|---|---|---|---|---|"]
    for f in FAMILIES.values():
        names = "; ".join(f"`{n.lm_head}` / `{n.embed}`" for n in f.namings)
        runner = {"dense": "yes", "moe": "yes (MoE)"}.get(f.runner, "no: `bench --engine vllm`")
        if f.runner and f.multimodal:
            runner += ", text-only"
        rows.append(f"| {f.name} | {', '.join(f.architectures)} | {names} | {f.text_config or 'config'} | {f.rope} | "
                    f"{runner} | {checked.get(f.name, '')} |")
    return "\n".join(rows)
