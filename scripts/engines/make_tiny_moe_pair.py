#!/usr/bin/env python3
"""A tiny Qwen3-MoE target and an EAGLE-3 head in its released layout that real vLLM (CPU) can load (the library:
eagle_convert.testing.moe_pair).

  python scripts/engines/make_tiny_moe_pair.py OUT        writes OUT/target, OUT/eagle3-release, OUT/prompts.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from eagle_convert.testing.moe_pair import build_moe_release


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--successor", type=float, default=1.4)
    a = ap.parse_args()
    print(json.dumps({k: str(v) for k, v in build_moe_release(Path(a.out), successor=a.successor).items()}))


if __name__ == "__main__":
    main()
