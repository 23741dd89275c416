#!/usr/bin/env python3
"""Save a Hugging Face model per tensor-parallel rank with real vLLM (`save_sharded_state`), the way vLLM's
examples/features/sharded_state/save_sharded_state_offline.py does, including its copy of every non-weight file of
the source (so the source's model.safetensors.index.json is copied and goes stale). Run inside .venv-vllm:

  VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind \
      .venv-vllm/bin/python scripts/engines/vllm_save_sharded.py MODEL OUT --tp 2 [--dtype bfloat16] [--max-size BYTES]

On the CPU backend the linear layers' weights are prepacked and not saved; the LM head, embedding and norms are
(docs/design/tp-ranks.md, vLLM's CPU backend): all a splice reads. Prints one JSON line: the files written."""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--max-size", type=int, default=5 * 1024**3)  # the example script's default part size
    a = ap.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM

    llm = LLM(model=a.model, tensor_parallel_size=a.tp, dtype=a.dtype, max_model_len=256, max_num_seqs=4,
              enforce_eager=True, seed=0, skip_tokenizer_init=True)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    llm.llm_engine.engine_core.save_sharded_state(path=a.out, pattern=None, max_size=a.max_size)
    for f in os.listdir(a.model):  # the example's metadata copy: everything that is not a weight file
        if os.path.splitext(f)[1] not in (".bin", ".pt", ".safetensors"):
            src = os.path.join(a.model, f)
            shutil.copytree(src, os.path.join(a.out, f)) if os.path.isdir(src) else shutil.copy(src, a.out)
    print(json.dumps({"files": sorted(os.listdir(a.out))}))


if __name__ == "__main__":  # vLLM's engine spawns processes
    main()
