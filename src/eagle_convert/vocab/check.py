"""The one check of a vocabulary map, for `vocab-map check`, `vocab-map convert`, `inspect`, `convert`, `bench
--token-map`, `convert --token-map` and the runner's hot ids: each silent-failure class the engines and trainers
have, found by name, with who would read the map wrongly; the same verdict for one map everywhere.

Errors make every command refuse; notes are reported. `not-ascending` is an error only where the consumer needs
ascending target ids (`ascending_required`: SpecForge's compact teacher, convert's output layouts)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .map import offsets_from_ids
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
    "empty": "engines keep the LM-head rows the map names: with none, the draft has no token to propose",
    "t2d-not-bool": "SpecForge and speculators copy t2d into a bool buffer (0/1 casts exactly); vLLM and SGLang do "
                    "not read t2d",
    "vocab-unconfirmed": "t2d must be sized by the target's config vocabulary; SpecForge and speculators index it by "
                         "target id, so a t2d sized by the tokenizer or by the draft passes only this far",
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


# No released tokenizer comes near this (the largest, Gemma 3's, holds 262 144 ids): a target id past it, with no
# vocabulary stated, is a corrupt map, and writing its t2d would allocate that many entries.
PLAUSIBLE_VOCAB = 2 ** 24


def _target_ids(d2t: torch.Tensor) -> torch.Tensor:
    return d2t.to(torch.int64) + torch.arange(d2t.numel(), dtype=torch.int64)


def is_integer_1d(tensor: torch.Tensor) -> bool:
    return tensor.dim() == 1 and not (tensor.dtype.is_floating_point or tensor.dtype == torch.bool
                                      or tensor.is_complex())


def ids_facts(label: str, ids: torch.Tensor, vocab_size: int | None) -> MapFacts:
    """A list of target ids (SGLang's token map, the runner's hot ids) as a map's facts: d2t = ids - arange; ids
    that are not a 1-D integer tensor are kept as they are, so that `bad-dtype` names them."""
    return MapFacts(label, offsets_from_ids(ids) if is_integer_1d(ids) else ids, None, vocab_size)


def stated_vocab(facts: MapFacts) -> int | None:
    """The target vocabulary as known: the config's (--target, a head's own), else t2d's own length."""
    if facts.vocab_size is not None:
        return facts.vocab_size
    return facts.t2d.numel() if facts.t2d is not None and facts.t2d.dim() == 1 else None


def _id_bound(facts: MapFacts) -> tuple[int, str]:
    """The bound a target id must stay under, and who states it (the message names the source, so an id past a
    t2d's length is not blamed on a target vocabulary nobody gave)."""
    if facts.vocab_size is not None:
        return facts.vocab_size, f"the target vocabulary [0, {facts.vocab_size})"
    stated = stated_vocab(facts)
    if stated is not None:
        return stated, f"[0, {stated}), the target vocabulary t2d's length states (no --target given)"
    return PLAUSIBLE_VOCAB, (f"any plausible target vocabulary ([0, 2^24 = {PLAUSIBLE_VOCAB}); the largest released "
                             "tokenizers hold about 262 000 ids)")


def _out_of_range(facts: MapFacts, ids: torch.Tensor) -> list[Finding]:
    bound, where = _id_bound(facts)
    bad = (ids < 0) | (ids >= bound)
    if not bool(bad.any()):
        return []
    example = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
    return [Finding("out-of-range", True, f"d2t maps {int(bad.sum())} draft ids outside {where}, e.g. to target "
                                          f"id {example}")]


def _d2t_findings(facts: MapFacts) -> list[Finding]:
    d2t = facts.d2t
    if not is_integer_1d(d2t):
        what = " (a mask, such as a t2d, not ids)" if d2t.dtype == torch.bool else ""
        return [Finding("bad-dtype", True, f"d2t (the map's ids) is {d2t.dtype} of shape {list(d2t.shape)}{what}, "
                                           "not a 1-D integer tensor")]
    if d2t.numel() == 0:
        return [Finding("empty", True, "the map holds no draft ids (d2t is empty)")]
    ids = _target_ids(d2t)
    found = _out_of_range(facts, ids)
    if ids.unique().numel() != ids.numel():
        found.append(Finding("duplicates", True, f"d2t maps {ids.numel() - ids.unique().numel()} draft ids onto "
                                                 "target ids another draft id already has"))
    if ids.numel() > 1 and not bool((ids[1:] > ids[:-1]).all()):
        need = facts.ascending_required
        found.append(Finding("not-ascending", need is not None, "d2t does not map draft ids to strictly increasing "
                             "target ids" + (f", which {need} requires" if need else " (frequency order?)")))
    return found


def _t2d_dtype_findings(t2d: torch.Tensor) -> list[Finding]:
    """bool, as every trainer writes it; an integer 0/1 mask marks the same ids (a note: it is never cast without
    saying so); anything else is not a mask."""
    integer = is_integer_1d(t2d)
    if t2d.dim() != 1 or not (t2d.dtype == torch.bool or (integer and bool(((t2d == 0) | (t2d == 1)).all()))):
        values = "" if t2d.dtype == torch.bool or not integer else " with values other than 0 and 1"
        return [Finding("bad-dtype", True, f"t2d is {t2d.dtype} of shape {list(t2d.shape)}{values}, not a 1-D bool "
                                           "mask")]
    if t2d.dtype != torch.bool:
        return [Finding("t2d-not-bool", False, f"t2d is a {t2d.dtype} 0/1 mask, not bool as the trainers write it; "
                                               "it marks the same ids, and vocab-map convert and --apply-to write it "
                                               "as bool")]
    return []


def _t2d_size_findings(facts: MapFacts) -> list[Finding]:
    t2d, vocab, d2t = facts.t2d, facts.vocab_size, facts.d2t
    if vocab is not None:
        return [] if t2d.numel() == vocab else [
            Finding("t2d-size", True, f"t2d has {t2d.numel()} entries but the config vocabulary is {vocab}")]
    found = [Finding("vocab-unconfirmed", False, f"no target vocabulary was given, so t2d's own length "
                                                 f"({t2d.numel()}) is taken as it, unchecked; pass --target or "
                                                 "--target-vocab-size to check it")]
    if d2t is not None and t2d.numel() < d2t.numel():
        found.append(Finding("t2d-size", True, f"t2d has {t2d.numel()} entries, fewer than the map's "
                                               f"{d2t.numel()} draft ids (t2d spans the target vocabulary, which "
                                               "holds every draft id)"))
    return found


def _t2d_findings(facts: MapFacts) -> list[Finding]:
    t2d = facts.t2d
    if t2d is None:
        missing = Finding("missing-t2d", False, "there is no t2d (ModelOpt writes none)")
        return [missing] if facts.d2t is not None else []
    found = _t2d_dtype_findings(t2d)
    if errors_of(found):
        return found
    found += _t2d_size_findings(facts)
    if facts.d2t is not None and is_integer_1d(facts.d2t):
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
