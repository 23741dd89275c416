"""The head kinds, one row each: what a kind is (its canonical tensors, what it takes from the target, its fc-bias
rule, which engine name it has) and the parts that read, build and run it.

Code asks the kind (`spec.head_kind`) instead of comparing kind names; a layout says which kinds it holds
(`Layout.kinds`). This is the ground floor: the parts that live above it (a kind's recogniser, checkpoint reader and
spec builder in draft/ or mtp/, its head module in runner/) are registered into the row by their own modules when
imported (`register`), so nothing here names a module above it. A new kind is a new row here plus its own modules,
each registering its part."""

from __future__ import annotations

import re
from collections.abc import Callable, Container
from dataclasses import dataclass, field

from .errors import UnsupportedConversionError

EAGLE1 = "eagle1"
EAGLE3 = "eagle3"
MTP = "mtp"
DFLASH = "dflash"

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


class _DflashNames:
    """DFlash canonical names (z-lab and speculators store the same): Qwen3 blocks under `layers.{i}.` with q/k
    norms, `fc` over the tapped target states, `hidden_norm`, `norm`; no embedding or LM head of its own."""

    _LAYER = re.compile(r"layers\.\d+\.(self_attn\.[qkvo]_proj\.weight|self_attn\.[qk]_norm\.weight|"
                        r"mlp\.(gate|up|down)_proj\.weight|(input_layernorm|post_attention_layernorm)\.weight)")

    def __contains__(self, name: str) -> bool:
        return name in ("fc.weight", "hidden_norm.weight", "norm.weight") or bool(self._LAYER.fullmatch(name))


DFLASH_NAMES = _DflashNames()
DFLASH_ARCHITECTURES = ("DFlashDraftModel", "Qwen3DFlashDraftModel")  # z-lab's; JetSpec writes the first


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
    # `bench --tree dynamic`'s (depth, top_k, tokens) when left out: EAGLE's own defaults (eval scripts; EAGLE-3
    # main); MTP has none of its own and takes EAGLE-1's
    tree_defaults: tuple[int, int, int]
    sglang_algorithm: str  # SGLang's --speculative-algorithm (MTP runs as EAGLE over a NextN model)
    sglang_architecture: str | None  # the SGLang draft class the sglang layout names; None: no draft layout holds it
    # (config, tensor names) -> whether a draft is of this kind; None with `fallback`: the kind no other kind claims;
    # None otherwise: registered from above (`register(kind, recognise=...)`)
    recognise: Callable[[dict, frozenset[str]], bool] | None = None
    fallback: bool = False
    # Converted from a draft checkpoint by a draft layout; False: extracted from its target (`convert --mtp`) by the
    # layouts marked `from_target`, which keep the target's own names
    from_draft_checkpoint: bool = True
    # Why our bench runner cannot run this kind yet (None: it can): said before any model is loaded
    runner_refusal: str | None = None
    # Registered from above (PARTS): reader (checkpoint, target config, label, drop) -> head; spec_builder (cfg,
    # tensors, common, target_config, notes, label, nested_taps) -> DraftSpec; runner_head: the bench runner's
    # head module class
    parts: dict = field(default_factory=dict, compare=False, repr=False)

    def part(self, name: str):
        if name == "recognise" and self.recognise is not None:
            return self.recognise
        if name not in self.parts:  # a programming error, never the user's: say which module should have registered
            raise RuntimeError(f"The {self.title} head kind has no {name} registered: import the module that "
                               f"registers it ({_REGISTERED_BY[name]}) before reading {self.title} heads.")
        return self.parts[name]

    def build_spec(self, *args):
        return self.part("spec_builder")(*args)

    def read(self, checkpoint, target_config, *, label: str | None = None, drop: tuple[str, ...] = ()):
        return self.part("reader")(checkpoint, target_config, label=label, drop=drop)

    def head_class(self):
        return self.part("runner_head")


PARTS = ("recognise", "reader", "spec_builder", "runner_head")
_REGISTERED_BY = {"recognise": "mtp/draft.py for MTP", "reader": "draft/load.py, mtp/draft.py, draft/dflash_head.py",
                  "spec_builder": "draft/load.py, mtp/draft.py, draft/dflash_head.py",
                  "runner_head": "runner/heads.py, runner/mtp_head.py, runner/dflash_drafter.py"}


def register(kind: str, **parts) -> None:
    """A module above this one fills its part of `kind`'s row (PARTS), once, when it is imported."""
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError(f"not parts of a head kind: {sorted(unknown)}")
    KINDS[kind].parts.update(parts)


def _looks_eagle3(config: dict, names: frozenset[str]) -> bool:
    archs = " ".join(config.get("architectures") or [])
    return (any(n.startswith(("midlayer.", "eagle_module.")) for n in names) or "d2t" in names
            or any(n.endswith("layers.0.hidden_norm.weight") for n in names) or "Eagle3" in archs
            or config.get("speculators_model_type") == "eagle3")


def _looks_dflash(config: dict, names: frozenset[str]) -> bool:
    """z-lab (and JetSpec) by architecture or dflash_config, speculators by its model type. Families built on a DFlash
    body (DSpark, Domino, ...) are named and refused before any kind is asked (families/)."""
    archs = set(config.get("architectures") or [])
    return (bool(archs & set(DFLASH_ARCHITECTURES)) or isinstance(config.get("dflash_config"), dict)
            or config.get("speculators_model_type") == "dflash")


def kind_of(config: dict, names: frozenset[str], *, from_draft_checkpoint: bool = False) -> str:
    """The kind a draft checkpoint holds, from its config and tensor names: the first row that claims it (MTP first:
    its layers are told apart by where their tensors sit, which a draft layout's never do), else the fallback kind.
    `from_draft_checkpoint`: among the kinds a draft layout holds only (a checkpoint a layout was already found for)."""
    rows = [kind for kind in KINDS.values() if kind.from_draft_checkpoint or not from_draft_checkpoint]
    claimed = [kind.name for kind in rows if not kind.fallback and kind.part("recognise")(config, names)]
    return claimed[0] if claimed else next(kind.name for kind in rows if kind.fallback)


def check_takes_token_map(kind: HeadKind) -> None:
    """A hot-token map restricts the target's LM head; a head with a vocabulary of its own (EAGLE-3: d2t) has none to
    restrict, and SGLang ignores --speculative-token-map for EAGLE3 with a warning (eagle_worker.py)."""
    if not kind.target_lm_head:
        raise UnsupportedConversionError(
            f"A hot-token map restricts the target's LM head, which an {kind.title} head does not draft "
            "with: its draft vocabulary is its own, fixed by training (d2t), and SGLang ignores "
            "--speculative-token-map for EAGLE3 heads (eagle_worker.py: 'EAGLE3 models already have this').",
            "Bench the head without --token-map; `eagle-convert vocab-map check HEAD` shows its own map.")


KINDS = {kind.name: kind for kind in (
    # The MTP layer a target ships (DeepSeek, GLM, Qwen3-Next, MiMo, ...): engines build it from the target's config
    # and share the target's embedding and LM head; read by mtp/draft.py (which registers its recogniser, reader and
    # builder), never by a draft layout. First: kind_of asks it first.
    HeadKind(MTP, "MTP", MTP_NAMES, vllm_method="mtp", target_lm_head=True, vocab_map=False, fc_bias_foldable=False,
             aux_states=False, required_tensors=(), tree_defaults=(5, 10, 60), sglang_algorithm="EAGLE",
             sglang_architecture=None, from_draft_checkpoint=False),
    HeadKind(EAGLE1, "EAGLE-1", EAGLE1_NAMES, vllm_method="eagle", target_lm_head=True, vocab_map=False,
             fc_bias_foldable=True, aux_states=False, required_tensors=("fc.weight",), tree_defaults=(5, 10, 60),
             sglang_algorithm="EAGLE", sglang_architecture="LlamaForCausalLMEagle", fallback=True),
    HeadKind(EAGLE3, "EAGLE-3", EAGLE3_NAMES, vllm_method="eagle3", target_lm_head=False, vocab_map=True,
             fc_bias_foldable=False, aux_states=True, required_tensors=(), tree_defaults=(7, 10, 60),
             sglang_algorithm="EAGLE3", sglang_architecture="LlamaForCausalLMEagle3", recognise=_looks_eagle3),
    # DFlash (z-lab; JetSpec = causal): drafts a block of mask tokens in one forward from tapped target states, with
    # the target's embedding and LM head (draft/dflash_head.py reads it; layouts/dflash_zlab.py, speculators_dflash.py)
    HeadKind(DFLASH, "DFlash", DFLASH_NAMES, vllm_method="dflash", target_lm_head=True, vocab_map=False,
             fc_bias_foldable=False, aux_states=False, required_tensors=("fc.weight", "hidden_norm.weight"),
             tree_defaults=(5, 10, 60), sglang_algorithm="DFLASH", sglang_architecture=None,
             recognise=_looks_dflash),
)}
