"""Our `vocab-map build` counting and selection against SpecForge's and speculators' own code on a real target's
tokenizer and chat template (default: the real pair's SmolLM2-135M-Instruct, `make real-demo`'s REAL_DIR/smollm2).

The corpus is made here, offline and reproducibly: conversations whose turns are docstrings of the Python standard
library (seeded). SpecForge's GeneralParser runs with the target template's markers (ChatML: `<|im_start|>assistant\\n`
... `<|im_end|>\\n`, what its "qwen" registry entry states) and no injected system prompt; speculators'
`_render_boundary_rows` runs with transformers' apply_chat_template standing in for vLLM's /render. Needs `make
producers`. Prints whether counts (with first-seen order) and d2t/t2d are equal, per max length and N.

    PYTHONPATH=src python scripts/vocab/compare_producers_real.py --target /work/real/smollm2 --conversations 300
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import random
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from support.producers import producer_function, specforge_parser_module, speculators_boundary_rows  # noqa: E402

from eagle_convert.benchmark.token_counts import CountSettings, count_tokens, read_conversations  # noqa: E402
from eagle_convert.vocab.map import config_vocab_size  # noqa: E402
from eagle_convert.vocab.selection import select  # noqa: E402

MODULES = ("json", "os", "re", "collections", "pathlib", "itertools", "functools", "textwrap", "argparse", "logging",
           "subprocess", "threading", "asyncio", "csv", "sqlite3", "decimal", "statistics", "random", "typing",
           "dataclasses", "enum", "heapq", "bisect", "shutil")


def make_corpus(path: Path, conversations: int) -> None:
    docs = [d[:1500] for m in MODULES for obj in vars(importlib.import_module(m)).values()
            if (d := inspect.getdoc(obj)) and len(d) > 80]
    rng = random.Random(0)
    with path.open("w") as f:
        for i in range(conversations):
            messages = [{"role": "system", "content": "You answer questions about Python."}] if i % 2 else []
            for _ in range(rng.choice([1, 1, 2, 3])):
                messages += [{"role": "user", "content": rng.choice(docs)[:200]},
                             {"role": "assistant", "content": rng.choice(docs)}]
            f.write(json.dumps({"messages": messages}) + "\n")


def _count(pairs) -> Counter:
    counter = Counter()  # the producers' own counting loop
    for ids, mask in pairs:
        unique, counts = ids[mask == 1].unique(return_counts=True)
        counter.update(dict(zip(unique.tolist(), counts.tolist())))
    return counter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="/work/real/smollm2")
    parser.add_argument("--conversations", type=int, default=300)
    parser.add_argument("--sizes", default="512,2048,8192")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(args.target)
    vocab = config_vocab_size(json.loads((Path(args.target) / "config.json").read_text()))
    work = Path(tempfile.mkdtemp())
    corpus = work / "corpus.jsonl"
    make_corpus(corpus, args.conversations)
    rows = read_conversations(corpus)
    parse = specforge_parser_module()
    specforge = parse.GeneralParser(hf, parse.ChatTemplate(assistant_header="<|im_start|>assistant\n",
                                                           end_of_turn_token="<|im_end|>\n"))

    def render(conv, endpoint, *, add_generation_prompt, max_length, tools=None):
        text = hf.apply_chat_template(conv, tokenize=False, add_generation_prompt=add_generation_prompt)
        return hf(text, add_special_tokens=False)["input_ids"][:max_length]

    boundary_rows = speculators_boundary_rows(render)
    theirs_of = {
        "specforge": lambda n: _count(specforge.parse(r, n) for r in rows),
        "speculators": lambda n: _count((torch.tensor(x["input_ids"]), torch.tensor(x["loss_mask"]))
                                        for r in rows for x in boundary_rows(r, "", n)),
    }
    select_of = {"specforge": "process_token_dict_to_mappings",
                 "speculators": "build_vocab_mappings_from_distribution"}
    for compat, theirs_for in theirs_of.items():
        for max_length in (2048, 256):
            start = time.perf_counter()
            ours = count_tokens(args.target, corpus, CountSettings(compat, max_length, work / "cache", False)).counts
            took = time.perf_counter() - start
            theirs = theirs_for(max_length)
            same = list(ours.counts.items()) == list(theirs.items())
            print(f"{compat} --max-length {max_length}: {sum(theirs.values())} tokens, {len(theirs)} distinct; "
                  f"counts equal (with order): {same}; our count took {took:.1f} s")
            for n in map(int, args.sizes.split(",")):
                d2t, t2d = producer_function(select_of[compat])(Counter(theirs), n, vocab)
                vmap = select(ours, n, vocab, compat)
                print(f"  N {n}: d2t/t2d equal: {torch.equal(vmap.d2t(), d2t) and torch.equal(vmap.t2d(), t2d)}")


if __name__ == "__main__":
    main()
