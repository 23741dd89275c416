"""The one bench loop, whoever decodes (`generate(ids, ...) -> Generation`: our runner, engines/our_runner.py; vLLM
offline or a server): each prompt is a conversation, turn by turn the user message is appended, the conversation
encoded (session.py), the engine answers and its answer (EOS stripped) becomes the assistant's message, so later
turns are conditioned on the engine's own earlier answers. Then a baseline engine decodes the very same token ids
plainly (seed + 1), for tokens/s, speedup and the lossless check.

Acceptance comes from what the engine returns: per-round data (ours: RoundsGeneration) or the engine's counters
(vLLM: CounterGeneration), each type merging a prompt's turns into its AcceptanceStats."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ..engines.generation import Generation, add_counters, zero_counters
from ..io.progress import Progress, tracked
from ..runner.metrics import AcceptanceStats
from ..runner.trees.shapes import TreeShape
from .bench_report import BenchReport, PromptReport
from .session import Session


class Engine(Protocol):
    def generate(self, ids: list[int], *, max_new_tokens: int, temperature: float, seed: int,
                 stop_token_ids: tuple[int, ...]) -> Generation: ...

    # only engines that bench at --concurrency N > 1 have it: the prompts decoded at once, one Generation each
    def generate_group(self, batch: list[list[int]], *, max_new_tokens: int, temperature: float, seed: int,
                       stop_token_ids: tuple[int, ...]) -> list[Generation]: ...


@dataclass
class EngineRun:
    """What the speculative engine did: the report's prompts, and per prompt the ids sent and its generations."""
    prompts: list[PromptReport] = field(default_factory=list)
    turn_ids: list[list[list[int]]] = field(default_factory=list)  # per prompt, per turn: the ids sent
    generations: list[list[Generation]] = field(default_factory=list)  # per prompt, per turn

    @property
    def generation_s(self) -> float:
        return sum(item.wall_time_s for item in self.prompts)


def without_eos(tokens: list[int], eos: Sequence[int]) -> list[int]:
    return tokens[:-1] if tokens and tokens[-1] in eos else tokens


def run_conversations(session: Session, engine: Engine, shape: TreeShape, *, max_new_tokens: int,
                      temperature: float, seed: int, progress: bool = False, what: str = "bench",
                      concurrency: int = 1) -> EngineRun:
    """`concurrency` N > 1: the prompts in groups of N, each turn of a group sent at once (`generate_group`: vLLM
    batches them), so every request is decoded beside N - 1 others, as on a server under that load."""
    run = EngineRun()
    request = dict(max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, stop_token_ids=session.eos)
    with Progress(what, len(session.prompts), "prompt", enabled=progress) as shown:
        for start in range(0, len(session.prompts), concurrency):
            group = session.prompts[start:start + concurrency]
            _run_group(session, engine, shape, group, run, concurrency > 1, request)
            if progress:
                shown.note(tau=f"{_merged_tau(run, shape):.2f}")
            shown.update(len(group))
    return run


def _run_group(session: Session, engine: Engine, shape: TreeShape, group, run: EngineRun, batched: bool,
               request: dict) -> None:
    """Conversations side by side, turn by turn (a prompt with fewer turns leaves the group), appended to `run`."""
    eos = session.eos
    messages: list[list[dict]] = [[] for _ in group]
    items = [PromptReport(prompt.id, [], AcceptanceStats.from_accepted(shape.levels, []), [], 0.0,
                          category=prompt.category) for prompt in group]
    sent: list[list] = [[] for _ in group]
    outs: list[list] = [[] for _ in group]
    for turn in range(max(len(prompt.turns) for prompt in group)):
        active = [i for i, prompt in enumerate(group) if turn < len(prompt.turns)]
        batch = []
        for i in active:
            messages[i].append({"role": "user", "content": group[i].turns[turn]})
            batch.append(session.encode_turn(messages[i], group[i], request["max_new_tokens"]))
        answers = _answers(engine, batch, batched, request)
        for i, ids, out in zip(active, batch, answers):
            item = items[i]
            item.prompt_tokens.append(len(ids))
            item.prompt_ids_sha256.append(hashlib.sha256(json.dumps(ids).encode()).hexdigest())
            sent[i].append(ids)
            outs[i].append(out)
            item.wall_time_s += out.seconds
            item.output_token_ids.append(out.tokens)
            out.record_rounds(item)
            if session.tokenizer is not None:  # later turns see the engine's own answer
                answer = session.tokenizer.decode(without_eos(out.tokens, eos))
                messages[i].append({"role": "assistant", "content": answer})
    for item, ids, generations in zip(items, sent, outs):
        item.stats = type(generations[0]).prompt_stats(shape, generations)
        run.prompts.append(item)
        run.turn_ids.append(ids)
        run.generations.append(generations)


def _answers(engine: Engine, batch: list[list[int]], batched: bool, request: dict) -> list[Generation]:
    """One answer per prompt: the prompts at once (batched), else one after the other."""
    return engine.generate_group(batch, **request) if batched else [engine.generate(ids, **request) for ids in batch]


def _merged_tau(run: EngineRun, shape: TreeShape) -> float:
    return BenchReport(settings={"k": shape.levels, "tree": shape.to_dict()}, prompts=run.prompts
                       ).mean_acceptance_length


def run_baseline(run: EngineRun, engine: Engine, *, max_new_tokens: int, temperature: float, seed: int,
                 eos: tuple[int, ...], progress: bool = False, concurrency: int = 1) -> float:
    """Plain decoding of the same ids, turn by turn, into each prompt's baseline fields, at the same concurrency as
    the speculative run (a speedup compares like with like); returns the seconds."""
    request = dict(max_new_tokens=max_new_tokens, temperature=temperature, seed=seed + 1, stop_token_ids=eos)
    for item in run.prompts:
        item.baseline_output_token_ids, item.baseline_wall_time_s = [], 0.0
    starts = range(0, len(run.prompts), concurrency)
    for start in tracked(starts, "baseline (plain decoding)", "group" if concurrency > 1 else "prompt",
                         enabled=progress):
        group = list(zip(run.prompts, run.turn_ids))[start:start + concurrency]
        for turn in range(max(len(sent) for _, sent in group)):
            active = [(item, sent[turn]) for item, sent in group if turn < len(sent)]
            batch = [ids for _, ids in active]
            outs = _answers(engine, batch, concurrency > 1, request)
            for (item, _), out in zip(active, outs):
                item.baseline_output_token_ids.append(out.tokens)
                item.baseline_wall_time_s += out.seconds
    return sum(item.baseline_wall_time_s for item in run.prompts)


def counters_block(run: EngineRun, k: int) -> dict:
    """An engine's own counters, overall and per prompt, for the report's `engine` block."""
    per_prompt = []
    for outs in run.generations:
        counters = zero_counters(k)
        for out in outs:
            counters = add_counters(counters, out.counters)
        per_prompt.append(counters)
    overall = zero_counters(k)
    for counters in per_prompt:
        overall = add_counters(overall, counters)
    return {"overall": overall, "prompts": [{"id": p.id, **c} for p, c in zip(run.prompts, per_prompt)]}
