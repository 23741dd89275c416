"""`bench --tree-sweep`: a small grid of tree shapes on a few prompts, to choose the shape for this device.

The chain (-k) runs first, with plain decoding as the baseline; then every shape runs without one (the output is the
same tokens, lossless), and its speedup is against that one baseline. Dynamic shapes (SGLang can serve them) come
from N x depth x top-k, skipping those whose N cannot fit; static shapes with the same number of children for every
node of a level are the trees vLLM drafts as declared (docs/design/tree-drafting.md, "vLLM tree mode"), so the best
of those is what to pass as `speculative_token_tree`.
"""

from __future__ import annotations

from itertools import product

from ..io.progress import Progress
from ..kinds import KINDS
from ..runner.trees.shapes import TreeOptions, TreeShape, dynamic_tree, static_tree

SWEEP_TOKENS = (8, 16, 32, 64)
SWEEP_DEPTHS = (3, 5, 7)
SWEEP_TOP_KS = (4, 8)
UNIFORM_WIDTHS = ((2, 2, 2, 2), (2, 4, 4), (4, 4, 4), (4, 8, 8, 8))  # nodes per level; each a multiple of the last


def uniform_tree(widths: tuple[int, ...]) -> TreeShape:
    """Level l has widths[l] nodes, every node of level l-1 having widths[l] / widths[l-1] children (ranks 0..c-1)."""
    levels, previous = [[()]], 1
    for width in widths:
        if width % previous:
            raise ValueError(f"level widths {widths} are not each a multiple of the last")
        children = width // previous
        levels.append([p + (r,) for p in levels[-1] for r in range(children)])
        previous = width
    return static_tree([list(path) for level in levels[1:] for path in level], "uniform " + "-".join(map(str, widths)))


def sweep_shapes() -> list[TreeShape]:
    shapes = []
    for tokens, depth, top_k in product(SWEEP_TOKENS, SWEEP_DEPTHS, SWEEP_TOP_KS):
        if tokens - 1 <= top_k + depth * top_k * top_k:
            shapes.append(dynamic_tree(depth, top_k, tokens))
    return shapes + [uniform_tree(w) for w in UNIFORM_WIDTHS]


def _options(shape: TreeShape) -> TreeOptions:
    if shape.mode == "dynamic":
        return TreeOptions(tree="dynamic", depth=shape.depth, top_k=shape.top_k, tokens=shape.tokens)
    literal = "[" + ", ".join(repr(tuple(c)) for c in shape.choices) + "]"
    return TreeOptions(tree=literal)


def _row(name: str, shape: dict, data: dict, baseline_rate: float | None) -> dict:
    overall = data["overall"]
    rate = overall["tokens_per_s"]
    return {"shape": name, "tree": shape, "tau": overall["acceptance"]["mean_acceptance_length"],
            "tokens_per_s": rate, "speedup": rate / baseline_rate if rate and baseline_rate else None}


def run_sweep(target: str, draft: str, *, k: int, prompts, num_prompts: int, shapes: list[TreeShape] | None = None,
              progress: bool = False, **bench_kwargs) -> dict:
    """Bench the chain and every shape; returns {baseline_tokens_per_s, rows, best, best_static}. `progress`: a
    step per shape on stderr (the benches inside are silent)."""
    from .our_bench import targets_loaded_once  # torch model code loads only when a sweep runs
    from .prompts import BUILTIN_PROMPTS, load_prompts

    subset = (list(BUILTIN_PROMPTS) if prompts is None else load_prompts(prompts) if isinstance(prompts, str)
              else list(prompts))[:num_prompts]
    with targets_loaded_once():  # one target load for the whole grid
        shapes = shapes if shapes is not None else sweep_shapes()
        with Progress("tree sweep", len(shapes) + 1, "shape", enabled=progress) as shown:
            return _sweep(target, draft, k=k, subset=subset, shapes=shapes, shown=shown, **bench_kwargs)


def _sweep(target: str, draft: str, *, k: int, subset: list, shapes: list[TreeShape], shown: Progress,
           **bench_kwargs) -> dict:
    from .entry import bench

    chain = bench(target, draft, k=k, prompts=subset, baseline=True, **bench_kwargs).to_dict()
    shown.update()
    baseline_rate = chain["overall"]["baseline_tokens_per_s"]
    rows = [_row(f"chain k={k}", chain["settings"]["tree"], chain, baseline_rate)]
    flags = {rows[0]["shape"]: TreeShape.chain(k).serve_flags()}
    for shape in shapes:
        data = bench(target, draft, k=k, prompts=subset, baseline=False, tree=_options(shape), **bench_kwargs)
        name = (f"dynamic T={shape.tokens} depth={shape.depth} top-k={shape.top_k}" if shape.mode == "dynamic"
                else f"static {shape.source} ({shape.nodes} nodes)")
        rows.append(_row(name, shape.to_dict(), data.to_dict(), baseline_rate))
        flags[name] = shape.serve_flags()
        shown.update()
    best = max(rows, key=lambda r: r["tokens_per_s"] or 0)
    servable = [r for r in rows if r["tree"]["mode"] in ("static", "chain")]
    best_static = max(servable, key=lambda r: r["tokens_per_s"] or 0)
    return {"baseline_tokens_per_s": baseline_rate, "num_prompts": len(subset), "rows": rows,
            "draft_kind": chain["settings"]["draft_kind"],
            "best": {**best, "serve_flags": flags[best["shape"]]},
            "best_for_vllm": {**best_static, "serve_flags": flags[best_static["shape"]]}}


def sweep_table(result: dict) -> str:
    def fmt(x, spec=".2f"):
        return "-" if x is None else format(x, spec)

    base = fmt(result["baseline_tokens_per_s"], ".1f")
    lines = [f"tree sweep on {result['num_prompts']} prompts (plain decoding {base} tok/s)",
             f"{'shape':<40} {'tau':>6} {'tok/s':>8} {'speedup':>7}"]
    lines += [f"{r['shape']:<40} {fmt(r['tau'], '.3f'):>6} {fmt(r['tokens_per_s'], '.1f'):>8} {fmt(r['speedup']):>7}"
              for r in result["rows"]]
    best, static = result["best"], result["best_for_vllm"]
    lines.append(f"best on this device: {best['shape']} (tau {fmt(best['tau'], '.3f')}, "
                 f"{fmt(best['tokens_per_s'], '.1f')} tok/s)")
    lines.append(f"  SGLang: {best['serve_flags']['sglang'] or '(a static tree: SGLang drafts dynamic trees only)'}")
    lines.append(f"best vLLM can draft (chain or per-level-uniform static tree): {static['shape']}")
    method = KINDS[result["draft_kind"]].vllm_method if result.get("draft_kind") in KINDS else None
    named = f'"method": "{method}", ' if method else ""  # never leave the method to vLLM's guess from the path
    lines.append(f"  vLLM speculative_config: {{{named}{static['serve_flags']['vllm']}}}")
    return "\n".join(lines)
