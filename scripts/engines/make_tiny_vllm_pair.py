#!/usr/bin/env python3
"""Build a tiny Llama target and tiny EAGLE draft heads that real vLLM (CPU) can load (under OUT; the library and
what it writes: eagle_convert.testing.vllm_pairs).

  python scripts/engines/make_tiny_vllm_pair.py OUT [--layers 4] [--vocab 256] [--seed 0]
"""

from __future__ import annotations

import argparse
import json

from eagle_convert.testing.vllm_pairs import build_pair


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--draft-vocab", type=int, default=128)
    ap.add_argument("--aux-layer-ids", type=json.loads, default=None, help="JSON list, e.g. [1,2,3]")
    ap.add_argument("--target-rope-theta", type=float, default=500000.0)
    ap.add_argument("--draft-rope-theta", type=float, default=10000.0)
    ap.add_argument("--max-pos", type=int, default=512)
    ap.add_argument("--eagle1-embed", action="store_true", help="write embed_tokens.weight (target copy)")
    ap.add_argument("--eagle3-prefix", default="layers.0.", choices=["layers.0.", "midlayer."])
    ap.add_argument("--eagle3-arch", default="LlamaForCausalLMEagle3")
    ap.add_argument("--successor", type=float, default=0.0,
                    help="0: random weights; s>0: structured weights with partial acceptance (try 0.3)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    paths = build_pair(a.out, vocab=a.vocab, layers=a.layers, aux_layer_ids=a.aux_layer_ids,
                       draft_vocab=a.draft_vocab, target_rope_theta=a.target_rope_theta,
                       draft_rope_theta=a.draft_rope_theta, max_pos=a.max_pos,
                       eagle1_embed=a.eagle1_embed, eagle3_prefix=a.eagle3_prefix,
                       eagle3_arch=a.eagle3_arch, successor=a.successor, seed=a.seed)
    print(json.dumps(paths))


if __name__ == "__main__":
    main()
