"""The runner's numbers do not depend on how a checkpoint's bytes were laid out: every tensor it computes with is its
own (not a view of the reader's storage), contiguous and 64-byte aligned, whatever the reader handed out; and a
target and heads loaded from deliberately misaligned or strided views give bit-identical outputs to ones loaded
from plain tensors. (Some CPUs' BLAS kernels round differently on misaligned operands: an mmapped safetensors file
puts a tensor at any byte offset, a .bin does not.)"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from support.runner_fixtures import draft_spec_for, random_head_weights, random_target_weights, tiny_config

from eagle_convert.kinds import EAGLE1, EAGLE3
from eagle_convert.runner.heads import build_draft_head
from eagle_convert.runner.model import TargetModel

OFF_BOUNDARY = 8  # bytes past a 64-byte boundary: a legal offset for every dtype here (int64 d2t included)


def misaligned(tensor: torch.Tensor) -> torch.Tensor:
    """The same values in a view OFF_BOUNDARY bytes past a 64-byte boundary of a bigger buffer."""
    size = tensor.numel() * tensor.element_size()
    raw = torch.zeros(size + 128, dtype=torch.uint8)
    start = (-raw.data_ptr()) % 64 + OFF_BOUNDARY
    view = raw[start:start + size].view(tensor.dtype).view(tensor.shape)
    view.copy_(tensor)
    assert view.data_ptr() % 64 == OFF_BOUNDARY
    return view


def strided(tensor: torch.Tensor) -> torch.Tensor:
    """The same values, a matrix stored transposed (a non-contiguous view)."""
    return tensor.t().contiguous().t() if tensor.dim() == 2 else misaligned(tensor)


class RecordingReader:
    """get_tensor over `tensors`, handing out `layout(tensor)`. It keeps what it handed out alive, as an mmapped file
    stays mapped: otherwise a freed buffer's address could be reused by the runner's copy and look shared."""

    def __init__(self, tensors: dict[str, torch.Tensor], layout=lambda t: t):
        self.tensors, self.layout, self.handed_out = tensors, layout, []

    def __call__(self, name: str) -> torch.Tensor:
        out = self.layout(self.tensors[name])  # KeyError for a missing name, as the heads expect
        self.handed_out.append(out)
        return out

    @property
    def storages(self) -> set[int]:
        return {t.untyped_storage().data_ptr() for t in self.handed_out}


def held_tensors(obj, seen=None) -> list[torch.Tensor]:
    """Every tensor reachable from the runner object `obj` (attributes, dataclass fields, lists)."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for item in obj for t in held_tensors(item, seen)]
    if dataclasses.is_dataclass(obj) or hasattr(obj, "__dict__"):
        return [t for value in vars(obj).values() for t in held_tensors(value, seen)]
    return []


def moe_target() -> tuple[dict, dict[str, torch.Tensor]]:
    """A qwen3_moe target with per-expert tensors (stacked by the runner) and a router per layer."""
    config = tiny_config("qwen3", num_hidden_layers=3) | {
        "model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "num_experts": 4,
        "num_experts_per_tok": 2, "norm_topk_prob": True}
    weights = random_target_weights(config, seed=11)
    g = torch.Generator().manual_seed(12)
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}.mlp."
        weights[p + "gate.weight"] = torch.randn(4, hidden, generator=g)
        for e in range(4):
            weights |= {f"{p}experts.{e}.gate_proj.weight": torch.randn(inter, hidden, generator=g) * hidden ** -0.5,
                        f"{p}experts.{e}.up_proj.weight": torch.randn(inter, hidden, generator=g) * hidden ** -0.5,
                        f"{p}experts.{e}.down_proj.weight": torch.randn(hidden, inter, generator=g) * inter ** -0.5}
    return config, weights


TARGETS = {"llama": lambda: (tiny_config("llama", num_hidden_layers=3), 1),
           "qwen2": lambda: (tiny_config("qwen2", num_hidden_layers=3), 2),
           "qwen3_moe": moe_target}


def target_case(name: str) -> tuple[dict, dict[str, torch.Tensor]]:
    made = TARGETS[name]()
    if isinstance(made[1], int):
        config, seed = made
        return config, random_target_weights(config, seed)
    return made


def build(config, target_weights, spec, head_weights, layout):
    """(target, head, target reader, head reader), every tensor read through `layout`."""
    target_reader, head_reader = RecordingReader(target_weights, layout), RecordingReader(head_weights, layout)
    target = TargetModel(config, target_reader, aux_layer_ids=(0, 1, 2) if spec.is_eagle3 else ())
    head = build_draft_head(spec, head_reader, target_embedding=target.embed_weight,
                            target_lm_head=target.lm_head_weight)
    return target, head, target_reader, head_reader


def head_case(config: dict, kind: str) -> tuple:
    if kind == EAGLE1:  # with its own lm_head, which EAGLE-1 reads by a path of its own
        spec = draft_spec_for(config, EAGLE1, fc_bias=True)
        weights = random_head_weights(spec, seed=21)
        weights["lm_head.weight"] = torch.randn(config["vocab_size"], config["hidden_size"],
                                                generator=torch.Generator().manual_seed(22))
        return spec, weights
    spec = draft_spec_for(config, EAGLE3, draft_vocab_size=48, aux_layer_ids=(0, 1, 2))
    weights = random_head_weights(spec, seed=23)
    used = torch.randperm(config["vocab_size"], generator=torch.Generator().manual_seed(24))[:48].sort().values
    weights["d2t"] = used - torch.arange(48)
    return spec, weights


def outputs(target, head) -> list[torch.Tensor]:
    """A target pass and two head steps, everything the runner computes from the weights."""
    ids = torch.arange(3, 11).view(1, -1)
    out = target(ids, range(8))
    first = head(ids[:, 1:], head.target_feature(out)[:, :-1], range(7), from_target=True)
    second = head(ids[:, :1], first.hidden[:, -1:], range(7, 8), from_target=False)
    return [out.logits, out.hidden, *([out.aux] if out.aux is not None else []), first.logits, first.hidden,
            second.logits, second.hidden, head.to_target_ids(second.logits[0].argmax(-1))]


@pytest.mark.parametrize("layout", [misaligned, strided], ids=["misaligned", "strided"])
@pytest.mark.parametrize("kind", [EAGLE1, EAGLE3])
@pytest.mark.parametrize("target_name", TARGETS)
def test_runner_owns_aligned_contiguous_weights_whatever_the_reader_returns(target_name, kind, layout):
    config, target_weights = target_case(target_name)
    spec, head_weights = head_case(config, kind)
    target, head, target_reader, head_reader = build(config, target_weights, spec, head_weights, layout)
    handed_out = target_reader.storages | head_reader.storages
    held = held_tensors(target) + held_tensors(head)
    assert len(held) > 20  # the walk reached the layers' weights
    for tensor in held:
        assert tensor.untyped_storage().data_ptr() not in handed_out, tuple(tensor.shape)
        assert tensor.is_contiguous() and tensor.data_ptr() % 64 == 0, tuple(tensor.shape)


@pytest.mark.parametrize("layout", [misaligned, strided], ids=["misaligned", "strided"])
@pytest.mark.parametrize("kind", [EAGLE1, EAGLE3])
@pytest.mark.parametrize("target_name", TARGETS)
def test_outputs_from_a_misaligned_source_equal_an_aligned_ones_bit_for_bit(target_name, kind, layout):
    config, target_weights = target_case(target_name)
    spec, head_weights = head_case(config, kind)
    plain = outputs(*build(config, target_weights, spec, head_weights, lambda t: t)[:2])
    other = outputs(*build(config, target_weights, spec, head_weights, layout)[:2])
    assert len(plain) == len(other)
    for a, b in zip(plain, other):
        assert torch.equal(a, b)
    assert not torch.equal(plain[0], torch.zeros_like(plain[0]))  # the model computed something
