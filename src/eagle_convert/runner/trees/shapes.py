"""Tree shapes for `bench --tree`: what a user asks for (EAGLE's, SGLang's or vLLM's words), checked and resolved
into one `TreeShape` before any model is loaded. Pure; no tensors.

* chain: today's k-token chain (`-k`), a degenerate tree, run by speculate.py exactly as before;
* dynamic (EAGLE-2/3): `depth` (d + 1 draft levels), `top_k`, `tokens` = verify tokens incl. the root (EAGLE's
  `total_token`, SGLang's `--speculative-num-draft-tokens`); SGLang's (num_steps S, topk K, num_draft_tokens T) is
  depth S - 1, top_k K, tokens T (docs/design/tree-drafting.md, "Words and the parameter cross-walk");
* static: a prefix-closed set of paths of child ranks (EAGLE choices, vLLM `speculative_token_tree`): the built-in
  `mc_sim_7b_63`, a JSON file of paths, or a Python-literal list of tuples as vLLM takes it.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path

from ...errors import TreeShapeError
from ...kinds import KINDS

# EAGLE-1's built-in static tree (SafeAILab/EAGLE eagle/model/choices.py): 25 nodes, depth 5, ranks < 4.
MC_SIM_7B_63 = ((0,), (1,), (2,), (3,), (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0), (2, 1), (3, 0),
                (0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1, 0), (0, 1, 1), (0, 2, 0), (0, 2, 1), (1, 0, 0),
                (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 0, 2), (0, 0, 0, 0, 0), (0, 0, 0, 0, 1))
STATIC_TREES = {"mc_sim_7b_63": MC_SIM_7B_63}

# SGLang's auto-chosen (num_steps, topk, num_draft_tokens) by target architecture (speculative_hook.py,
# `_auto_choose_speculative_params`, 2026): Llama/Grok get a tree, every other architecture a 3-token chain.
SGLANG_DEFAULTS = {"LlamaForCausalLM": (5, 4, 8), "Grok1ForCausalLM": (5, 4, 8)}
SGLANG_OTHER = (3, 1, 4)
MAX_TREE_TOKENS = 1024


def _refuse(what: str, fix: str) -> TreeShapeError:
    return TreeShapeError(what, fix)


@dataclass(frozen=True)
class TreeOptions:
    """The raw `bench` options, resolved by `resolve_tree` once the target and the head are known."""
    tree: str = "chain"
    depth: int | None = None
    top_k: int | None = None
    tokens: int | None = None
    num_steps: int | None = None  # SGLang --speculative-num-steps
    eagle_topk: int | None = None  # SGLang --speculative-eagle-topk
    num_draft_tokens: int | None = None  # SGLang --speculative-num-draft-tokens


@dataclass(frozen=True)
class TreeShape:
    mode: str  # "chain" | "dynamic" | "static"
    source: str  # how it was asked for: "chain", "dynamic", "sglang", "mc_sim_7b_63", a file, "literal"
    k: int = 0  # chain length
    depth: int = 0  # dynamic: expansion forwards after the context pass (levels = depth + 1)
    top_k: int = 0
    tokens: int = 0  # dynamic: verify tokens including the root
    choices: tuple[tuple[int, ...], ...] = ()  # static, sorted by (length, ranks)

    @property
    def levels(self) -> int:
        """The most drafts a round can accept: the `k` of its acceptance histogram."""
        return {"chain": self.k, "dynamic": self.depth + 1, "static": max(map(len, self.choices), default=0)}[self.mode]

    @property
    def nodes(self) -> int:
        """Drafted nodes verified per round (the root excluded)."""
        return {"chain": self.k, "dynamic": self.tokens - 1, "static": len(self.choices)}[self.mode]

    @property
    def max_rank(self) -> int:
        """The widest top-k any expansion takes."""
        return self.top_k if self.mode == "dynamic" else 1 + max((c[-1] for c in self.choices), default=0)

    @staticmethod
    def chain(k: int) -> TreeShape:
        """A k-token chain: the degenerate tree, and what every engine bench drafts."""
        return TreeShape("chain", "chain", k=k)

    def to_dict(self) -> dict:
        data = {"mode": self.mode, "source": self.source, "levels": self.levels, "nodes": self.nodes}
        if self.mode == "dynamic":
            data |= {"depth": self.depth, "top_k": self.top_k, "tokens": self.tokens}
        if self.mode == "static":
            data["choices"] = [list(c) for c in self.choices]
        return data

    def serve_flags(self) -> dict:
        """What reproduces this shape in SGLang and vLLM (None where the engine cannot)."""
        if self.mode == "chain":
            return {"sglang": f"--speculative-num-steps {self.k} --speculative-eagle-topk 1 "
                              f"--speculative-num-draft-tokens {self.k + 1}",
                    "vllm": f'"num_speculative_tokens": {self.k}'}
        if self.mode == "dynamic":
            return {"sglang": f"--speculative-num-steps {self.depth + 1} --speculative-eagle-topk {self.top_k} "
                              f"--speculative-num-draft-tokens {self.tokens}",
                    "vllm": None}  # vLLM drafts static trees only
        literal = "[" + ", ".join(repr(tuple(c)) for c in self.choices) + "]"
        return {"sglang": None, "vllm": f'"num_speculative_tokens": {len(self.choices)}, '
                                        f'"speculative_token_tree": "{literal}"'}


def dynamic_tree(depth: int, top_k: int, tokens: int, source: str = "dynamic") -> TreeShape:
    if depth < 0 or top_k < 1 or tokens < 2:
        raise _refuse(f"A dynamic tree needs depth >= 0, top-k >= 1 and at least 2 tokens (the root and one draft); "
                      f"got depth {depth}, top-k {top_k}, {tokens} tokens.",
                      "Pass e.g. --tree-depth 5 --tree-top-k 8 --tree-tokens 32.")
    capacity = top_k + depth * top_k * top_k
    if tokens - 1 > capacity:
        raise _refuse(f"A dynamic tree of depth {depth} and top-k {top_k} holds at most {capacity} drafted nodes "
                      f"({top_k} + {depth} x {top_k}²), but {tokens} tokens ask for {tokens - 1} (the root is one of "
                      "them).", f"Lower --tree-tokens to at most {capacity + 1}, or raise --tree-depth / --tree-top-k.")
    if tokens > MAX_TREE_TOKENS:
        raise _refuse(f"{tokens} tree tokens is more than this runner verifies in one pass ({MAX_TREE_TOKENS}).",
                      f"Use --tree-tokens of at most {MAX_TREE_TOKENS}.")
    return TreeShape("dynamic", source, depth=depth, top_k=top_k, tokens=tokens)


def static_tree(paths, source: str) -> TreeShape:
    """Check a set of rank paths: non-empty lists of non-negative ints, no duplicates, every proper prefix present."""
    if not isinstance(paths, (list, tuple)) or not paths:
        raise _refuse(f"The static tree {source} is not a non-empty list of paths.",
                      "Write it as a list of rank paths, e.g. [[0], [1], [0, 0]] (JSON) or \"[(0,), (1,), (0, 0)]\".")
    choices = []
    for path in paths:
        if (not isinstance(path, (list, tuple)) or not path
                or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in path)):
            raise _refuse(f"The static tree {source} has the entry {path!r}, which is not a path of child ranks.",
                          "Each entry lists non-negative child ranks from the root, e.g. [0, 2] = the 3rd child of "
                          "the root's best child.")
        choices.append(tuple(path))
    present = set(choices)
    if len(present) < len(choices):
        raise _refuse(f"The static tree {source} lists a path twice.", "List each node's path once.")
    missing = sorted({c[:i] for c in choices for i in range(1, len(c))} - present, key=lambda c: (len(c), c))
    if missing:
        raise _refuse(f"The static tree {source} is not prefix-closed: {list(missing[0])} is missing, but "
                      f"{len(missing)} longer path(s) go through it.",
                      "Every proper prefix of a path must be a path too (the node's parent); add the missing ones.")
    if len(choices) + 1 > MAX_TREE_TOKENS:
        raise _refuse(f"The static tree {source} has {len(choices)} nodes, more than this runner verifies in one "
                      f"pass ({MAX_TREE_TOKENS - 1}).", "Use a smaller tree.")
    return TreeShape("static", source, choices=tuple(sorted(choices, key=lambda c: (len(c), c))))


def parse_static(value: str) -> TreeShape:
    """A built-in name, a literal list (JSON or vLLM's Python tuples) or a JSON file of paths."""
    if value in STATIC_TREES:
        return static_tree(STATIC_TREES[value], value)
    if value.lstrip().startswith("["):
        try:
            paths = ast.literal_eval(value)
        except (ValueError, SyntaxError) as error:
            raise _refuse(f"--tree {value[:60]!r} is not a list of paths: {error}.",
                          "Pass a literal like \"[(0,), (1,), (0, 0)]\" or a JSON file of paths.") from error
        return static_tree(paths, "literal")
    path = Path(value)
    if not path.is_file():
        raise _refuse(f"--tree {value!r} is neither a tree kind, a built-in tree nor a file.",
                      "Use chain, dynamic, sglang, " + ", ".join(STATIC_TREES) + ", a JSON file of rank paths, or "
                      "vLLM's speculative_token_tree string.")
    try:
        paths = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise _refuse(f"Cannot read the static tree file {path}: {error}.",
                      "The file must hold a JSON list of rank paths, e.g. [[0], [1], [0, 0]].") from error
    return static_tree(paths, str(path))


def resolve_tree(options: TreeOptions, *, k: int, draft_kind: str, target_config: dict) -> TreeShape:
    """One TreeShape from the options, refusing contradictions (one paragraph each)."""
    dynamic_given = [o for o in (options.depth, options.top_k, options.tokens) if o is not None]
    sglang_given = [o for o in (options.num_steps, options.eagle_topk, options.num_draft_tokens) if o is not None]
    tree = options.tree
    if sglang_given and tree == "chain":
        tree = "dynamic"  # SGLang's three numbers alone describe a dynamic tree
    if dynamic_given and tree == "chain":
        tree = "dynamic"
    if (dynamic_given or sglang_given) and tree != "dynamic":
        raise _refuse(f"--tree {tree} takes no depth / top-k / token options.",
                      "Those shape a dynamic tree: pass --tree dynamic, or drop them.")
    if dynamic_given and sglang_given:
        raise _refuse("Both the EAGLE (--tree-depth/--tree-top-k/--tree-tokens) and the SGLang "
                      "(--num-steps/--eagle-topk/--num-draft-tokens) names of the tree shape were given.",
                      "Use one set: SGLang's (S, K, T) is --tree-depth S-1 --tree-top-k K --tree-tokens T.")
    if tree == "chain":
        return TreeShape.chain(k)
    if tree == "sglang":
        archs = target_config.get("architectures") or []
        steps, topk, tokens = next((SGLANG_DEFAULTS[a] for a in archs if a in SGLANG_DEFAULTS), SGLANG_OTHER)
        return dynamic_tree(steps - 1, topk, tokens, source="sglang")
    if tree == "dynamic":
        default = KINDS[draft_kind].tree_defaults  # (depth, top_k, tokens) when --tree dynamic leaves them out
        if sglang_given:
            if len(sglang_given) < 3:
                raise _refuse("SGLang's tree shape needs all three of --num-steps, --eagle-topk and "
                              "--num-draft-tokens (SGLang itself refuses a partial set).",
                              "Pass all three, e.g. --num-steps 5 --eagle-topk 4 --num-draft-tokens 8.")
            return dynamic_tree(options.num_steps - 1, options.eagle_topk, options.num_draft_tokens)
        return dynamic_tree(default[0] if options.depth is None else options.depth,
                            default[1] if options.top_k is None else options.top_k,
                            default[2] if options.tokens is None else options.tokens)
    return parse_static(tree)


def check_tree_for_head(shape: TreeShape, head_vocab: int) -> None:
    """Top-k beyond the head's (draft) vocabulary cannot be drafted."""
    if shape.mode != "chain" and shape.max_rank > head_vocab:
        what = f"top-k {shape.top_k}" if shape.mode == "dynamic" else f"child rank {shape.max_rank - 1}"
        raise _refuse(f"The tree asks for {what}, but the head drafts from a vocabulary of {head_vocab} tokens.",
                      f"Use a top-k (or ranks) of at most {head_vocab}.")
