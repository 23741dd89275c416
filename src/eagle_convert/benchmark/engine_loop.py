"""The bench loop over any engine (`generate(ids, ...) -> Generation`): the prompts encoded exactly as our runner
encodes them (runner/bench.py `open_session`: the chat template rendered by us, token ids sent), one prompt at a time,
later turns conditioned on the engine's own earlier answers; then plain decoding of the very same token ids by a
baseline engine, for tokens/s, speedup and the lossless check. Builds the same `BenchReport` as our runner."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Callable, Protocol

from .session import _Session
from ..runner.metrics import AcceptanceStats
from .report import BenchReport, PromptReport
from ..engines.base import Generation, add_counters, stats_from_counters, zero_counters


class Engine(Protocol):
    def generate(self, ids: list[int], *, max_new_tokens: int, temperature: float, seed: int,
                 stop_token_ids: tuple[int, ...]) -> Generation: ...


@dataclass
class EngineRun:
    """What the speculative engine did: the report's prompts, and its raw counters per prompt."""
    prompts: list[PromptReport] = field(default_factory=list)
    turn_ids: list[list[list[int]]] = field(default_factory=list)  # per prompt, per turn: the ids sent
    counters: list[dict] = field(default_factory=list)  # per prompt: the engine's own counters
    generation_s: float = 0.0


def run_speculative(session: _Session, engine: Engine, *, k: int, max_new_tokens: int, temperature: float,
                    seed: int, on_prompt: Callable[[], None] = lambda: None) -> EngineRun:
    run = EngineRun()
    eos = session.eos
    for prompt in session.prompts:
        messages: list[dict] = []
        item = PromptReport(prompt.id, [], AcceptanceStats.from_accepted(k, []), [], 0.0, category=prompt.category)
        counters, sent = zero_counters(k), []
        for turn in prompt.turns:
            messages.append({"role": "user", "content": turn})
            ids = session.encode(messages, prompt)
            item.prompt_tokens.append(len(ids))
            item.prompt_ids_sha256.append(hashlib.sha256(json.dumps(ids).encode()).hexdigest())
            sent.append(ids)
            out = engine.generate(ids, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
                                  stop_token_ids=eos)
            item.wall_time_s += out.seconds
            item.output_token_ids.append(out.tokens)
            counters = add_counters(counters, out.counters)
            if session.tokenizer is not None:  # later turns see the engine's own answer, as in our runner
                answer = out.tokens[:-1] if out.tokens and out.tokens[-1] in eos else out.tokens
                messages.append({"role": "assistant", "content": session.tokenizer.decode(answer)})
        item.stats = stats_from_counters(k, counters)
        run.prompts.append(item)
        run.turn_ids.append(sent)
        run.counters.append(counters)
        run.generation_s += item.wall_time_s
        on_prompt()
    return run


def run_baseline(run: EngineRun, engine: Engine, *, max_new_tokens: int, temperature: float, seed: int,
                 eos: tuple[int, ...]) -> float:
    """Plain decoding of the same ids, turn by turn, into each prompt's baseline fields; returns the seconds."""
    total = 0.0
    for item, sent in zip(run.prompts, run.turn_ids):
        item.baseline_output_token_ids, item.baseline_wall_time_s = [], 0.0
        for ids in sent:
            out = engine.generate(ids, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed + 1,
                                  stop_token_ids=eos)
            item.baseline_output_token_ids.append(out.tokens)
            item.baseline_wall_time_s += out.seconds
        total += item.baseline_wall_time_s
    return total


def build_report(run: EngineRun, settings: dict, engine_block: dict) -> BenchReport:
    k = settings["k"]
    overall = zero_counters(k)
    for counters in run.counters:
        overall = add_counters(overall, counters)
    engine_block = {**engine_block, "generation_time_s": run.generation_s,
                    "counters": {"overall": overall,
                                 "prompts": [{"id": p.id, **c} for p, c in zip(run.prompts, run.counters)]}}
    return BenchReport(settings=settings, prompts=run.prompts, engine=engine_block)
