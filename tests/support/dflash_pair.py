"""A DFlash head and its target as the bench runner loads them, through the project's format layer (the head's
config read by its layout, the target layer ids translated to our internal count), for the runner's DFlash tests."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import eagle_convert.benchmark.inputs  # noqa: F401  (fills every kind's reading parts, as a bench does)
from eagle_convert.checkpoint.open import open_input
from eagle_convert.draft.load import open_head, tensor_reader
from eagle_convert.runner.heads import aux_layer_ids_for, build_draft_head
from eagle_convert.runner.model import TargetModel
from support.runner_fixtures import read_target_dir, strict_getter


def load_dflash_pair(draft: Path, target: Path, *, causal: bool | None = None, aux_layer_ids=None):
    """(target model, DFlash head, spec). `causal` overrides the config's; `aux_layer_ids` the taps the target hands
    the head (a negative control: the stored ids read as our internal ones)."""
    config, tensors = read_target_dir(Path(target))
    head = open_head(open_input(str(draft), role="draft").checkpoint, config, label=str(draft))
    spec = head.spec if causal is None else dataclasses.replace(head.spec, causal=causal)
    ids = aux_layer_ids_for(spec, config["num_hidden_layers"]) if aux_layer_ids is None else tuple(aux_layer_ids)
    model = TargetModel(config, strict_getter(tensors), aux_layer_ids=ids)
    module = build_draft_head(spec, tensor_reader(head), target_embedding=model.embed_weight,
                              target_lm_head=model.lm_head_weight)
    return model, module, spec
