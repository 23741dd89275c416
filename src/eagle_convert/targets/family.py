"""What a target family is, as data: where its LM head and input embedding are saved (every naming transformers has
used for it), where its sizes and tie flag live, the RoPE it uses, and whether the bench runner implements it."""

from __future__ import annotations

from dataclasses import dataclass

# What the bench runner can do with a family: run it (text-only for a multimodal wrapper, through its language model),
# or nothing (bench it with an engine: `bench --engine vllm`).
RUNNER_DENSE, RUNNER_MOE, RUNNER_NONE = "dense", "moe", None


@dataclass(frozen=True)
class Naming:
    """One way a family's checkpoints are saved. `prefix` is where the language model's `embed_tokens`, `layers` and
    `norm` sit (the text-only `model.` of a CausalLM); `lm_head` is the LM head's full name."""
    name: str  # e.g. "transformers >= 5 (model.language_model.*)"
    prefix: str
    lm_head: str

    @property
    def embed(self) -> str:
        return self.prefix + "embed_tokens.weight"


@dataclass(frozen=True)
class TargetFamily:
    name: str  # the family's model_type
    model_types: tuple[str, ...]  # every config model_type that belongs to it (a text-only model_type too)
    architectures: tuple[str, ...]  # the transformers classes its checkpoints name
    namings: tuple[Naming, ...]  # tried in order; the first whose names are in the checkpoint wins
    text_config: str | None = None  # the sub-config holding sizes and tie_word_embeddings ("text_config")
    rope: str = "default"  # the RoPE kind, for the record and docs/targets.md ("default", "mrope", "yarn", ...)
    runner: str | None = RUNNER_NONE
    runner_model_type: str | None = None  # the text model the runner runs (a multimodal wrapper's language model)
    multimodal: bool = False
    note: str = ""  # what a user should know (docs/targets.md table)

    def sizes_config(self, config: dict) -> dict:
        """The dict holding hidden_size, vocab_size, num_hidden_layers (the text model's, for a multimodal wrapper).
        Pre-2025 multimodal configs kept them at the top level: those are read from there."""
        sub = config.get(self.text_config) if self.text_config else None
        return sub if isinstance(sub, dict) and "hidden_size" in sub else config


CAUSAL_LM = Naming("text-only CausalLM", "model.", "lm_head.weight")
