"""`eagle_convert.bench`: resolve the draft through the format layer (any layout convert reads or writes), run the
bundled draft/verify benchmark on the target, and apply the gates asked for (runner/gates.py)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..draft.load import load_draft, tensor_reader
from ..errors import IncomparableReportError, LayoutError
from ..checkpoint.ranks.checkpoint import RankedCheckpoint
from ..checkpoint.open import open_input
from ..targets.read import read_target
from . import gates
from .session import BenchReport, run_bench
from .report import SCHEMA_VERSION
from ..runner.trees.shapes import TreeOptions, resolve_tree

DEFAULT_MAX_TAU_DROP = 0.05


def bench(target: str, draft: str, *, k: int = 3, max_new_tokens: int = 256, prompts=None, temperature: float = 0.0,
          seed: int = 0, device: str = "auto", dtype: str = "auto", chat_template: str = "auto", baseline: bool = True,
          progress: bool = False, drop: tuple[str, ...] = (), revision: str | None = None, token: str | None = None,
          offline: bool | None = None, ignore_eos: bool = False, min_acceptance_length: float | None = None,
          reference_draft: str | None = None, reference_report: str | Path | None = None,
          max_tau_drop: float | None = None, tree: TreeOptions | None = None) -> BenchReport:
    """Bench DRAFT on TARGET. A raw EAGLE-1 release uses the target's LM head and embedding in memory, so raw and
    converted heads give the same numbers. The target must be a local folder (the whole model runs).

    Gates (`report.gates`, `report.passed`): `min_acceptance_length` (τ floor); `reference_draft` (the head as
    released, benched in the same run: in fp32 greedy every round must be identical); `reference_report` (a stored
    `--json` report of the same settings: τ may drop by at most `max_tau_drop`, overall and per category).
    `tree`: draft trees (runner/tree_shapes.py) instead of k-token chains."""
    if not Path(target).is_dir():
        raise LayoutError(f"The bench target {target!r} is not a local folder.",
                          "bench runs the whole target: download it first (e.g. `hf download ORG/NAME --local-dir DIR`) "
                          "and pass the folder.")
    stored = read_stored_report(reference_report, max_tau_drop)
    target_ckpt = open_input(target, role="target").checkpoint
    if isinstance(target_ckpt, RankedCheckpoint):
        raise LayoutError(f"The bench target {target} is saved per tensor-parallel rank ({target_ckpt.summary_line()}).",
                          "bench runs the whole target: pass the Hugging Face checkpoint it was saved from (convert "
                          "accepts the per-rank folder; bench needs every layer, unsharded).")

    def head_of(path: str):
        return load_draft(open_input(path, revision=revision, token=token, offline=offline, role="draft").checkpoint,
                          read_target(target_ckpt).config, drop=tuple(drop))  # a wrapper's text sizes

    head = head_of(draft)
    shape = resolve_tree(tree or TreeOptions(), k=k, draft_kind=head.spec.kind, target_config=target_ckpt.config)
    if shape.mode != "chain" and reference_draft is not None:
        raise IncomparableReportError(
            "--reference-draft compares the two heads round by round on chains; it does not take a tree.",
            "Run the reference gate with --tree chain (a conversion that drafts every chain alike drafts every tree "
            "alike), and bench the tree separately.")
    if stored is not None:  # what can be compared before the run is, so that a mismatch costs no bench
        gates.check_settings(SCHEMA_VERSION, {"k": shape.levels, "tree": shape.to_dict(),
                                              "max_new_tokens": max_new_tokens, "temperature": temperature,
                                              "seed": seed, "ignore_eos": ignore_eos}, stored, str(reference_report))
    reference, inexact = None, None
    if reference_draft is not None:
        ref_head = head_of(reference_draft)
        inexact = why_not_exact(head, ref_head, read_target(target_ckpt))
        # The released head rounded as the converted head stores it: a correct cast then changes nothing.
        reference = (ref_head.spec, rounded_like(tensor_reader(ref_head), head.tensors))
    report = run_bench(target, head.spec, tensor_reader(head), k=k, max_new_tokens=max_new_tokens, prompts=prompts,
                       temperature=temperature, seed=seed, device=device, dtype=dtype, chat_template=chat_template,
                       baseline=baseline, progress=progress, ignore_eos=ignore_eos, reference=reference,
                       tree=shape)
    same_run = [gates.reference_draft(report, report.reference, reference_draft, inexact=inexact)
                ] if reference_draft is not None else []
    apply_report_gates(report, min_acceptance_length, stored, reference_report, max_tau_drop, same_run=same_run)
    return report


def read_stored_report(reference_report, max_tau_drop, settings: dict | None = None) -> dict | None:
    """The stored --reference-report; with `settings`, checked against this run's before the run (a mismatch then
    costs no bench). Without, the caller checks once it knows them (a tree's shape depends on the head)."""
    if max_tau_drop is not None and reference_report is None:
        raise IncomparableReportError("--max-tau-drop was given without --reference-report.",
                                      "Pass the stored report to compare with: --reference-report FILE.")
    if reference_report is None:
        return None
    stored = _read_report(reference_report)
    if settings is not None:
        gates.check_settings(SCHEMA_VERSION, settings, stored, str(reference_report))
    return stored


def apply_report_gates(report: BenchReport, min_acceptance_length, stored, reference_report, max_tau_drop,
                       same_run=()) -> None:
    """The gates any bench report gets, whichever engine produced it (`same_run`: gates computed by the caller
    from the same run, listed after the τ floor)."""
    if min_acceptance_length is not None:
        report.gates.append(gates.min_acceptance_length(report, min_acceptance_length))
    report.gates.extend(same_run)
    if stored is not None:
        drop_allowed = DEFAULT_MAX_TAU_DROP if max_tau_drop is None else max_tau_drop
        report.gates.append(gates.reference_report(report.to_dict(), stored, str(reference_report), drop_allowed))


def rounded_like(reader, stored: dict):
    """`reader`'s tensors, each rounded to the float dtype the converted head stores under that name when that is
    narrower (a release in float32 converted to bfloat16): the rounding a correct conversion does, and no more."""
    def get(name: str):
        value = reader(name)
        ref = stored.get(name)
        if ref is not None and value.is_floating_point() and ref.dtype.is_floating_point and (
                ref.dtype.itemsize < value.element_size()):
            return value.to(ref.dtype)
        return value

    return get


def why_not_exact(head, reference, target) -> str | None:
    """Why a round-by-round comparison cannot hold even for a correct conversion, or None. Rounding the reference
    like the head (rounded_like) covers casts of the head's own tensors; not a target tensor spliced in narrower
    than the target stores it (the reference uses the target's own), nor a fc bias folded into a half-precision
    embedding (E + W^-1 b rounded once, against E and b rounded apart)."""
    for name, ref in head.tensors.items():
        if name in reference.tensors or not ref.dtype.is_floating_point:
            continue
        source = {"lm_head.weight": target.lm_head, "embed_tokens.weight": target.embedding}.get(name)
        if source is None:
            continue
        stored = source().dtype
        if name == "embed_tokens.weight" and reference.spec.fc_bias and not head.spec.fc_bias and ref.dtype != torch.float32:
            return (f"its fc bias was folded into a {str(ref.dtype).removeprefix('torch.')} embedding, which rounds "
                    "differently from the released embedding and bias")
        if ref.dtype.itemsize < stored.itemsize:
            return (f"its {name} (spliced from the target) is stored in {str(ref.dtype).removeprefix('torch.')}, "
                    f"narrower than the target's {str(stored).removeprefix('torch.')}")
    return None


def _read_report(path: str | Path) -> dict:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise IncomparableReportError(f"Cannot read the stored report {path}: {error}.",
                                      "Pass a report written by `eagle-convert bench --json` (or --report).") from error
