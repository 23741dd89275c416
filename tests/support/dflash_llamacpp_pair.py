"""The tiny DFlash pair the llama.cpp tier runs: testing/dflash.py's agreeing Llama target and 1-layer z-lab head
(the head proposes the target's next token only when its first tap is the output of target layer 0), with the
target's vocabulary as a SentencePiece tokenizer (support/spm.py), which llama.cpp's own converter takes."""

from __future__ import annotations

import json
from pathlib import Path

from eagle_convert.testing.dflash import TARGET, TARGET_LAYER_IDS, build_dflash_set
from support.spm import text_of, write_tokenizer

# letter ids only (support/spm.py), short of the mask token (the vocabulary's last id)
PROMPT_IDS = [[17, 42, 99, 5], [120, 77, 30], [9, 9, 64, 31, 50]]


def build_dflash_llamacpp_pair(root: Path) -> dict[str, Path]:
    """target/ (Llama, tokenizer.model), zlab/ and speculators/ (the same agreeing head) and prompts.jsonl."""
    paths = build_dflash_set(Path(root), agree=True, layers=1)
    for name in ("tokenizer.json", "tokenizer_config.json"):  # the word-level tokenizer llama.cpp cannot convert
        (paths["target"] / name).unlink()
    write_tokenizer(paths["target"], TARGET.vocab_size)
    prompts = Path(root) / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"text": text_of(ids)}) + "\n" for ids in PROMPT_IDS))
    return {"target": paths["target"], "zlab": paths["zlab"], "speculators": paths["speculators"],
            "jetspec": paths["jetspec"], "prompts": prompts, "taps": TARGET_LAYER_IDS}
