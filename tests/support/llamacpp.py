"""Real llama.cpp (b11434, built by scripts/engines/llamacpp/build.sh) in the tests: GGUF files written by llama.cpp's
own converter, its speculative and plain greedy decoding, and the counters it prints.

LLAMACPP_BIN is the folder holding llama-speculative-simple and llama-simple; LLAMACPP_CONVERT runs the tree's
convert_hf_to_gguf.py in its own environment (`make test-llamacpp` sets both)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from eagle_convert.engines.llamacpp_log import parse_counters  # noqa: F401  (the tests read counters as bench does)

LLAMACPP_BIN = os.environ.get("LLAMACPP_BIN", "")
LLAMACPP_CONVERT = os.environ.get("LLAMACPP_CONVERT", "")
THREADS = "2"


def generated_text(stdout: str, prompt: str) -> str:
    """The text after the prompt in a llama.cpp example's stdout (both examples echo the prompt's pieces first)."""
    at = stdout.find(prompt)
    if at < 0:
        raise ValueError(f"the prompt {prompt!r} is not in the output:\n{stdout[-2000:]}")
    return stdout[at + len(prompt):].strip("\n")


def convert(model: Path, out: Path, *, target: Path | None = None) -> Path:
    """llama.cpp's own converter, fp32; a draft head names its target (config and tokenizer) with --target-model-dir."""
    cmd = [LLAMACPP_CONVERT, str(model), "--outfile", str(out), "--outtype", "f32"]
    if target is not None:
        cmd += ["--target-model-dir", str(target)]
    _run(cmd)
    return out


def speculative(target_gguf: Path, draft_gguf: Path, prompt: str, *, k: int, max_tokens: int) -> tuple[str, str]:
    """(generated text, whole log) of EAGLE-3 speculative decoding, greedy, at -lv 4 for the statistics line."""
    result = _run([_tool("llama-speculative-simple"), "-m", str(target_gguf), "-md", str(draft_gguf),
                   "--spec-type", "draft-eagle3", "--spec-draft-n-max", str(k), "-n", str(max_tokens), "-p", prompt,
                   "--temp", "0", "--top-k", "1", "-t", THREADS, "-lv", "4"])
    return generated_text(result.stdout, prompt), result.stdout + result.stderr


def plain(target_gguf: Path, prompt: str, *, max_tokens: int) -> str:
    """llama.cpp's plain greedy decoding of the same prompt (llama-simple: greedy sampler, no draft)."""
    result = _run([_tool("llama-simple"), "-m", str(target_gguf), "-n", str(max_tokens), prompt])
    return generated_text(result.stdout, prompt)


def _tool(name: str) -> str:
    return str(Path(LLAMACPP_BIN) / name)


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {result.returncode}:\n{result.stdout[-2000:]}\n"
                           f"{result.stderr[-3000:]}")
    return result
