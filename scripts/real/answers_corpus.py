"""The EAGLE-1 trainer's cached data (REAL_DIR/train/data.pt: the training conversations with the target's own greedy
answers, as token ids through the ChatML template) written back as a JSONL chat corpus ({"conversations": [...]}),
the input `vocab-map build` / `coverage --corpus` count: a hot-token map built from the answers the head was trained
on, disjoint from the held-out prompts it is benched on. A conversation is cut at <|im_start|> / <|im_end|>; a
sample truncated by the generation budget keeps its last answer as far as it got.
  python scripts/real/answers_corpus.py --target REAL_DIR/smollm2 --data REAL_DIR/train/data.pt -o corpus.jsonl"""

from __future__ import annotations

import argparse
import json

import torch
from tokenizers import Tokenizer


def messages(ids: list[int], tok: Tokenizer, start: int, end: int) -> list[dict]:
    out, i = [], 0
    while i < len(ids):
        if ids[i] != start:
            i += 1
            continue
        j = i + 1
        while j < len(ids) and ids[j] != end:
            j += 1
        role, _, content = tok.decode(ids[i + 1:j], skip_special_tokens=False).partition("\n")
        out.append({"role": role.strip(), "content": content})
        i = j + 1
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--limit", type=int, help="only the first N samples")
    args = ap.parse_args()
    tok = Tokenizer.from_file(f"{args.target}/tokenizer.json")
    start, end = tok.token_to_id("<|im_start|>"), tok.token_to_id("<|im_end|>")
    samples = torch.load(args.data, map_location="cpu", weights_only=True, mmap=True)[:args.limit]
    written = 0
    with open(args.out, "w") as f:
        for sample in samples:
            conversation = [m for m in messages(sample["tokens"].tolist(), tok, start, end) if m["role"] != "system"]
            if any(m["role"] == "assistant" for m in conversation):
                f.write(json.dumps({"conversations": conversation}) + "\n")
                written += 1
    print(f"{written} conversations of {len(samples)} samples -> {args.out}")


if __name__ == "__main__":
    main()
