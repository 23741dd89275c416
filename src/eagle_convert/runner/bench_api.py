"""`eagle_convert.bench`: resolve the draft through the format layer (any layout convert reads or writes), run the
bundled draft/verify benchmark on the target, and apply the gates asked for (runner/gates.py)."""

from __future__ import annotations

import json
from pathlib import Path

from ..draft import load_draft, tensor_reader
from ..errors import IncomparableReportError, LayoutError
from ..ranks.checkpoint import RankedCheckpoint
from ..resolve import open_input
from . import gates
from .bench import BenchReport, run_bench

DEFAULT_MAX_TAU_DROP = 0.05


def bench(target: str, draft: str, *, k: int = 3, max_new_tokens: int = 256, prompts=None, temperature: float = 0.0,
          seed: int = 0, device: str = "auto", dtype: str = "auto", chat_template: str = "auto", baseline: bool = True,
          progress: bool = False, drop: tuple[str, ...] = (), revision: str | None = None, token: str | None = None,
          offline: bool | None = None, ignore_eos: bool = False, min_acceptance_length: float | None = None,
          reference_draft: str | None = None, reference_report: str | Path | None = None,
          max_tau_drop: float | None = None) -> BenchReport:
    """Bench DRAFT on TARGET. A raw EAGLE-1 release uses the target's LM head and embedding in memory, so raw and
    converted heads give the same numbers. The target must be a local folder (the whole model runs).

    Gates (`report.gates`, `report.passed`): `min_acceptance_length` (τ floor); `reference_draft` (the head as
    released, benched in the same run: in fp32 greedy every round must be identical); `reference_report` (a stored
    `--json` report of the same settings: τ may drop by at most `max_tau_drop`, overall and per category)."""
    if not Path(target).is_dir():
        raise LayoutError(f"The bench target {target!r} is not a local folder.",
                          "bench runs the whole target: download it first (e.g. `hf download ORG/NAME --local-dir DIR`) "
                          "and pass the folder.")
    if max_tau_drop is not None and reference_report is None:
        raise IncomparableReportError("--max-tau-drop was given without --reference-report.",
                                      "Pass the stored report to compare with: --reference-report FILE.")
    stored = _read_report(reference_report) if reference_report is not None else None
    target_ckpt = open_input(target, role="target").checkpoint
    if isinstance(target_ckpt, RankedCheckpoint):
        raise LayoutError(f"The bench target {target} is saved per tensor-parallel rank ({target_ckpt.summary_line()}).",
                          "bench runs the whole target: pass the Hugging Face checkpoint it was saved from (convert "
                          "accepts the per-rank folder; bench needs every layer, unsharded).")

    def head_of(path: str):
        head = load_draft(open_input(path, revision=revision, token=token, offline=offline, role="draft").checkpoint,
                          target_ckpt.config, drop=tuple(drop))
        return head.spec, tensor_reader(head)

    spec, reader = head_of(draft)
    report = run_bench(target, spec, reader, k=k, max_new_tokens=max_new_tokens, prompts=prompts,
                       temperature=temperature, seed=seed, device=device, dtype=dtype, chat_template=chat_template,
                       baseline=baseline, progress=progress, ignore_eos=ignore_eos,
                       reference=head_of(reference_draft) if reference_draft is not None else None)
    if min_acceptance_length is not None:
        report.gates.append(gates.min_acceptance_length(report, min_acceptance_length))
    if reference_draft is not None:
        report.gates.append(gates.reference_draft(report, report.reference, reference_draft))
    if stored is not None:
        drop_allowed = DEFAULT_MAX_TAU_DROP if max_tau_drop is None else max_tau_drop
        report.gates.append(gates.reference_report(report.to_dict(), stored, str(reference_report), drop_allowed))
    return report


def _read_report(path: str | Path) -> dict:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise IncomparableReportError(f"Cannot read the stored report {path}: {error}.",
                                      "Pass a report written by `eagle-convert bench --json` (or --report).") from error
