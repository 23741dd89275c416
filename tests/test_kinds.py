"""The head-kind table (kinds.py): every kind names modules that exist, and every layout holds kinds of the table."""

from __future__ import annotations

import pytest

from eagle_convert.kinds import KINDS, _resolve, kind_of
from eagle_convert.layouts import CANONICAL_NAMES, LAYOUTS
from eagle_convert.layouts.registry import output_layouts_for
from eagle_convert.runner.heads import DraftHead, Eagle1Head, Eagle3Head
from eagle_convert.runner.mtp import MtpHead


@pytest.mark.parametrize("name", sorted(KINDS))
def test_each_kind_names_its_builder_and_runner_head(name):
    kind = KINDS[name]
    assert kind.name == name
    assert issubclass(kind.head_class(), DraftHead)
    assert callable(_resolve(kind.spec_builder))
    writers = output_layouts_for(name)
    assert writers, f"layouts that write {name} heads"
    # a kind converted from a draft checkpoint is written by draft layouts; MTP, inside its target, by extracted ones
    assert all(LAYOUTS[w].from_target != kind.in_layouts for w in writers), writers
    assert CANONICAL_NAMES[name] is kind.canonical_names  # the layouts read the kind's names, not a copy


def test_the_runner_head_follows_the_kind():
    assert (KINDS["eagle1"].head_class(), KINDS["eagle3"].head_class()) == (Eagle1Head, Eagle3Head)
    assert KINDS["mtp"].head_class() is MtpHead


def test_every_layout_holds_kinds_of_the_table():
    assert {kind for layout in LAYOUTS.values() for kind in layout.kinds} == set(KINDS)


def test_a_draft_is_of_the_kind_that_recognises_it():
    assert [name for name, kind in KINDS.items() if kind.recognise is None] == ["eagle1"]  # one fallback kind
    assert kind_of({}, frozenset({"midlayer.self_attn.q_proj.weight", "fc.weight"})) == "eagle3"
    assert kind_of({"speculators_model_type": "eagle3"}, frozenset({"layers.0.mlp.up_proj.weight"})) == "eagle3"
    assert kind_of({"architectures": ["LlamaForCausalLM"]}, frozenset({"fc.weight", "layers.0.mlp.up_proj.weight"})) \
        == "eagle1"
