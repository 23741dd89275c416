"""The tiny pair the llama.cpp and OpenVINO tiers run: vllm_pairs' successor target with 12 layers (OpenVINO GenAI
asserts at least 10) and a SentencePiece tokenizer (support/spm.py), and its EAGLE-3 head in the released layout
(`midlayer.*`, `LlamaForCausalLMEagle3`, fp32) tapping layers 2, 6, 9 (EAGLE's count: the input of layer i). The head
proposes from the input of layer 9, so it agrees with its target where the layers' perturbations leave the successor
rule standing: partial acceptance, which a wrong tap or a wrong d2t lowers."""

from __future__ import annotations

import json
from pathlib import Path

from support.spm import text_of, write_tokenizer

from eagle_convert.testing.vllm_pairs import build_pair

LAYERS, TAPS, VOCAB, SUCCESSOR = 12, [2, 6, 9], 256, 1.4
# letter ids only (support/spm.py), each far enough from the vocabulary's end that the successor rule (t -> t+1)
# reaches no special id within a test's tokens
PROMPT_IDS = [[17, 42, 99, 5], [120, 77, 30], [9, 9, 64, 31, 50]]


def build_engine_pair(root: Path) -> dict[str, Path]:
    """target/ (with tokenizer.model), eagle3/ (release layout) and prompts.jsonl ({"text", "prompt_ids"}) under root.
    prompt_ids are the ids both engines feed their target: <s>, the word boundary "▁", then the letters."""
    root = Path(root)
    paths = build_pair(root / "pair", vocab=VOCAB, layers=LAYERS, aux_layer_ids=TAPS, successor=SUCCESSOR,
                       eagle3_prefix="midlayer.")
    write_tokenizer(Path(paths["target"]), VOCAB)
    prompts = root / "engine-prompts.jsonl"
    prompts.write_text("".join(json.dumps({"text": text_of(ids), "prompt_ids": [1, 3, *ids]}) + "\n"
                               for ids in PROMPT_IDS))
    return {"target": Path(paths["target"]), "eagle3": Path(paths["eagle3"]), "prompts": prompts}
