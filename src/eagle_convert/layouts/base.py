"""What a layout is: how to recognise it, how its names map to canonical names, and how to emit it.

A layout module defines one `Layout` subclass and registers it.
Input side: `detect` + `flat_config` + `source_to_canonical`.
Output side: `refusal` + `output_config` + `output_names` + `serve_command`. Everything here is pure: no file I/O."""

from __future__ import annotations

import fnmatch
import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass

from ..kinds import KINDS
from ..rope.schedule import limit_sets_schedule, output_rope_fields
from ..spec import DraftSpec
from ..taps.conventions import CONVENTIONS, TOP
from .registry import draft_layouts, output_layouts_for

# Canonical tensor names live with their head kind (kinds.py); these names stay for the layouts that use them.
# The draft's own max_position_embeddings, recorded in an output whose limit convert raised: evidence of the context
# the head was made for (positions/checks.py). No engine reads it (not `original_max_position_embeddings`, which
# SGLang copies into rope_scaling: models/llama.py:329-333).
SOURCE_LIMIT_KEY = "eagle_convert_source_max_position_embeddings"

CANONICAL_NAMES = {kind.name: kind.canonical_names for kind in KINDS.values()}


@dataclass(frozen=True)
class TargetVocabulary:
    """The target's vocabulary as its own GGUF states it (`convert --target-gguf`), for a llama.cpp draft that reads
    the mask token through a vocabulary of its own (DFlash): checked to be this target's (conversion/target_gguf.py)."""

    file: str  # the target GGUF, for the serve command (-m)
    keys: dict  # every tokenizer.* key -> (GGUF type name, value), as the target's file holds it


@dataclass(frozen=True)
class OutputContext:
    """What an output layout needs to know beyond the head itself."""

    target_label: str  # how the user named the target (folder or repo id), for the serve command
    target_config: dict
    out_label: str
    dtype_name: str  # "bfloat16", ...
    verifier: str | None = None  # speculators: the verifier's name or path
    num_speculative_tokens: int = 3
    token_map: str | None = None  # a hot-token map file written beside the head (SGLang --speculative-token-map)
    target_vocabulary: TargetVocabulary | None = None  # --target-gguf: copied into a draft that needs it


@dataclass(frozen=True)
class DerivedTensor:
    """An output tensor the head does not have, made from nothing: explicit zeros of `shape` standing for `role`."""

    role: str  # the canonical name it stands for
    shape: tuple[int, ...]


@dataclass(frozen=True)
class EmbeddingRule:
    """The engine replaces the draft's own embed_tokens with the target's: convert compares them and refuses a
    difference (`refusal`, with {difference} for what was found; `hint` says what to do instead)."""

    check: str  # what is compared, said by a dry run (which reads no tensor data) as "will check: ..."
    refusal: str
    hint: str


@dataclass(frozen=True)
class Rewrite:
    """A change a layout makes to a tensor's values on the way out, same shape (llama.cpp's q/k row order, absolute
    d2t ids): `apply` takes the tensor as read and returns it as written; `how` says it in the plan and provenance."""

    how: str
    apply: Callable


class Layout:
    name: str = ""
    summary: str = ""  # one line for the layouts table (docs/layouts.md)
    kinds: tuple[str, ...] = ()  # head kinds this layout can hold
    readable: bool = True
    writable: bool = True
    engine: str = ""  # which engine loads it (docs/layouts.md table)
    # What a user of this layout must know, said by `eagle-convert layouts`, in `--to`'s help when it is the
    # default, and as a warning after every conversion to it (e.g. which engine versions refuse it).
    note: str = ""
    served_by: tuple[str, ...] = ()  # engines (engines/: "vllm") that load this layout as it is stored
    output_order: int = 50  # where it comes among output layouts in generated tables (the first is recommended)
    detect_priority: int = 50  # lower is tried first: the most specific layouts go first
    # The tap convention (taps/conventions.py) of aux layer ids nested in eagle_config: "vllm-nested" (the input of
    # layer i, as vLLM reads them) or "sglang-nested" (the output of layer i; SGLang adds 1, models/llama.py
    # set_eagle3_layers_to_capture), as SGLang-lineage exporters and ModelOpt write them.
    nested_taps: str = "vllm-nested"
    # The serve flag that loads a hot-token map (FR-Spec) for an EAGLE-1/2 head; None: the engine has none.
    token_map_flag: str | None = None
    # Written from the target alone (`convert --mtp TARGET --to <to>`): the head lives inside the target (MTP layers,
    # extracted.py). Such layouts are never a draft's input, a `convert DRAFT --to` choice, or a row of the tables.
    from_target: bool = False
    # The one GGUF file this layout writes (its metadata: `output_config`), instead of safetensors and config.json.
    gguf_file: str | None = None

    # ---- input side ---------------------------------------------------------------------------------------------
    def detect(self, config: dict, names: frozenset[str]) -> str | None:
        """Return why this checkpoint is in this layout, or None."""
        return None

    def flat_config(self, config: dict) -> dict:
        """The draft's HF-style (Llama/Qwen2) config with EAGLE keys, unwrapped from any envelope."""
        return dict(config)

    def source_to_canonical(self, name: str) -> str:
        return name

    def input_notes(self, config: dict) -> tuple[str, ...]:
        """Quirks of this exporter's layout that reading it normalised, said to the user."""
        return ()

    def check_input(self, config: dict, label: str) -> None:
        """Raise (a typed error naming the key) for a config this layout's producer meant as a head no engine runs."""

    # ---- output side --------------------------------------------------------------------------------------------
    def refusal(self, spec: DraftSpec, canonical: frozenset[str]) -> str | None:
        """Why this head cannot be written in this layout (None when it can)."""
        if spec.kind not in self.kinds:
            holders = [name for name in output_layouts_for(spec.kind) if name in draft_layouts()]
            return (f"the {self.name} layout holds {' and '.join(k.upper() for k in self.kinds)} heads only"
                    + (f"; a {spec.kind.upper()} head is written with --to {' / '.join(holders)}" if holders else ""))
        return None

    def output_config(self, spec: DraftSpec, ctx: OutputContext) -> dict:
        raise NotImplementedError

    def gguf_file_for(self, spec: DraftSpec) -> str | None:
        """The GGUF file this head is written to (None: safetensors and config.json)."""
        return self.gguf_file

    def output_names(self, spec: DraftSpec, canonical: frozenset[str]) -> dict[str, str]:
        """output name -> canonical name. Canonical names missing here are dropped (see `dropped_reasons`)."""
        raise NotImplementedError

    def dropped_reasons(self, spec: DraftSpec) -> dict[str, str]:
        """canonical name -> why this layout leaves it out on purpose."""
        return {}

    def derived_tensors(self, spec: DraftSpec, canonical: frozenset[str]) -> dict[str, DerivedTensor]:
        """output name -> a tensor the layout needs that the head lacks (written after `output_names`)."""
        return {}

    def rewrites(self, spec: DraftSpec) -> dict[str, Rewrite]:
        """output name -> how its values change on the way out (none: tensors are copied, or cast)."""
        return {}

    def output_dtype(self, name: str, shape: tuple[int, ...], planned):
        """The dtype `name` is written in, given the one the plan chose (the --dtype for float tensors)."""
        return planned

    def embedding_rule(self, spec: DraftSpec, canonical: frozenset[str]) -> EmbeddingRule | None:
        """How the engine treats a draft's own embedding, when it does not load it as it is (None: it does)."""
        return None

    def takes_target_vocabulary(self, spec: DraftSpec) -> bool:
        """Whether this head, written in this layout, holds a copy of the target's vocabulary (`--target-gguf`)."""
        return False

    def output_warnings(self, spec: DraftSpec, ctx: OutputContext) -> tuple[str, ...]:
        """What the user must do before an engine runs this output (said after the conversion, and in --json)."""
        return ()

    def ir_export(self, spec: DraftSpec, ctx: OutputContext):
        """How the written head is then exported to another format inside the staging folder (openvino.IrExport:
        OpenVINO IR, by optimum-intel in its own interpreter), or None: the tensors written are the output."""
        return None

    def serve_command(self, spec: DraftSpec, ctx: OutputContext) -> str:
        """The command that serves the output. It always names the method: without one, vLLM (0.33) guesses it from
        the draft folder's name ("eagle3" in the path), so a folder named after another kind would misroute."""
        return vllm_serve_command(spec, ctx)


def vllm_serve_command(spec: DraftSpec, ctx: OutputContext) -> str:
    """`vllm serve TARGET --speculative-config '{"method": ..., "model": OUT, "num_speculative_tokens": k}'`."""
    config = {"method": spec.head_kind.vllm_method, "model": ctx.out_label,
              "num_speculative_tokens": ctx.num_speculative_tokens}
    return f"vllm serve {shlex.quote(ctx.target_label)} --speculative-config {shlex.quote(json.dumps(config))}"


def has_layer_prefix(names: frozenset[str], prefix: str) -> bool:
    return any(n.startswith(prefix) for n in names)


def rename_prefix(name: str, old: str, new: str) -> str:
    return new + name[len(old):] if name.startswith(old) else name


def base_inner_config(spec: DraftSpec, ctx: OutputContext, *, architecture: str, model_type: str) -> dict:
    """The HF Llama/Qwen2 config every output layout starts from: the draft's own keys, with the EAGLE fixes applied.

    RoPE stays the draft's own (explicit `rope_theta`, no target scaling): the head was trained with it; it is
    written as both `rope_scaling` (older stacks) and `rope_parameters` (transformers 5), with the defaults that
    follow the position limit made explicit (rope.py). The position limit is raised to the target's, since a 2048
    limit stops drafting on long prompts (not for dynamic scaling, whose frequencies follow it), and the draft's own
    limit is recorded under SOURCE_LIMIT_KEY so that `inspect` can still say what context the head was made for.
    SafeAILab's `bias` (fc bias) is removed: vLLM reads it as *attention* bias."""
    cfg = {"architectures": [architecture], "model_type": model_type}
    cfg.update((k, v) for k, v in spec.extra.items() if k not in DROPPED_SOURCE_KEYS)
    cfg.update(
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        head_dim=spec.head_dim,
        num_hidden_layers=spec.num_layers,  # 1 for an EAGLE-1 head
        rms_norm_eps=spec.rms_norm_eps,
        hidden_act=spec.hidden_act,
        **output_rope_fields(_rope_source(spec), spec.max_position_embeddings),
        vocab_size=spec.vocab_size,
        max_position_embeddings=output_limit(spec, ctx),
        tie_word_embeddings=False,
        torch_dtype=ctx.dtype_name,
    )
    if cfg["max_position_embeddings"] > spec.max_position_embeddings:
        cfg[SOURCE_LIMIT_KEY] = min(v for v in (spec.max_position_embeddings, spec.extra.get(SOURCE_LIMIT_KEY)) if v)
    if model_type in ("llama", "qwen3"):
        cfg["attention_bias"] = False  # explicit: no o_proj bias, and no q/k/v bias unless qkv_bias says so
        if spec.qkv_bias:  # vLLM's Llama layer takes q/k/v bias from `qkv_bias`, o_proj bias from `attention_bias`
            cfg["qkv_bias"] = True
    if spec.head_kind.aux_states:
        cfg.update(eagle3_fields(spec), eagle_config=eagle3_nested(spec))
    return cfg


def _rope_source(spec: DraftSpec) -> dict:
    """The draft's RoPE keys: the spec's theta and scaling, and the source's rope_parameters (an mrope_section there
    has no place in the spec)."""
    return {"rope_theta": spec.rope_theta, "rope_scaling": spec.rope_scaling,
            "rope_parameters": spec.extra.get("rope_parameters")}


def output_limit(spec: DraftSpec, ctx: OutputContext) -> int:
    """The output's max_position_embeddings: the target's when larger, unless the draft's frequencies follow it."""
    source = {**_rope_source(spec), "max_position_embeddings": spec.max_position_embeddings}
    if limit_sets_schedule(source):
        return spec.max_position_embeddings
    return max(spec.max_position_embeddings, int(text_limit(ctx.target_config) or 0))


def text_limit(config: dict) -> int | None:
    """A target's max_position_embeddings, from its text_config when it has one (a multimodal target)."""
    nested = config.get("text_config")
    return (nested if isinstance(nested, dict) else {}).get("max_position_embeddings") or \
        config.get("max_position_embeddings")


def eagle3_fields(spec: DraftSpec) -> dict:
    """The EAGLE-3 keys engines read at the top level of a draft config, every one written explicitly (vLLM 0.32:
    llama_eagle3.py / qwen3_eagle3.py getattr(config, ...); docs/engine-notes.md has the lines)."""
    return {
        "draft_vocab_size": spec.draft_vocab_size,
        "target_hidden_size": spec.target_hidden_size,
        TOP.key: TOP.to_stored(written_aux_ids(spec)),
        "num_aux_hidden_states": spec.num_aux_states,  # vLLM's Llama draft counts aux states from this, not the ids
        "norm_before_residual": spec.norm_before_residual,
        "norm_before_fc": spec.norm_before_fc,
        "fc_norm": spec.fc_norm,
        "norm_output": spec.norm_output,
    }


def eagle3_nested(spec: DraftSpec) -> dict:
    """The nested `eagle_config` vLLM (use_aux_hidden_state, norm_before_fc, the aux ids) and ModelOpt-style readers
    look in; the same values as the top level (vLLM counts the nested ids as it counts the top-level ones)."""
    nested = {"eagle_config": {"use_aux_hidden_state": spec.use_aux_hidden_state,
                               "norm_before_fc": spec.norm_before_fc}}
    CONVENTIONS["vllm-nested"].write(nested, written_aux_ids(spec))
    return nested["eagle_config"]


def written_aux_ids(spec: DraftSpec) -> tuple[int, ...]:
    """The internal ids every output states: always explicit. A head fed aux states whose ids are unknown (no target
    to fill the EAGLE reference default from) is a caller's error, never written as [] for an engine to guess."""
    if spec.aux_layer_ids is None and spec.use_aux_hidden_state:
        raise ValueError("aux layer ids unknown: load the head with its target's config before writing it")
    return tuple(spec.aux_layer_ids or ())


# Keys never carried from a source config into an output: EAGLE envelope keys (re-derived), keys that mislead
# loaders (`bias` is read as attention bias by vLLM), RoPE in transformers-5 form (rewritten as rope_theta), and
# bookkeeping from the exporting tool.
DROPPED_SOURCE_KEYS = frozenset({
    "bias", "architectures", "model_type", "rope_parameters", "_name_or_path", "auto_map", "transformers_version",
    "speculators_model_type", "speculators_config", "speculators_version", "transformer_layer_config",
    "eagle_fc_bias", "model", "eagle_config", "draft_vocab_size", "target_hidden_size",
    "eagle_aux_hidden_state_layer_ids", "norm_before_residual", "dtype", "torch_dtype", "norm_before_fc", "fc_norm",
    "norm_output", "num_aux_hidden_states", "use_aux_hidden_state", "num_aux_layers", "use_aux_norm",
    # ModelOpt's eagle_config keys (modelopt.MODELOPT_KEYS), should an exporter put them at the top level: an output
    # carrying them would be read back as a ModelOpt export (aux ids +1).
    "use_input_layernorm_in_first_layer", "use_last_layernorm", "use_mtp_layernorm", "next_layer_regular",
    "parallel_draft_step", "parallel_draft_heads_num_layers",
})


def matches_any(name: str, patterns: tuple[str, ...]) -> str | None:
    """The first shell-style pattern (`fnmatch`, case-sensitive) that `name` matches."""
    for p in patterns:
        if fnmatch.fnmatchcase(name, p):
            return p
    return None
