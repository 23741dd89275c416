"""Checks on a draft/target pair before anything is written. `check_pair` reads no tensor data; `check_vocab_map`
reads the draft's small d2t/t2d tensors."""

from __future__ import annotations

import torch

from ..errors import LayoutError, ShapeMismatchError
from ..spec import DraftSpec
from ..targets.target_info import TargetInfo
from ..vocab.check import MapFacts, check_map, refuse_errors

COUNT_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}


def check_sizes(spec: DraftSpec, hidden_size: int, vocab_size: int, label: str) -> None:
    """The draft's input width and vocabulary against a target's (from its config, or a model already loaded)."""
    aux = spec.head_kind.aux_states  # fed aux states through fc; otherwise the target's last hidden state
    feature = spec.target_hidden_size if aux else spec.hidden_size
    if feature != hidden_size:
        what = ("hidden size" if not aux else f"fc input ({spec.num_aux_states} x target hidden)"
                if spec.use_aux_hidden_state else "input (the target's last hidden state)")
        raise ShapeMismatchError(
            f"The draft's {what} expects target hidden size {feature}, but {label} has {hidden_size}.",
            "This head was trained for a different model: pass the target it was made for.")
    if spec.vocab_size != vocab_size:
        raise ShapeMismatchError(
            f"The draft's vocab_size is {spec.vocab_size} but the target {label} has {vocab_size}.",
            "The head and target use different tokenizers: pass the target the head was trained for.")


def check_pair(spec: DraftSpec, target: TargetInfo) -> None:
    label = target.checkpoint.label
    check_sizes(spec, target.hidden_size, target.vocab_size, label)
    if spec.head_kind.target_lm_head:
        lm = target.lm_head()
        if lm.shape != (target.vocab_size, spec.hidden_size):
            raise ShapeMismatchError(f"The target's LM head {lm.name} is {list(lm.shape)}, expected "
                                     f"[{target.vocab_size}, {spec.hidden_size}].",
                                     "The target checkpoint is inconsistent.")
    if spec.head_kind.vocab_map and spec.draft_vocab_size > spec.vocab_size:
        raise ShapeMismatchError(f"draft_vocab_size {spec.draft_vocab_size} exceeds the target vocabulary "
                                 f"{spec.vocab_size}.", "The head does not belong to this target.")
    if not spec.head_kind.aux_states or not spec.use_aux_hidden_state:
        return  # fed the target's last hidden state: no aux layers to check
    if spec.aux_layer_ids is None:
        raise LayoutError("The EAGLE-3 head does not say which target layers feed it.", "Pass the target config.")
    ids = list(spec.aux_layer_ids)
    bad = [i for i in ids if not 0 <= i < target.num_hidden_layers]
    # Engines collect the states in layer order and collapse duplicates: the ids must be strictly increasing.
    if bad or len(ids) != spec.num_aux_states or ids != sorted(set(ids)):
        raise ShapeMismatchError(
            f"Aux layer ids {ids} are not {COUNT_WORDS.get(spec.num_aux_states, spec.num_aux_states)} distinct, "
            f"increasing layers of the {target.num_hidden_layers}-layer target {label}.",
            "Set eagle_aux_hidden_state_layer_ids in the draft config to the layers the head was trained on "
            "(the EAGLE-3 default is 2, L//2, L-3).")


def check_vocab_map(d2t: torch.Tensor | None, t2d: torch.Tensor | None, vocab_size: int, label: str) -> None:
    """The vocab room's one check (vocab/check.py), as convert has always applied it: d2t in range, strictly
    increasing (the trainers' convention, which convert's layouts keep), t2d marking exactly those target ids."""
    if d2t is None:
        return  # a reduced head without d2t is refused when it is loaded (draft/load.py)
    facts = MapFacts(label, d2t, t2d, vocab_size, ascending_required="convert (reorder it first: eagle-convert "
                     "vocab-map convert MAP --format specforge --apply-to HEAD permutes the LM-head rows with it)")
    refuse_errors(check_map(facts), label)
