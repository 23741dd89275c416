"""Real llama.cpp (b11434, built by scripts/engines/llamacpp/build.sh) in the tests: GGUF files written by llama.cpp's
own converter, its speculative and plain greedy decoding, and the counters it prints.

LLAMACPP_BIN is the folder holding llama-speculative-simple and llama-simple; LLAMACPP_CONVERT runs the tree's
convert_hf_to_gguf.py in its own environment (`make test-llamacpp` sets both)."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

LLAMACPP_BIN = os.environ.get("LLAMACPP_BIN", "")
LLAMACPP_CONVERT = os.environ.get("LLAMACPP_CONVERT", "")
THREADS = "2"


@dataclass(frozen=True)
class SpecCounters:
    """What llama-speculative-simple prints at exit: its own totals (n_drafted: the tokens of every draft it verified;
    n_accept: those accepted) and, at -lv 4, the speculator's statistics line (accept_calls: verification rounds;
    gen/acc drafts and tokens; acc_rate_per_pos: accepted tokens at draft position i / accept_calls)."""
    n_predict: int
    n_drafted: int
    n_accept: int
    accept_calls: int
    gen_drafts: int
    acc_drafts: int
    gen_tokens: int
    acc_tokens: int
    acc_rate_per_pos: tuple[float, ...]


_TOTALS = {key: re.compile(rf"^.*\b{key}\s*=\s*(\d+)\s*$", re.M) for key in ("n_predict", "n_drafted", "n_accept")}
_STATS = re.compile(r"statistics\s+draft-eagle3: #calls\(b,g,a\) =\s*\d+\s+\d+\s+(\d+), #gen drafts =\s*(\d+), "
                    r"#acc drafts =\s*(\d+), #gen tokens =\s*(\d+), #acc tokens =\s*(\d+)(.*)$", re.M)
_RATES = re.compile(r"#acc rate/pos = \(([^)]*)\)")


def parse_counters(log: str) -> SpecCounters:
    """The counters in llama-speculative-simple's log. Missing ones raise: b11434's logger could exit before writing
    them (ggml-org/llama.cpp#22142; the build applies flush-log-at-exit.patch), and a test must not read 0 for them."""
    totals = {}
    for key, pattern in _TOTALS.items():
        found = pattern.findall(log)
        if not found:
            raise ValueError(f"llama-speculative-simple printed no `{key} = N` line; its log ends:\n{log[-2000:]}")
        totals[key] = int(found[-1])
    stats = _STATS.findall(log)
    if not stats:
        raise ValueError(f"no `statistics draft-eagle3` line (it needs -lv 4); the log ends:\n{log[-2000:]}")
    *numbers, rest = stats[-1]
    accept_calls, gen_drafts, acc_drafts, gen_tokens, acc_tokens = map(int, numbers)
    rates = _RATES.search(rest)  # printed only after a verification round
    per_pos = tuple(float(r) for r in rates.group(1).split(",") if r.strip()) if rates else ()  # "()": none accepted
    return SpecCounters(**totals, accept_calls=accept_calls, gen_drafts=gen_drafts, acc_drafts=acc_drafts,
                        gen_tokens=gen_tokens, acc_tokens=acc_tokens, acc_rate_per_pos=per_pos)


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
