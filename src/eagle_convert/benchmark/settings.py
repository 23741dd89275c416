"""What a bench is asked to do, as frozen objects passed from the API boundary down (instead of a dozen keywords
through every layer), and the report's `settings` block, built by one function for every engine."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..runner.trees.shapes import TreeOptions, TreeShape


@dataclass(frozen=True)
class HubOptions:
    """How a repo id is read from the Hugging Face Hub (a local folder ignores them)."""
    revision: str | None = None
    token: str | None = None
    offline: bool | None = None


@dataclass(frozen=True)
class DecodeSettings:
    """What every engine decodes: the prompts, how they are encoded, and the decoding parameters. `tree`: draft
    trees (runner/trees/shapes.py) instead of k-token chains; None: chains of k. `token_map`: a hot-token map file
    (FR-Spec, SGLang's --speculative-token-map) restricting an EAGLE-1 head's LM head; our runner only."""
    k: int = 3
    tree: TreeOptions | None = None
    max_new_tokens: int = 256
    temperature: float = 0.0
    seed: int = 0
    ignore_eos: bool = False
    chat_template: str = "auto"
    token_map: str | Path | None = None
    prompts: str | Path | Iterable | None = field(default=None, hash=False, compare=False)

    def comparable(self, shape: TreeShape) -> dict:
        """The settings a stored report must share with this run (gates.check_settings), for the drafts of `shape`."""
        return {"k": shape.levels, "tree": shape.to_dict(), "max_new_tokens": self.max_new_tokens,
                "temperature": self.temperature, "seed": self.seed, "ignore_eos": self.ignore_eos}


@dataclass(frozen=True)
class ContextSettings:
    """bench --context-lengths (context.py): the buckets' prompt lengths in tokens, the documents (None: the
    built-in corpus, documents.py), how many per bucket, and an optional plot file (.svg, or .png with matplotlib)."""
    lengths: tuple[int, ...]
    documents: str | Path | None = None
    per_bucket: int = 4
    plot: str | Path | None = None


@dataclass(frozen=True)
class GateOptions:
    """The gates asked for (gates.py): a τ floor, a reference draft benched in the same run, a stored report."""
    min_acceptance_length: float | None = None
    reference_draft: str | None = None
    reference_report: str | Path | None = None
    max_tau_drop: float | None = None


@dataclass(frozen=True)
class EngineOptions:
    """Who decodes besides our runner: vLLM offline (`url` None) or an OpenAI-compatible vLLM server at `url`.
    `warn`: told about other traffic on a shared server (an error instead with `strict`)."""
    url: str | None = None
    python: str | None = None
    tensor_parallel_size: int = 1
    args: tuple[str, ...] = ()
    strict: bool = False
    warn: Callable[[str], None] = field(default=lambda message: None, compare=False)

    @property
    def label(self) -> str:
        return "vLLM server" if self.url else "vLLM"


def report_settings(target: str, shape: TreeShape, decode: DecodeSettings, *, device, dtype, use_template: bool,
                    baseline: bool, num_prompts: int, draft_kind: str, aux_layer_ids, text_only: bool = False,
                    token_map: dict | None = None) -> dict:
    """The report's `settings` (schema in session.py), the same keys whichever engine ran, so reports, gates and
    --reference-report compare across engines."""
    return {"target": target, "k": shape.levels, "tree": shape.to_dict(), "max_new_tokens": decode.max_new_tokens,
            "temperature": decode.temperature, "seed": decode.seed, "device": device, "dtype": dtype,
            "chat_template": use_template, "baseline": baseline, "ignore_eos": decode.ignore_eos,
            "num_prompts": num_prompts, **({"text_only": True} if text_only else {}), "draft_kind": draft_kind,
            "aux_layer_ids": aux_layer_ids, **({"token_map": token_map} if token_map else {})}
