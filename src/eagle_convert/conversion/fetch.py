"""What a dry run reports about repo-id inputs: what was fetched to plan, and what converting will fetch."""

from __future__ import annotations

from ..checkpoint.open import InputRef
from .plan import Plan


def fetch_plan(plan: Plan, inputs: dict[str, InputRef]) -> dict | None:
    """For repo-id inputs: bytes already fetched to build the plan, and exactly what converting will fetch (whole
    files for a draft, tensor byte ranges for a target), each marked cached or not. Local inputs fetch nothing."""
    from ..io.hub.hub_source import HubSource
    from ..io.hub.ranges import is_cached
    from ..io.hub.repos import cached_file

    summary = {}
    for role, ref in inputs.items():
        source = ref.checkpoint.source
        if not isinstance(source, HubSource):
            continue
        refs = {(leaf.file, leaf.name): leaf for t in plan.tensors for src in t.sources if src.origin == role
                for leaf in src.ref.leaves()}
        items = []
        if role == "draft" or ref.checkpoint.weight_format == "bin":  # whole weight files
            for rel in sorted({file for file, _ in refs} | (set(ref.checkpoint.files) if role == "draft" else set())):
                cached = cached_file(source.ref, rel) is not None
                items.append({"file": rel, "what": "whole file", "bytes": source.size(rel), "cached": cached})
        else:
            for (rel, name), tref in sorted(refs.items()):
                cached = is_cached(source.ref, rel, tref.nbytes, key=name)
                items.append({"file": rel, "what": f"range of {name}", "bytes": tref.nbytes, "cached": cached})
        summary[role] = {"repo_id": ref.repo_id, "commit_sha": ref.commit_sha,
                         "fetched_to_plan": dict(source.fetched), "to_fetch": items,
                         "bytes_to_fetch": sum(i["bytes"] for i in items if not i["cached"])}
    return summary or None

