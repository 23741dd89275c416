"""Long documents for the context bench, written in the tiny tokenizer's words."""

from __future__ import annotations

import json
import random


def write_documents(path, count=2, words=400, seed=0):
    """Documents in the tiny tokenizer's words (t3..t255), each with a question."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for n in range(count):
            text = " ".join(f"t{rng.randrange(3, 256)}" for _ in range(words))
            f.write(json.dumps({"_id": f"doc{n}", "context": text, "question": "t5 t6 t7"}) + "\n")
    return path
