"""The one check of a vocabulary map, for `vocab-map check`, `vocab-map convert`, `inspect` and `convert`: each
silent-failure class the engines and trainers have, found by name, with who would read the map wrongly.

Errors make every command refuse; notes are reported. `not-ascending` is an error only where the consumer needs
ascending target ids (`ascending_required`: SpecForge's compact teacher, convert's output layouts)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .rules import VocabMapError

# Who reads each broken map wrongly, and how (the research notes in docs/vocab-maps.md cite the code).
ENGINES = {
    "missing-d2t": "vLLM leaves its d2t parameter zero-filled, so draft id i is read as target id i; SGLang's hot ids "
                   "become 0..N-1 the same way",
    "bad-dtype": "vLLM and SGLang add d2t to arange as integers; a float or multi-dimensional tensor loads wrongly",
    "out-of-range": "vLLM and SGLang index the target vocabulary with it (an out-of-bounds gather or a wrong token)",
    "duplicates": "vLLM's scatter keeps one of two logits for the same target id; llama.cpp refuses the file",
    "t2d-size": "t2d must be sized by the config vocabulary (text_config for VLMs), not the tokenizer's; SpecForge and "
                "speculators index it by target id",
    "t2d-disagrees": "SpecForge's compact teacher and OpenVINO read t2d; vLLM and SGLang read only d2t, so the two "
                     "tools would use different vocabularies",
    "not-ascending": "SpecForge's compact teacher requires nonzero(t2d) == d2t + arange (ascending); vLLM and SGLang "
                     "read any order",
    "draft-size": "engines size the draft LM head by draft_vocab_size and index d2t by LM-head row",
    "missing-t2d": "vLLM and SGLang do not read t2d; SpecForge's training and OpenVINO do",
}


@dataclass(frozen=True)
class MapFacts:
    """What is known about one map: its tensors as stored, and, for a head, what must agree with them."""
    label: str
    d2t: torch.Tensor | None
    t2d: torch.Tensor | None
    vocab_size: int | None  # the config vocabulary (text_config for VLMs)
    lm_head_rows: int | None = None
    draft_vocab_size: int | None = None  # as the head's config states it
    ascending_required: str | None = None  # the consumer that needs ascending ids, when there is one


@dataclass(frozen=True)
class Finding:
    name: str
    error: bool
    message: str

    @property
    def engines(self) -> str:
        return ENGINES.get(self.name, "")

    def as_dict(self) -> dict:
        return {"name": self.name, "error": self.error, "message": self.message, "engines": self.engines}


def _target_ids(d2t: torch.Tensor) -> torch.Tensor:
    return d2t.to(torch.int64) + torch.arange(d2t.numel(), dtype=torch.int64)


def _d2t_findings(facts: MapFacts) -> list[Finding]:
    d2t, vocab = facts.d2t, facts.vocab_size
    if d2t.dim() != 1 or d2t.dtype.is_floating_point or d2t.dtype == torch.bool or d2t.is_complex():
        return [Finding("bad-dtype", True, f"d2t is {d2t.dtype} of shape {list(d2t.shape)}, not a 1-D integer "
                                           "tensor of offsets")]
    ids, found = _target_ids(d2t), []
    if vocab is not None and ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
        bad = int(((ids < 0) | (ids >= vocab)).sum())
        found.append(Finding("out-of-range", True, f"d2t maps {bad} draft ids outside the target vocabulary "
                                                   f"[0, {vocab})"))
    if ids.unique().numel() != ids.numel():
        found.append(Finding("duplicates", True, f"d2t maps {ids.numel() - ids.unique().numel()} draft ids onto "
                                                 "target ids another draft id already has"))
    if ids.numel() > 1 and not bool((ids[1:] > ids[:-1]).all()):
        need = facts.ascending_required
        found.append(Finding("not-ascending", need is not None, "d2t does not map draft ids to strictly increasing "
                             "target ids" + (f", which {need} requires" if need else " (frequency order?)")))
    return found


def _t2d_findings(facts: MapFacts) -> list[Finding]:
    t2d, vocab = facts.t2d, facts.vocab_size
    if t2d is None:
        missing = Finding("missing-t2d", False, "there is no t2d (ModelOpt writes none)")
        return [missing] if facts.d2t is not None else []
    if t2d.dim() != 1 or (t2d.dtype != torch.bool and not bool(((t2d == 0) | (t2d == 1)).all())):
        return [Finding("bad-dtype", True, f"t2d is {t2d.dtype} of shape {list(t2d.shape)}, not a 1-D bool mask")]
    found = []
    if vocab is not None and t2d.numel() != vocab:
        found.append(Finding("t2d-size", True, f"t2d has {t2d.numel()} entries but the config vocabulary is {vocab}"))
    if facts.d2t is not None and facts.d2t.dim() == 1 and not facts.d2t.dtype.is_floating_point:
        marked = torch.nonzero(t2d.to(torch.bool)).flatten()
        ids = _target_ids(facts.d2t)
        if marked.numel() != ids.unique().numel() or not torch.equal(marked, ids.unique()):
            found.append(Finding("t2d-disagrees", True, f"t2d does not mark exactly the target ids that d2t maps to "
                                                        f"(it marks {marked.numel()}, d2t maps {ids.numel()})"))
    return found


def _size_findings(facts: MapFacts) -> list[Finding]:
    sizes = {"len(d2t)": None if facts.d2t is None else facts.d2t.numel(), "LM-head rows": facts.lm_head_rows,
             "draft_vocab_size": facts.draft_vocab_size}
    known = {k: v for k, v in sizes.items() if v is not None}
    found = []
    if len(set(known.values())) > 1:
        found.append(Finding("draft-size", True, ", ".join(f"{k} = {v}" for k, v in known.items()) + " disagree"))
    reduced = facts.lm_head_rows is not None and facts.vocab_size is not None and facts.lm_head_rows < facts.vocab_size
    if facts.d2t is None and reduced:
        found.append(Finding("missing-d2t", True, f"the LM head has {facts.lm_head_rows} rows, fewer than the target "
                                                  f"vocabulary ({facts.vocab_size}), but there is no d2t"))
    return found


def check_map(facts: MapFacts) -> list[Finding]:
    found = _size_findings(facts)
    if facts.d2t is not None:
        found += _d2t_findings(facts)
    return found + _t2d_findings(facts)


def errors_of(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.error]


def refuse_errors(findings: list[Finding], label: str, error_class: type = VocabMapError) -> None:
    """One paragraph naming every error, and what reads it wrongly; nothing is written after this raises."""
    errors = errors_of(findings)
    if not errors:
        return
    what = "; ".join(f"{f.name}: {f.message} ({f.engines})" for f in errors)
    if all(f.name == "not-ascending" for f in errors):
        hint = ("Sorting the map alone would re-point every draft row: write it into its head with --apply-to HEAD "
                "(the LM-head rows are permuted with it), or pick --format safetensors, modelopt or sglang, which "
                "keep any order.")
    else:
        hint = ("Rebuild the map (eagle-convert vocab-map build) or re-export the head with the map it was trained "
                "with; `eagle-convert vocab-map check` lists every finding.")
    raise error_class(f"{label}: the vocabulary map is wrong: {what}.", hint)
