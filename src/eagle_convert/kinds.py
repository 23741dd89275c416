"""The head kinds, one row each: what a kind is (its canonical tensors, what it takes from the target, its fc-bias
rule, which engine name it has) and which modules build it (the spec builder in draft/, the runner head class).

Code asks the kind (`spec.head_kind`) instead of comparing kind names; a layout says which kinds it holds
(`Layout.kinds`). A new kind is a new row here plus its own builder and runner head."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Container
from dataclasses import dataclass

EAGLE1 = "eagle1"
EAGLE3 = "eagle3"
MTP = "mtp"

# Canonical tensor names (spec.py explains them), per head kind. Anything else in a draft is unexpected.
LAYER = "layers.0."
EAGLE1_NAMES = frozenset(
    ["fc.weight", "fc.bias", "embed_tokens.weight", "lm_head.weight",
     LAYER + "post_attention_layernorm.weight"]
    + [f"{LAYER}self_attn.{p}_proj.weight" for p in "qkvo"]
    + [f"{LAYER}self_attn.{p}_proj.bias" for p in "qkv"]
    + [f"{LAYER}mlp.{p}_proj.weight" for p in ("gate", "up", "down")]
)
EAGLE3_BASE_NAMES = frozenset(
    ["fc.weight", "embed_tokens.weight", "lm_head.weight", "norm.weight", "d2t", "t2d"]
    + [f"{LAYER}{n}.weight" for n in ("input_layernorm", "hidden_norm", "post_attention_layernorm")]
    + [f"{LAYER}self_attn.{p}_proj.weight" for p in "qkvo"]
    + [f"{LAYER}mlp.{p}_proj.weight" for p in ("gate", "up", "down")]
)


class _Eagle3Names:
    """EAGLE-3 canonical names, variants included: `input_norm.weight` (norm_before_fc), `fc_norm.{i}.weight`
    (EAGLE 3.1), `layers.{n}.*` (multi-layer; only layer 0 has hidden_norm, as in vLLM), q_norm/k_norm (Qwen3)."""

    _LAYER = re.compile(r"layers\.(\d+)\.(self_attn\.[qkvo]_proj\.weight|self_attn\.[qk]_norm\.weight|"
                        r"mlp\.(gate|up|down)_proj\.weight|(input_layernorm|post_attention_layernorm|hidden_norm)\.weight)")

    def __contains__(self, name: str) -> bool:
        if (name in EAGLE3_BASE_NAMES or name in ("input_norm.weight", "fc.bias")
                or re.fullmatch(r"fc_norm\.\d+\.weight", name)):
            return True
        m = self._LAYER.fullmatch(name)
        return bool(m) and not (m.group(1) != "0" and m.group(4) == "hidden_norm")


EAGLE3_NAMES = _Eagle3Names()


class _MtpNames:
    """MTP canonical names: a layer's own names under `layers.{i}.` (mtp/draft.py; which ones a family needs is the
    MTP families' business, not a fixed set)."""

    def __contains__(self, name: str) -> bool:
        return re.match(r"layers\.\d+\.", name) is not None


MTP_NAMES = _MtpNames()


@dataclass(frozen=True)
class HeadKind:
    name: str  # DraftSpec.kind, and "kind" in --json
    title: str  # for people: "EAGLE-1"
    canonical_names: Container[str]
    vllm_method: str  # vLLM's --speculative-config method
    target_lm_head: bool  # drafts with the target's LM head (spliced in, or shared by the engine), never its own
    vocab_map: bool  # may draft over a vocabulary of its own, mapped to the target's by d2t / t2d
    fc_bias_foldable: bool  # fc over [embedding ; feature]: a bias a layout cannot hold folds into the embedding
    aux_states: bool  # fed target aux hidden states (EAGLE-3): variant flags, read by draft/variants.py
    required_tensors: tuple[str, ...]  # a head without one of them is not a head of this kind
    spec_builder: str  # "module:function" (cfg, tensors, common, target_config, notes, label, nested_aux_offset)
    runner_head: str  # "module:class", the bench runner's head for this kind
    # (config, tensor names) -> whether a draft is of this kind; None: the kind of a draft no other kind claims
    recognise: Callable[[dict, frozenset[str]], bool] | None = None
    # Written by a draft layout (layouts/); False: by `convert --mtp` (mtp/), which keeps the target's own names
    in_layouts: bool = True

    def build_spec(self, *args):
        return _resolve(self.spec_builder)(*args)

    def head_class(self):
        return _resolve(self.runner_head)


def _looks_eagle3(config: dict, names: frozenset[str]) -> bool:
    archs = " ".join(config.get("architectures") or [])
    return (any(n.startswith(("midlayer.", "eagle_module.")) for n in names) or "d2t" in names
            or any(n.endswith("layers.0.hidden_norm.weight") for n in names) or "Eagle3" in archs
            or config.get("speculators_model_type") == "eagle3")


def _not_a_layout(config: dict, names: frozenset[str]) -> bool:
    """MTP heads are told apart before any draft layout is tried (mtp/draft.py `looks_mtp`, from the MTP families
    table), so no layout's checkpoint is ever of this kind."""
    return False


def kind_of(config: dict, names: frozenset[str]) -> str:
    """The kind a draft checkpoint holds, from its config and tensor names."""
    claimed = [kind.name for kind in KINDS.values() if kind.recognise and kind.recognise(config, names)]
    return claimed[0] if claimed else next(kind.name for kind in KINDS.values() if kind.recognise is None)


def _resolve(path: str):
    """A builder or class named "module:attribute", imported when first used (runner heads need torch)."""
    module, attribute = path.split(":")
    return getattr(importlib.import_module(module), attribute)


KINDS = {kind.name: kind for kind in (
    HeadKind(EAGLE1, "EAGLE-1", EAGLE1_NAMES, vllm_method="eagle", target_lm_head=True, vocab_map=False,
             fc_bias_foldable=True, aux_states=False, required_tensors=("fc.weight",),
             spec_builder="eagle_convert.draft.load:eagle1_spec", runner_head="eagle_convert.runner.heads:Eagle1Head"),
    HeadKind(EAGLE3, "EAGLE-3", EAGLE3_NAMES, vllm_method="eagle3", target_lm_head=False, vocab_map=True,
             fc_bias_foldable=False, aux_states=True, required_tensors=(),
             spec_builder="eagle_convert.draft.load:eagle3_spec", runner_head="eagle_convert.runner.heads:Eagle3Head",
             recognise=_looks_eagle3),
    # The MTP layer a target ships (DeepSeek, GLM, Qwen3-Next, MiMo, ...): engines build it from the target's config
    # and share the target's embedding and LM head; read by mtp/draft.py, never by a draft layout.
    HeadKind(MTP, "MTP", MTP_NAMES, vllm_method="mtp", target_lm_head=True, vocab_map=False, fc_bias_foldable=False,
             aux_states=False, required_tensors=(), spec_builder="eagle_convert.mtp.draft:mtp_spec",
             runner_head="eagle_convert.runner.mtp:MtpHead", recognise=_not_a_layout, in_layouts=False),
)}
