"""The tiny pair the map, text and report fuzz families run their commands on: a one-layer target whose next token
is a function of the current one, an EAGLE-1 head that agrees with it (so τ is known: k+1 while it drafts), a chat
template with assistant turns (what `vocab-map build` counts), and the small valid inputs each family damages."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from eagle_convert.testing.tiny import TinyConfig, make_eagle1_head, make_target

CFG = TinyConfig(num_hidden_layers=1)
VOCAB = CFG.vocab_size
K, NEW_TOKENS = 2, 4
# user turns: "t3 ... t5"; assistant turns: "t4 ... t5" (as tests/vocab/test_vocab_build.py's template)
TEMPLATE = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}t3 {{ m['content'] }} t5 "
            "{% else %}t4 {{ m['content'] }} t5 {% endif %}{% endfor %}{% if add_generation_prompt %}t4 {% endif %}")


@dataclass(frozen=True)
class Pair:
    target: Path
    head: Path
    prompts: Path  # bench's rows
    corpus: Path  # vocab-map build's conversations
    documents: Path  # the context bench's documents


def build_pair(root: Path) -> Pair:
    tensors = make_target(root / "target", CFG, zero_attention=True)
    config = json.loads((root / "target" / "tokenizer_config.json").read_text())
    (root / "target" / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": TEMPLATE}))
    make_eagle1_head(root / "head", CFG, tensors, agree=True, fc_bias=False)
    prompts = write_jsonl(root / "prompts.jsonl", [{"prompt": "t10 t11 t12"}, {"turns": ["t40 t7 t99"]}])
    corpus = write_jsonl(root / "corpus.jsonl", [
        {"conversations": [{"from": "human", "value": "t10 t11"}, {"from": "gpt", "value": "t20 t21 t20 t22"}]},
        {"messages": [{"role": "user", "content": "t12"}, {"role": "assistant", "content": "t23 t21 t24"}]}])
    words = " ".join(f"t{3 + (i * 37) % 250}" for i in range(200))
    documents = write_jsonl(root / "documents.jsonl", [{"context": words, "question": "t5 t6 t7"}])
    return Pair(root / "target", root / "head", prompts, corpus, documents)


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def bench_args(pair: Pair, *more: str) -> list[str]:
    return ["bench", "-t", str(pair.target), "-d", str(pair.head), "-k", str(K), "--max-new-tokens",
            str(NEW_TOKENS), "--ignore-eos", "--no-baseline", "--device", "cpu", "--dtype", "float32", "--json", "-q",
            *more]


def plausible_bench(stdout: str, k: int = K, prompts: int | None = None) -> str | None:
    """A bench --json report whose numbers are possible: every τ (overall, per prompt, per bucket) in [1, k+1], no
    NaN or infinity anywhere, and (when given) as many prompts as the input file holds."""
    try:
        report = json.loads(stdout)
    except ValueError as error:
        return f"stdout is not one JSON report ({error}): {stdout[:200]!r}"
    for where, value in walk(report, "report"):
        if isinstance(value, float) and value != value or value in (float("inf"), float("-inf")):
            return f"{where} = {value}"
        if where.endswith(".mean_acceptance_length") and value is not None and not 1 <= value <= k + 1:
            return f"{where} = {value}, not in [1, {k + 1}]"
    if prompts is not None and report.get("settings", {}).get("num_prompts") != prompts:
        return f"{report.get('settings', {}).get('num_prompts')} prompts benched, the file holds {prompts}"
    return None


def walk(value, where: str):
    """(dotted path, leaf) of every leaf of a JSON value."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from walk(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from walk(item, f"{where}[{i}]")
    else:
        yield where, value
