"""The `--to gguf` cases of the convert fuzzer (support/fuzz.py): a damaged EAGLE-3 head converted to GGUF must be
refused in one paragraph or give a file whose every tensor is its (damaged) source as the format's own loader reads
it, rewritten as the provenance says (llama.cpp's q/k row order, absolute d2t: layouts/gguf.py). The GGUF is read
back by the project's reader (io/gguf_file.py), which raises on a header or a tensor that points outside the file."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import torch

from eagle_convert.io.gguf_file import read_gguf
from eagle_convert.layouts.gguf import absolute_d2t, llama_permute

ROPE_FREQS = "rope_freqs.weight"
# Llama 3.1's scaling with a short original context, so that most rope_freqs divisors differ from 1
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16}
_PERMUTED = re.compile(r"llama\.cpp's RoPE row order \((\d+) heads\)$")


def with_llama3_copy(head: Path, copy: Path) -> None:
    """A copy of `head` whose config states LLAMA3 (its target keeps plain RoPE: the case passes
    --allow-rope-mismatch)."""
    shutil.copytree(head, copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps(config | {"rope_scaling": LLAMA3}, indent=2))


def read_gguf_output(out: Path) -> dict[str, torch.Tensor]:
    (path,) = out.glob("*.gguf")
    gguf = read_gguf(path)
    end = max((offset + gguf.tensor(name).nbytes for name, (_, _, offset) in gguf.tensors.items()), default=0)
    assert end <= len(gguf.data), f"{path.name}: tensor data runs past the end of the file"
    return {name: gguf.tensor(name) for name in gguf.tensors}


def gguf_rewritten(how: str, sources: list[dict]):
    """For a tensor read from one source and rewritten (provenance `how` ends in ", then <rewrite>"): a function
    (load_source, dtype) -> the expected tensor; None for anything else."""
    if len(sources) != 1 or ", then " not in how:
        return None
    (src,) = sources
    rewrite = how.rsplit(", then ", 1)[1]
    if rewrite.startswith("offsets -> absolute target ids"):
        change = absolute_d2t
    elif match := _PERMUTED.match(rewrite):
        heads = int(match.group(1))

        def change(value):
            return llama_permute(value, heads)
    else:
        return None

    def expected(load_source, dtype: torch.dtype) -> torch.Tensor:
        return change(load_source(src["file"])[src["name"]]).to(dtype)
    return expected
