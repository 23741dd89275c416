"""`run_bench`: acceptance and speed of a draft head on its target, the only part of the runner that does I/O.

Each prompt is a conversation. Turn by turn, the user message is appended, the conversation is tokenized (chat
template or raw text), speculative decoding answers it, and, unless `baseline=False`, plain decoding of the target
answers the same tokens again. The speculative answer is appended as the assistant's message, so later MT-bench turns
are conditioned on the model's own earlier answers; the baseline sees the same conversation, so both always decode
the same input.

Lossless check (greedy, with a baseline): in float32 the two token sequences must be identical, otherwise
`VerificationError` is raised after the run with the full report attached as `.report`. In bf16/fp16 a verify pass
over k+1 tokens and a one-token decode step round differently, so near-ties may flip: the first divergence is reported.
At temperature > 0 the two runs draw different random numbers, so only the distribution is lossless (see
speculate.py); no token comparison is made.

Context length: a turn whose prompt tokens + max_new_tokens pass the target's max_position_embeddings is refused
(PromptTooLongError) rather than run at positions the target never saw, as vLLM's server refuses prompt + max_tokens
> max_model_len; first turns are checked before the target loads, later turns (which hold earlier answers) as they
come.

`BenchReport.to_dict()` schema (version 3), all times in seconds:
  schema_version: 3
  settings: {target, draft_kind, k (a tree: its levels), tree, max_new_tokens, temperature, seed, device, dtype, chat_template (bool: used),
             aux_layer_ids, baseline, ignore_eos, num_prompts}
  overall:  acceptance (see below), generated_tokens, wall_time_s, tokens_per_s,
            baseline_generated_tokens, baseline_wall_time_s, baseline_tokens_per_s, speedup  (baseline_* and speedup
            are null without a baseline)
  lossless: {mode: "exact" | "first_divergence" | "not_checked", identical: bool | null,
             diverged_prompts: [prompt ids]}
  prompts:  [{id, category (null unless the prompt has one), num_turns, prompt_tokens: [per turn],
             prompt_ids_sha256: [per turn], acceptance, generated_tokens, wall_time_s, tokens_per_s,
             baseline_generated_tokens, baseline_wall_time_s, baseline_tokens_per_s, speedup,
             first_divergence: null | {turn, index, speculative, baseline} (token ids; null past a sequence's end),
             output_token_ids: [per turn, the speculative answer], accepted_per_round: [per turn, [a per round]]}]
  gate:     {passed: bool, checks: [{name, passed, message, ...}]}  (gates.py; no checks: passed)
  reference (only with a reference draft): {settings, overall: {acceptance}, prompts: [{id, category, acceptance,
             accepted_per_round}]}
  acceptance = {k, histogram, drafts, drafted, accepted, mean_acceptance_length (tau), acceptance_rate,
                per_position_rates}  (metrics.py; ratios are null when no verify round ran)
  tree = {mode: "chain" | "dynamic" | "static", source, levels, nodes, + depth, top_k, tokens (dynamic) or choices
          (static)}  (tree_shapes.py); for trees acceptance.drafted counts nodes verified and acceptance gains
          tree: {nodes_per_round, predicted_mean_acceptance_length}  (tree_metrics.py)
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import torch
from ..checkpoint.index import Checkpoint
from ..errors import MissingTensorError, VerificationError
from ..checkpoint.read import read_tensor
from ..io.source import LocalSource
from .chat import ChatTokenizer, load_eos_token_ids
from ..runner.heads import aux_layer_ids_for, build_draft_head
from ..runner.metrics import AcceptanceStats
from ..runner.model import TargetModel
from .report import BenchReport, PromptReport  # noqa: F401 (re-exported)
from .prompts import BUILTIN_PROMPTS, Prompt, PromptFileError, check_prompt_fits, load_prompts
from ..runner.speculate import plain_generate, speculative_generate
from ..runner.text_model import runner_target
from ..runner.trees.metrics import TreeAcceptanceStats
from ..runner.trees.shapes import TreeShape, check_tree_for_head
from ..runner.trees.speculate import tree_generate
from ..spec import DraftSpec
from ..conversion.validate import check_sizes

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}


def resolve_device_dtype(device: str, dtype: str | torch.dtype) -> tuple[torch.device, torch.dtype]:
    """"auto" device: CUDA when present; "auto" dtype: bf16 on CUDA, fp32 on CPU."""
    device = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else
                          "cpu" if device == "auto" else device)
    if isinstance(dtype, torch.dtype):
        return device, dtype
    if dtype == "auto":
        return device, torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use auto, {', '.join(DTYPES)}")
    return device, DTYPES[dtype]


def load_target(target_path: str | Path, *, dtype: torch.dtype, device, aux_layer_ids=()) -> TargetModel:
    """A local HF folder, read through the converter's checkpoint index: single or sharded safetensors, or `.bin`
    shards (weights_only), one tensor at a time."""
    ckpt = Checkpoint(LocalSource(target_path))
    view = runner_target(ckpt)  # a multimodal checkpoint: its language model, text-only

    def get_tensor(name: str) -> torch.Tensor:
        name = view.saved_name(name)
        if not ckpt.has(name):
            raise MissingTensorError(f"The target {target_path} has no tensor {name}.",
                                     "The target checkpoint is incomplete, or its layout is not a Llama-family one.")
        return read_tensor(ckpt, ckpt.ref(name))

    return TargetModel(view.config, get_tensor, dtype=dtype, device=device, aux_layer_ids=aux_layer_ids)


def _timed(device: torch.device, run: Callable):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    result = run()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return result, time.perf_counter() - start


def _without_eos(tokens: list[int], eos: Sequence[int]) -> list[int]:
    return tokens[:-1] if tokens and tokens[-1] in eos else tokens


@dataclass
class _Session:
    """What every head benched in one run shares: the target, the prompts and how they are encoded."""
    target: TargetModel | None  # None: the prompts only (open_session)
    target_path: str
    prompts: list[Prompt]
    tokenizer: ChatTokenizer | None
    use_template: bool
    eos: tuple[int, ...]
    device: torch.device | None
    tree: TreeShape = TreeShape.chain(3)
    max_positions: int | None = None  # the target's max_position_embeddings (None: unstated)

    def generate(self, head, ids: list[int], **decode):
        """One speculative answer: the chain runner for chains (exactly as before trees), the tree runner otherwise."""
        if self.tree.mode == "chain":
            return speculative_generate(self.target, head, ids, k=self.tree.k, **decode)
        return tree_generate(self.target, head, ids, shape=self.tree, **decode)

    def stats(self, rounds: list[int], results: list) -> AcceptanceStats:
        """A prompt's acceptance from its rounds (all turns) and its turns' results."""
        if self.tree.mode == "chain":
            return AcceptanceStats.from_accepted(self.tree.levels, rounds)
        return TreeAcceptanceStats.from_rounds(self.tree.levels, rounds,
                                               [n for r in results for n in r.nodes_per_round],
                                               [x for r in results for x in r.predicted_per_round])

    def encode(self, messages: list[dict], prompt: Prompt) -> list[int]:
        if prompt.token_ids is not None:
            return list(prompt.token_ids)
        if self.use_template:
            return self.tokenizer.encode_chat(messages)
        return self.tokenizer.encode_text("\n\n".join(m["content"] for m in messages))

    def encode_turn(self, messages: list[dict], prompt: Prompt, max_new_tokens: int) -> list[int]:
        """The ids of the conversation so far, refused when they and max_new_tokens pass the target's positions."""
        ids = self.encode(messages, prompt)
        check_prompt_fits(prompt, sum(m["role"] == "user" for m in messages) - 1, len(ids), max_new_tokens,
                          self.max_positions)
        return ids

    def check_first_turns(self, max_new_tokens: int) -> None:
        """Every prompt's first turn, before any work (later turns depend on the answers: checked as they come)."""
        for prompt in self.prompts:
            self.encode_turn([{"role": "user", "content": prompt.turns[0]}], prompt, max_new_tokens)


def open_session(target_path: str | Path, prompts, *, chat_template: str = "auto", ignore_eos: bool = False,
                 device: torch.device | None = None) -> _Session:
    """The prompts and how they are encoded, without a target model yet (an engine bench encodes the same way)."""
    if prompts is None:
        prompts = list(BUILTIN_PROMPTS)
    elif isinstance(prompts, (str, Path)):
        prompts = load_prompts(prompts)
    else:
        prompts = [p if isinstance(p, Prompt) else Prompt(str(i), (p,)) for i, p in enumerate(prompts, start=1)]
    # Pre-tokenized prompts need no tokenizer (a target without tokenizer files can still be benched).
    needs_text = any(p.token_ids is None for p in prompts)
    tokenizer = ChatTokenizer.from_dir(target_path) if needs_text else None
    use_template = tokenizer is not None and chat_template == "auto" and tokenizer.chat_template is not None
    eos = () if ignore_eos else (tokenizer.eos_token_ids if tokenizer else load_eos_token_ids(target_path))
    return _Session(None, str(target_path), prompts, tokenizer, use_template, tuple(eos), device)


def run_bench(target_path: str | Path, draft_spec: DraftSpec, draft_get_tensor: Callable[[str], torch.Tensor], *,
              k: int = 3, max_new_tokens: int = 256, prompts: str | Path | Iterable[Prompt | str] | None = None,
              temperature: float = 0.0, seed: int = 0, device: str = "auto", dtype: str | torch.dtype = "auto",
              chat_template: str = "auto", baseline: bool = True, progress: bool = True,
              ignore_eos: bool = False, reference: tuple[DraftSpec, Callable[[str], torch.Tensor]] | None = None,
              tree: TreeShape | None = None) -> BenchReport:
    """Bench `draft_spec` + `draft_get_tensor` (canonical names, KeyError when absent) on the target at `target_path`.
    `prompts`: None for the built-in set, a JSONL path, or Prompt objects / strings. `chat_template`: "auto" (the
    target's template when it has one, else raw text) or "none". `reference`: another head (spec, get_tensor), benched
    after it on the same loaded target and prompts, with the same seed and no baseline; it becomes `.reference`.
    `tree`: draft trees of this shape instead of k-token chains (None or mode "chain": the chain runner)."""
    if chat_template not in ("auto", "none"):
        raise ValueError(f"chat_template must be 'auto' or 'none', got {chat_template!r}")
    if temperature < 0:
        raise ValueError("temperature must be >= 0")
    device, dtype = resolve_device_dtype(device, dtype)
    session = open_session(target_path, prompts, chat_template=chat_template, ignore_eos=ignore_eos, device=device)
    prompts, use_template = session.prompts, session.use_template

    view = runner_target(Checkpoint(LocalSource(target_path)))
    session.max_positions = view.config.get("max_position_embeddings")
    session.check_first_turns(max_new_tokens)
    num_layers = view.config["num_hidden_layers"]
    aux_ids = aux_layer_ids_for(draft_spec, num_layers)
    target = load_target(target_path, dtype=dtype, device=device, aux_layer_ids=aux_ids)
    tree = tree if tree is not None else TreeShape.chain(k)
    k = tree.levels  # a tree's acceptance histogram runs to its depth
    session.target, session.tree = target, tree
    settings = {"target": str(target_path), "k": k, "tree": tree.to_dict(), "max_new_tokens": max_new_tokens,
                "temperature": temperature,
                "seed": seed, "device": str(device), "dtype": str(dtype).removeprefix("torch."),
                "chat_template": use_template, "baseline": baseline, "ignore_eos": ignore_eos,
                "num_prompts": len(prompts), **({"text_only": True} if view.text_only else {})}
    report = _bench_head(session, draft_spec, draft_get_tensor, settings, k=k, max_new_tokens=max_new_tokens,
                         temperature=temperature, seed=seed, baseline=baseline, progress=progress)
    if reference is not None:
        ref_spec, ref_get = reference
        session.target = target.with_aux_layer_ids(aux_layer_ids_for(ref_spec, num_layers))
        report.reference = _bench_head(session, ref_spec, ref_get, {**settings, "baseline": False}, k=k,
                                       max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
                                       baseline=False, progress=progress)
    _check_lossless(report)
    return report


def _bench_head(session: _Session, spec: DraftSpec, get_tensor: Callable[[str], torch.Tensor], settings: dict, *,
                k: int, max_new_tokens: int, temperature: float, seed: int, baseline: bool,
                progress: bool) -> BenchReport:
    target, device, eos = session.target, session.device, session.eos
    check_sizes(spec, target.config.hidden_size, target.config.vocab_size, session.target_path)
    head = build_draft_head(spec, get_tensor, target_embedding=target.embed_weight,
                            target_lm_head=target.lm_head_weight, dtype=target.dtype, device=device)
    check_tree_for_head(session.tree, spec.vocab_size if head.draft_to_target is None else len(head.draft_to_target))
    spec_rng = torch.Generator(device).manual_seed(seed)
    base_rng = torch.Generator(device).manual_seed(seed + 1)
    decode = dict(temperature=temperature, eos_ids=eos)
    # Warm-up outside the clock: the first forwards pay for allocation and kernel selection.
    first = session.prompts[0]
    warm_ids = session.encode([{"role": "user", "content": first.turns[0]}], first)
    warm = dict(max_new_tokens=min(8, max_new_tokens), temperature=temperature, eos_ids=eos,
                generator=torch.Generator(device).manual_seed(seed))
    session.generate(head, warm_ids, **warm)
    if baseline:
        plain_generate(target, warm_ids, **warm)

    report = BenchReport(settings={**settings, "draft_kind": spec.kind, "aux_layer_ids": list(target.aux_layer_ids)})
    bar = _progress(session.prompts, enabled=progress)
    for prompt in bar:
        messages: list[dict] = []
        item = PromptReport(prompt.id, [], AcceptanceStats.from_accepted(k, []), [], 0.0,
                            [] if baseline else None, 0.0 if baseline else None, category=prompt.category)
        results = []
        for turn in prompt.turns:
            messages.append({"role": "user", "content": turn})
            ids = session.encode_turn(messages, prompt, max_new_tokens)
            item.prompt_tokens.append(len(ids))
            item.prompt_ids_sha256.append(hashlib.sha256(json.dumps(ids).encode()).hexdigest())
            result, seconds = _timed(device, lambda: session.generate(
                head, ids, max_new_tokens=max_new_tokens, generator=spec_rng, **decode))
            results.append(result)
            item.wall_time_s += seconds
            item.accepted_per_turn.append(result.accepted_per_round)
            item.drafted_per_turn.append(result.drafted_per_round)
            item.margins_per_turn.append(result.margins_per_round)
            item.output_token_ids.append(result.tokens)
            if baseline:
                tokens, seconds = _timed(device, lambda: plain_generate(
                    target, ids, max_new_tokens=max_new_tokens, generator=base_rng, **decode))
                item.baseline_wall_time_s += seconds
                item.baseline_output_token_ids.append(tokens)
            if session.tokenizer is not None:  # later turns see the model's own answer
                messages.append({"role": "assistant",
                                 "content": session.tokenizer.decode(_without_eos(result.tokens, eos))})
        item.stats = session.stats([a for rounds in item.accepted_per_turn for a in rounds], results)
        report.prompts.append(item)
        if hasattr(bar, "set_postfix"):
            bar.set_postfix(tau=f"{report.mean_acceptance_length:.2f}")
    return report


def _check_lossless(report: BenchReport) -> None:
    lossless = report.lossless
    if lossless["mode"] == "exact" and not lossless["identical"]:
        first = next(p for p in report.prompts if p.first_divergence is not None)
        error = VerificationError(
            f"Speculative decoding changed the output in float32: prompt {first.id!r} diverges from plain greedy "
            f"decoding at {first.first_divergence} ({len(lossless['diverged_prompts'])} of {len(report.prompts)} "
            "prompts differ).",
            "The head cannot cause this. Either the target's top two logits nearly tie there (a (k+1)-token verify "
            "and a one-token step sum in different orders), or the runner has a bug: please report it with the prompt "
            "and both checkpoints.")
        error.report = report
        raise error


def _progress(items: list, enabled: bool):
    if not enabled:
        return items
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is a dependency, but a bar is not worth failing for
        return items
    return tqdm(items, desc="bench", unit="prompt", file=sys.stderr)
