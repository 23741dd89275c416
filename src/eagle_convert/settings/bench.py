"""What a bench is asked to do, as frozen objects passed from the API boundary down (instead of a dozen keywords
through every layer): the decoding (DecodeSettings), the gates, the engine, --context-lengths, the tree flags, and
the whole of it (BenchSettings). Each field declares its option of `eagle-convert bench`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import click

from ..runner.trees.shapes import TreeOptions, TreeShape
from .common import ALLOW_ROPE_MISMATCH, ALLOW_ROPE_MISMATCH_HELP, DROP, DTYPE, MAX_MODEL_LEN, TOKEN_MAP
from .declare import Declared, flag, setting


@dataclass(frozen=True)
class DecodeSettings(Declared):
    """What every engine decodes: the prompts, how they are encoded, and the decoding parameters. `tree`: draft
    trees (runner/trees/shapes.py) instead of k-token chains; None: chains of k. `token_map`: a hot-token map file
    (FR-Spec, SGLang's --speculative-token-map) restricting an EAGLE-1 head's LM head; our runner only."""
    k: int = setting(3, flag("-k", "--num-speculative-tokens", default=3, show_default=True,
                             type=click.IntRange(1, 64)))
    tree: TreeOptions | None = None
    max_new_tokens: int = setting(256, flag("--max-new-tokens", default=256, show_default=True,
                                            type=click.IntRange(1)))
    temperature: float = setting(0.0, flag("--temperature", default=0.0, show_default=True,
                                           type=click.FloatRange(0)), help="0 = greedy.")
    seed: int = setting(0, flag("--seed", default=0, show_default=True))
    ignore_eos: bool = setting(False, flag("--ignore-eos", is_flag=True),
                               help="Generate --max-new-tokens every time (as vLLM benchmarks do).")
    chat_template: str = setting("auto", flag("--chat-template", type=click.Choice(["auto", "none"]), default="auto",
                                              show_default=True))
    token_map: str | Path | None = setting(None, TOKEN_MAP, help=(
        "A hot-token map (SGLang's --speculative-token-map: a .pt list of target ids): the EAGLE-1 head's LM head "
        "keeps only those rows (FR-Spec); the verify stays the target's, so output is unchanged."))
    prompts: str | Path | Iterable | None = field(default=None, hash=False, compare=False, metadata={
        "flag": flag("--prompts", type=click.Path(exists=True, dir_okay=False)),
        "help": 'JSONL: MT-bench {"question_id", "turns": [...]}, {"prompt": "..."} or {"prompt_ids": [...]} '
                '(default: a built-in set).'})

    def comparable(self, shape: TreeShape) -> dict:
        """The settings a stored report must share with this run (gates.check_settings), for the drafts of `shape`."""
        return {"k": shape.levels, "tree": shape.to_dict(), "max_new_tokens": self.max_new_tokens,
                "temperature": self.temperature, "seed": self.seed, "ignore_eos": self.ignore_eos}


@dataclass(frozen=True)
class ContextSettings(Declared):
    """bench --context-lengths (context.py): the buckets' prompt lengths in tokens, the documents (None: the
    built-in corpus, documents.py), how many per bucket, and an optional plot file (.svg, or .png with matplotlib).
    On the command line the lengths are a LIST the command parses (benchmark/context.parse_lengths)."""
    lengths: tuple[int, ...] = setting((), flag("--context-lengths", param="context_lengths", metavar="LIST"), help=(
        "Acceptance against context length: e.g. 1k,2k,4k,8k (k = 1000 prompt tokens); long documents cut to each "
        "length, a table per bucket (docs/long-context.md). Replaces --prompts."))
    documents: str | Path | None = setting(None, flag("--documents", type=click.Path(exists=True, dir_okay=False)),
                                           help='With --context-lengths: JSONL of long documents, {"context", '
                                                '"question"} (LongBench-v2 style) or {"text"} (default: the Python '
                                                'reference manual\'s topics, from pydoc_data).')
    per_bucket: int = setting(4, flag("--documents-per-bucket", param="documents_per_bucket", default=4,
                                      show_default=True, type=click.IntRange(1)),
                              help="With --context-lengths: documents per length.")
    plot: str | Path | None = setting(None, flag("--plot", param="plot_path", type=click.Path(dir_okay=False)), help=(
        "With --context-lengths: τ and per-position acceptance against length, FILE.svg (or .png with matplotlib)."))


@dataclass(frozen=True)
class GateOptions(Declared):
    """The gates asked for (gates.py): a τ floor, a reference draft benched in the same run, a stored report."""
    min_acceptance_length: float | None = setting(None, flag("--min-acceptance-length", type=float),
                                                  help="Exit with code 3 when τ is below this (a CI gate).")
    reference_draft: str | None = setting(None, flag("--reference-draft", metavar="RAW"), help=(
        "Also bench RAW (the head as released, any layout) in the same run; exit 3 unless DRAFT behaves exactly like "
        "it (fp32 greedy: every round; else τ within a tolerance)."))
    reference_report: str | Path | None = setting(None, flag("--reference-report",
                                                             type=click.Path(exists=True, dir_okay=False)), help=(
        "A stored --json report of the same settings and prompts: exit 3 when τ dropped by more than --max-tau-drop, "
        "overall or in any prompt category."))
    max_tau_drop: float | None = setting(None, flag("--max-tau-drop", type=click.FloatRange(0)),
                                         help="With --reference-report (default 0.05).")


ENGINE = flag("--engine", type=click.Choice(("ours", "vllm", "llamacpp", "openvino")), default="ours",
              show_default=True)
ENGINE_HELP = ("Who decodes: our bundled runner, vLLM's offline engine or OpenVINO GenAI on CPU (each in its own "
               "interpreter), or llama.cpp b11434 (EAGLE-3, greedy: docs/llamacpp.md).")


@dataclass(frozen=True)
class EngineOptions(Declared):
    """Who decodes besides our runner: vLLM offline (`url` None) or an OpenAI-compatible vLLM server at `url`.
    `warn`: told about other traffic on a shared server (an error instead with `strict`)."""
    url: str | None = setting(None, flag("--engine-url", param="engine_url", metavar="URL"), help=(
        "Bench an OpenAI-compatible vLLM server that already serves TARGET with the head (counters from its "
        "/metrics)."))
    python: str | None = setting(None, flag("--engine-python", param="engine_python", metavar="PATH",
                                            type=click.Path(dir_okay=False)), help=(
        "The interpreter that has vllm (default: this one if it can import vllm, else $EAGLE_CONVERT_VLLM_PYTHON); "
        "with --engine openvino, the one that has openvino-genai and optimum-intel (default: $OPENVINO_PYTHON)."))
    tensor_parallel_size: int = setting(1, flag("--tensor-parallel-size", type=click.IntRange(1), default=1,
                                                show_default=True),
                                        help="vLLM's tensor_parallel_size (--engine vllm).")
    args: tuple[str, ...] = setting((), flag("--engine-arg", param="engine_args", multiple=True, metavar="KEY=VALUE",
                                             to_value=tuple),
                                    help="Passed to vllm.LLM(...) (repeatable; VALUE read as JSON when it parses).")
    concurrency: int = setting(1, flag("--concurrency", type=click.IntRange(1), default=1, show_default=True), help=(
        "Send the prompts N at a time (one batch offline, N concurrent requests to a server): τ and the rounds with "
        "drafting disabled at that load (vLLM's position gate is batch-wide; docs/long-context.md)."))
    strict: bool = setting(False, flag("--strict", is_flag=True), help=(
        "With --engine-url: fail (instead of warning) when other traffic moved the counters."))
    warn: Callable[[str], None] = field(default=lambda message: None, compare=False)
    name: str = "vllm"  # --engine: "vllm" (offline, or the server at `url`), "llamacpp" or "openvino"
    bin: str | None = setting(None, flag("--engine-bin", param="engine_bin", metavar="DIR",
                                         type=click.Path(file_okay=False)), help=(
        "--engine llamacpp: the folder holding llama-speculative-simple, llama-simple and convert-hf-to-gguf "
        "(default: $LLAMACPP_BIN, else the build of `make llamacpp`)."))

    @property
    def label(self) -> str:
        if self.name == "llamacpp":
            return "llama.cpp"
        if self.name == "openvino":
            return "OpenVINO GenAI"
        return "vLLM server" if self.url else "vLLM"


@dataclass(frozen=True)
class TreeSettings(Declared):
    """bench's tree flags (runner/trees/shapes.py resolves them into a shape), and --tree-sweep's."""
    tree: str = setting("chain", flag("--tree", default="chain", show_default=True, metavar="SHAPE"), help=(
        "chain (k drafts, -k), dynamic (EAGLE-2/3: --tree-depth/--tree-top-k/--tree-tokens), sglang (SGLang's "
        "default shape for this target), mc_sim_7b_63 (EAGLE-1's static tree), a JSON file of rank paths, or vLLM's "
        "speculative_token_tree string, e.g. \"[(0,), (1,), (0, 0)]\"."))
    tree_depth: int | None = setting(None, flag("--tree-depth", type=click.IntRange(0)),
                                     help="Dynamic: expansion steps (EAGLE's depth; levels = D+1).")
    tree_top_k: int | None = setting(None, flag("--tree-top-k", type=click.IntRange(1)),
                                     help="Dynamic: children per expanded node (EAGLE's top_k).")
    tree_tokens: int | None = setting(None, flag("--tree-tokens", type=click.IntRange(2)),
                                      help="Dynamic: tokens verified per round, root included (EAGLE's total_token).")
    num_steps: int | None = setting(None, flag("--num-steps", type=click.IntRange(1)),
                                    help="SGLang --speculative-num-steps (= depth + 1).")
    eagle_topk: int | None = setting(None, flag("--eagle-topk", type=click.IntRange(1)),
                                     help="SGLang --speculative-eagle-topk.")
    num_draft_tokens: int | None = setting(None, flag("--num-draft-tokens", type=click.IntRange(2)),
                                           help="SGLang --speculative-num-draft-tokens.")
    tree_sweep: bool = setting(False, flag("--tree-sweep", is_flag=True), help=(
        "Bench the chain (-k) and a grid of tree shapes on the first --sweep-prompts prompts; print τ, tok/s and "
        "speedup per shape, the best one and the SGLang / vLLM flags that serve it."))
    sweep_prompts: int = setting(4, flag("--sweep-prompts", default=4, show_default=True, type=click.IntRange(1)),
                                 help="With --tree-sweep: how many prompts each shape runs on.")

    @property
    def is_chain(self) -> bool:
        return self.tree == "chain" and not self.tree_sweep

    def options(self) -> TreeOptions:
        return TreeOptions(tree=self.tree, depth=self.tree_depth, top_k=self.tree_top_k, tokens=self.tree_tokens,
                           num_steps=self.num_steps, eagle_topk=self.eagle_topk,
                           num_draft_tokens=self.num_draft_tokens)


@dataclass(frozen=True)
class BenchSettings(Declared):
    """The whole of a bench besides its target, draft and Hub options: what is decoded, the gates, who decodes
    (`engine` None: our runner; `compare`: ours beside the engine), on what device and dtype, with a baseline or
    not, the draft tensors ignored, the position checks (`max_model_len` None: the longest context the run uses),
    and --context-lengths (`context`)."""
    decode: DecodeSettings = DecodeSettings()
    gates: GateOptions = GateOptions()
    engine: EngineOptions | None = None
    compare: bool = setting(False, flag("--compare", is_flag=True), help=(
        "Run our runner and the engine on the same prompts: a side-by-side table, exit 3 when fp32 greedy counters "
        "or tokens differ."))
    device: str = setting("auto", flag("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto",
                                       show_default=True))
    dtype: str = setting("auto", DTYPE, help="auto = bf16 on CUDA, fp32 on CPU.")
    baseline: bool = setting(True, flag("--no-baseline", param="no_baseline", is_flag=True,
                                        to_value=lambda no: not no),
                             help="Skip plain decoding (no speedup, no lossless check).")
    progress: bool = False
    drop: tuple[str, ...] = setting((), DROP, help="Ignore draft tensors matching this glob.")
    max_model_len: int | None = setting(None, MAX_MODEL_LEN, help=(
        "The context length you will serve (tokens): the draft's and the target's position limits are checked "
        "against it (default: the longest context the run uses)."))
    allow_rope_mismatch: bool = setting(False, ALLOW_ROPE_MISMATCH, help=ALLOW_ROPE_MISMATCH_HELP)
    context: ContextSettings | None = None
