"""Each producer's selection rule, as data (the table `select` in selection.py follows), the error every map
problem raises, and the storage format names. Torch-free on purpose: the CLI builds its `--compat` and `--format`
choices from here, and `convert` starts reading the draft before torch is imported (conversion/prefetch.py)."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ShapeMismatchError


class VocabMapError(ShapeMismatchError):
    """A vocabulary map that cannot be built, read, written or applied as asked, or that fails its check (a kind of
    shape mismatch: `convert` has always refused a bad map as one)."""


@dataclass(frozen=True)
class SelectionRule:
    compat: str
    mask: str  # "assistant-span" | "after-generation-prompt" | "all-tokens"
    length: str  # "truncate" | "drop" | "none": what happens to a sample longer than --max-length
    tie_break: str  # "first-seen" (Counter.most_common) | "lowest-id"
    padding: str  # "set-order" | "lowest-unused" | "none" (short map) | "refuse"
    order: str  # "ascending" | "frequency" (draft id 0 = most frequent) | "specials-then-frequency"
    ascending_per_sample: bool  # a sample's ids enter the counter via torch.unique (ascending) or in stream order
    source: str  # where the rule is read from in the producer's code


RULES: dict[str, SelectionRule] = {r.compat: r for r in (
    SelectionRule("specforge", "assistant-span", "truncate", "first-seen", "set-order", "ascending", True,
                  "specforge 0.2.0 data/preprocessing.py: generate_vocab_mapping_file, process_token_dict_to_mappings"),
    SelectionRule("speculators", "after-generation-prompt", "truncate", "lowest-id", "lowest-unused", "ascending", True,
                  "speculators 0.9.0 train/vocab_mapping.py: build_vocab_mappings_from_distribution"),
    SelectionRule("eagle", "assistant-span", "drop", "first-seen", "none", "ascending", True,
                  "SafeAILab EAGLE eagle/traineagle3/cnets.py (build_dataset_rank, Counter.most_common)"),
    SelectionRule("modelopt", "all-tokens", "none", "first-seen", "refuse", "frequency", False,
                  "NVIDIA ModelOpt examples/speculative_decoding/scripts/calibrate_draft_vocab.py"),
    SelectionRule("nemo", "assistant-span", "truncate", "lowest-id", "lowest-unused", "specials-then-frequency",
                  True, "NeMo Automodel recipes/llm/train_eagle3.py (forced specials, stable argsort)"),
)}
COMPATS = tuple(RULES)


def rule_for(compat: str) -> SelectionRule:
    if compat not in RULES:
        raise VocabMapError(f"Unknown --compat {compat!r}.", f"Use one of: {', '.join(COMPATS)}.")
    return RULES[compat]


# The storage formats' names, in the order `--format` lists them; formats.py's registry must name exactly these.
FORMAT_NAMES = ("specforge", "speculators", "modelopt", "sglang", "safetensors")
