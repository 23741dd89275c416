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
                      temperature: float, seed: int, progress: bool = False, what: str = "bench") -> EngineRun:
    run = EngineRun()
    eos = session.eos
    with Progress(what, len(session.prompts), "prompt", enabled=progress) as shown:
        for prompt in session.prompts:
            _run_prompt(session, engine, shape, prompt, run, max_new_tokens=max_new_tokens, temperature=temperature,
                        seed=seed, eos=eos)
            if progress:
                shown.note(tau=f"{_merged_tau(run, shape):.2f}")
            shown.update()
    return run


def _run_prompt(session: Session, engine: Engine, shape: TreeShape, prompt, run: EngineRun, *, max_new_tokens: int,
                temperature: float, seed: int, eos: tuple[int, ...]) -> None:
    """One conversation, turn by turn, appended to `run`."""
    messages: list[dict] = []
    item = PromptReport(prompt.id, [], AcceptanceStats.from_accepted(shape.levels, []), [], 0.0,
                        category=prompt.category)
    sent, outs = [], []
    for turn in prompt.turns:
        messages.append({"role": "user", "content": turn})
        ids = session.encode_turn(messages, prompt, max_new_tokens)
        item.prompt_tokens.append(len(ids))
        item.prompt_ids_sha256.append(hashlib.sha256(json.dumps(ids).encode()).hexdigest())
        out = engine.generate(ids, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
                              stop_token_ids=eos)
        sent.append(ids)
        outs.append(out)
        item.wall_time_s += out.seconds
        item.output_token_ids.append(out.tokens)
        out.record_rounds(item)
        if session.tokenizer is not None:  # later turns see the engine's own answer
            answer = session.tokenizer.decode(without_eos(out.tokens, eos))
            messages.append({"role": "assistant", "content": answer})
    item.stats = type(outs[0]).prompt_stats(shape, outs)
    run.prompts.append(item)
    run.turn_ids.append(sent)
    run.generations.append(outs)


def _merged_tau(run: EngineRun, shape: TreeShape) -> float:
    return BenchReport(settings={"k": shape.levels, "tree": shape.to_dict()}, prompts=run.prompts
                       ).mean_acceptance_length


def run_baseline(run: EngineRun, engine: Engine, *, max_new_tokens: int, temperature: float, seed: int,
                 eos: tuple[int, ...], progress: bool = False) -> float:
    """Plain decoding of the same ids, turn by turn, into each prompt's baseline fields; returns the seconds."""
    total = 0.0
    pairs = list(zip(run.prompts, run.turn_ids))
    for item, sent in tracked(pairs, "baseline (plain decoding)", "prompt", enabled=progress):
        item.baseline_output_token_ids, item.baseline_wall_time_s = [], 0.0
        for ids in sent:
            out = engine.generate(ids, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed + 1,
                                  stop_token_ids=eos)
            item.baseline_output_token_ids.append(out.tokens)
            item.baseline_wall_time_s += out.seconds
        total += item.baseline_wall_time_s
    return total


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
