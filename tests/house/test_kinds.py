"""The head-kind table (kinds.py): every row is filled by the rooms above it (registration, no module named by a
string), the one head reader dispatches through it, and every layout holds kinds of the table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.mtp_bench import extract, partial_mimo

import eagle_convert.benchmark.inputs  # noqa: F401  (fills MTP's reading parts, as a bench does)
from eagle_convert.draft.load import DraftHead, eagle1_spec, eagle3_spec, open_head
from eagle_convert.kinds import KINDS, PARTS, HeadKind, kind_of
from eagle_convert.layouts import CANONICAL_NAMES, LAYOUTS
from eagle_convert.layouts.registry import output_layouts_for
from eagle_convert.mtp.draft import MtpDraft, load_mtp_draft, looks_mtp, mtp_spec
from eagle_convert.runner.dflash_drafter import DflashHead
from eagle_convert.runner.heads import Eagle1Head, Eagle3Head, HeadModule, head_module_class
from eagle_convert.runner.mtp_head import MtpHead

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.mark.parametrize("name", sorted(KINDS))
def test_each_kind_row_is_filled_by_the_rooms_above(name):
    kind = KINDS[name]
    assert kind.name == name
    # a kind our runner cannot draft yet says so by name (runner_refusal) instead of having a head module
    assert kind.runner_refusal is not None or issubclass(kind.head_class(), HeadModule)
    skipped = {"recognise"} if kind.fallback else set()
    skipped |= {"runner_head"} if kind.runner_refusal else set()
    assert all(callable(kind.part(part)) for part in PARTS if part not in skipped)
    writers = output_layouts_for(name)
    assert writers, f"layouts that write {name} heads"
    # a kind converted from a draft checkpoint is written by draft layouts; MTP, inside its target, by extracted ones
    assert all(LAYOUTS[w].from_target != kind.from_draft_checkpoint for w in writers), writers
    assert CANONICAL_NAMES[name] is kind.canonical_names  # the layouts read the kind's names, not a copy


def test_the_parts_are_the_rooms_own_functions():
    assert [KINDS[k].part("spec_builder") for k in ("eagle1", "eagle3", "mtp")] == [eagle1_spec, eagle3_spec, mtp_spec]
    assert KINDS["mtp"].part("recognise") is looks_mtp and KINDS["mtp"].part("reader") is load_mtp_draft
    assert (KINDS["eagle1"].head_class(), KINDS["eagle3"].head_class()) == (Eagle1Head, Eagle3Head)
    assert KINDS["mtp"].head_class() is MtpHead
    assert KINDS["dflash"].head_class() is DflashHead


def test_a_part_nobody_registered_is_a_loud_error():  # never a silent fall back to another kind
    bare = HeadKind("x", "X", frozenset(), vllm_method="x", target_lm_head=True, vocab_map=False,
                    fc_bias_foldable=False, aux_states=False, required_tensors=(), tree_defaults=(1, 1, 2),
                    sglang_algorithm="X", sglang_architecture=None)
    with pytest.raises(RuntimeError, match="X head kind has no reader registered"):
        bare.read(None, {})


@pytest.mark.parametrize("opener", ["eagle_convert.benchmark.inputs", "eagle_convert.engines.prepare",
                                    "eagle_convert.benchmark.entry"])
def test_a_room_that_opens_heads_has_every_reading_part(opener):
    """In a fresh interpreter (no test imported the MTP room first), importing a room that calls open_head fills
    every row's recogniser, reader and spec builder; and the runner finds every kind's head module."""
    code = (f"import {opener}\nfrom eagle_convert.kinds import KINDS\n"
            "for k in KINDS.values():\n"
            "    [k.part(p) for p in ('reader', 'spec_builder') + (() if k.fallback else ('recognise',))]\n")
    if opener.endswith("api"):
        code += ("from eagle_convert.runner.heads import head_module_class\nfrom eagle_convert.spec import DraftSpec\n"
                 "class S: head_kind = KINDS['mtp']\nprint(head_module_class(S).__name__)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == ("MtpHead" if opener.endswith("api") else "")


def test_every_layout_holds_kinds_of_the_table():
    assert {kind for layout in LAYOUTS.values() for kind in layout.kinds} == set(KINDS)


def test_a_draft_is_of_the_kind_that_recognises_it():
    assert [name for name, kind in KINDS.items() if kind.fallback] == ["eagle1"]  # one fallback kind
    assert kind_of({}, frozenset({"midlayer.self_attn.q_proj.weight", "fc.weight"})) == "eagle3"
    assert kind_of({"speculators_model_type": "eagle3"}, frozenset({"layers.0.mlp.up_proj.weight"})) == "eagle3"
    assert kind_of({"architectures": ["LlamaForCausalLM"]}, frozenset({"fc.weight", "layers.0.mlp.up_proj.weight"})) \
        == "eagle1"


def test_mtp_is_a_row_like_the_others(tmp_path):
    """An MTP layer is recognised by its row (looks_mtp) and read by open_head, the one door, as a DraftHead; among
    the kinds a layout holds it is never chosen."""
    from eagle_convert.checkpoint.open import open_input

    target = partial_mimo(tmp_path / "mimo")
    target_config = open_input(str(target), role="target").checkpoint.config
    for folder in (target, extract(target, tmp_path / "mimo-vllm")):
        ckpt = open_input(str(folder), role="draft").checkpoint
        names = frozenset(ckpt.names())
        assert kind_of(ckpt.config, names) == "mtp" and kind_of(ckpt.config, names, from_draft_checkpoint=True) != "mtp"
        head = open_head(ckpt, target_config, label=str(folder))
        assert isinstance(head, DraftHead) and isinstance(head, MtpDraft) and head.spec.kind == "mtp"
        assert head.layout is None and head.layout_name.startswith("mtp (mimo, ")
        assert head_module_class(head.spec) is MtpHead
