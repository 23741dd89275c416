"""llama.cpp (b11434) as an engine of the bench loop: the target converted to GGUF with llama.cpp's own converter,
the head with ours (`--to gguf`) or given as a .gguf file, then per request llama-speculative-simple (EAGLE-3, greedy,
its counters at -lv 4) or llama-simple (the same engine's plain greedy decoding, the baseline).

Where the tools are: --engine-bin DIR, else $LLAMACPP_BIN (and $LLAMACPP_CONVERT for the converter), else the cache
`make llamacpp` builds (scripts/engines/llamacpp/build.sh). The token ids travel as text (llamacpp_vocab.py).

llama-speculative-simple stops once it has generated MORE than -n tokens, where our runner stops at
--max-new-tokens: it runs with -n max_new_tokens - 1, so both stop after the same round, and its overshoot is cut
as ours is (docs/llamacpp.md)."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import EngineError
from .generation import Generation
from .llamacpp_log import generated_bytes, parse_counters
from .llamacpp_vocab import LlamaCppVocab

VERSION = "b11434"
SPEC_TOOL, PLAIN_TOOL, CONVERTER = "llama-speculative-simple", "llama-simple", "convert-hf-to-gguf"
SIMPLE_FLAGS = ("-m", "-n", "-ngl")  # examples/simple/simple.cpp: anything else starts the prompt
OUTTYPE = {"auto": "f32", "float32": "f32", "bfloat16": "bf16", "float16": "f16"}
TIMEOUT_S = 1800  # one request, or one target conversion


def default_dir() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return Path(os.environ.get("LLAMACPP_CACHE") or cache / "eagle-convert" / f"llama.cpp-{VERSION}") / "bin"


@dataclass(frozen=True)
class LlamaCppTools:
    """The two examples and the converter (a command: the tree's convert_hf_to_gguf.py in its own environment)."""
    bin_dir: Path
    converter: Path

    @classmethod
    def find(cls, given: str | None) -> LlamaCppTools:
        bin_dir = Path(given or os.environ.get("LLAMACPP_BIN") or default_dir())
        converter = Path(os.environ.get("LLAMACPP_CONVERT") or bin_dir / CONVERTER) if not given else (
            bin_dir / CONVERTER)
        missing = [str(p) for p in (bin_dir / SPEC_TOOL, bin_dir / PLAIN_TOOL, converter) if not os.access(p, os.X_OK)]
        if missing:
            raise EngineError(
                f"llama.cpp {VERSION} is not built where bench looks: {', '.join(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} missing.",
                "Run `make llamacpp` (it builds llama-speculative-simple and llama-simple and the converter's "
                "environment into ~/.cache/eagle-convert, about 10 minutes once), or point --engine-bin DIR (or "
                "$LLAMACPP_BIN and $LLAMACPP_CONVERT) at a build that has them.")
        return cls(bin_dir, converter)

    def convert_target(self, target: str, out: Path, dtype: str) -> Path:
        run_tool([str(self.converter), target, "--outfile", str(out), "--outtype", OUTTYPE[dtype]],
                 "llama.cpp's converter (convert_hf_to_gguf.py)")
        return out

    def tool(self, name: str) -> str:
        return str(self.bin_dir / name)


def run_tool(cmd: list[str], what: str) -> subprocess.CompletedProcess:
    """One llama.cpp command, bounded; its own error (the last lines it printed) when it fails."""
    try:
        result = subprocess.run(cmd, capture_output=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise EngineError(f"{what} did not finish within {TIMEOUT_S} s; it was stopped.",
                          "Bench fewer or shorter prompts (--max-new-tokens).") from None
    except OSError as error:
        raise EngineError(f"Cannot run {what} ({cmd[0]}): {error}.", "Rebuild it with `make llamacpp`.") from None
    if result.returncode != 0:
        tail = " | ".join(line for line in result.stderr.decode(errors="replace").splitlines()[-6:] if line.strip())
        raise EngineError(f"{what} exited with status {result.returncode}: {tail[-1500:]}",
                          "A head llama.cpp cannot load shows up here (check `eagle-convert inspect DRAFT --target "
                          "TARGET` and `convert --to gguf`); EAGLE_CONVERT_DEBUG=1 shows the command.")
    return result


@dataclass
class LlamaCppEngine:
    """generate() for the bench loop: speculative (`draft` set) or plain decoding of the same target GGUF."""
    tools: LlamaCppTools
    target_gguf: Path
    vocab: LlamaCppVocab
    k: int
    draft: Path | None = None
    encode: object = None  # the target tokenizer's text -> ids, when greedy matching cannot split the output

    @property
    def what(self) -> str:
        return SPEC_TOOL if self.draft else PLAIN_TOOL

    def generate(self, ids: list[int], *, max_new_tokens: int, temperature: float, seed: int,
                 stop_token_ids: tuple[int, ...]) -> Generation:
        text = self.vocab.prompt_text(ids)
        start = time.perf_counter()
        result = run_tool(self._command(text, max_new_tokens), self.what)
        seconds = time.perf_counter() - start
        echo = self.vocab.render(ids)
        if self.draft is None:  # llama-simple: the prompt's pieces, the generation, "\n"
            body = generated_bytes(result.stdout, echo, prefix=b"", suffix=b"\n", tool=self.what)
            printed, counters, generated = _decoded(result.stderr), None, None
        else:  # speculative-simple: "\n\n", the prompt's pieces, the generation, "\n\n\n\n"
            body = generated_bytes(result.stdout, echo, prefix=b"\n\n", suffix=b"\n\n\n\n", tool=self.what)
            parsed = parse_counters(result.stderr.decode(errors="replace"))
            if parsed.n_prompt != len(ids):
                raise EngineError(f"{self.what} tokenized the prompt into {parsed.n_prompt} tokens, not the "
                                  f"bench's {len(ids)}.", "Give the prompts as text that round-trips through the "
                                  "target's tokenizer (docs/llamacpp.md).")
            counters, generated = parsed.as_counters(self.k), parsed.n_predict
            printed = None
        tokens = self._tokens(body, printed, generated, max_new_tokens, stop_token_ids)
        return Generation(tokens, seconds, counters)

    def _command(self, text: str, max_new_tokens: int) -> list[str]:
        if self.draft is None:
            if text in SIMPLE_FLAGS:  # llama-simple reads its prompt as the arguments after its own flags
                raise EngineError(f"The prompt {text!r} is one of {PLAIN_TOOL}'s own flags, which it would read as "
                                  "an option rather than as the prompt.", "Bench a longer prompt.")
            return [self.tools.tool(PLAIN_TOOL), "-m", str(self.target_gguf), "-n", str(max_new_tokens), text]
        # -n N stops after the round that passes N tokens; our runner stops at the round that reaches max_new_tokens
        return [self.tools.tool(SPEC_TOOL), "-m", str(self.target_gguf), "-md", str(self.draft), "--spec-type",
                "draft-eagle3", "--spec-draft-n-max", str(self.k), "-n", str(max(max_new_tokens - 1, 0)), "-p", text,
                "--temp", "0", "--top-k", "1", "-lv", "4"]

    def _tokens(self, body: bytes, printed: int | None, generated: int | None, max_new_tokens: int,
                stop_token_ids: tuple[int, ...]) -> list[int]:
        """The generated ids, cut at max_new_tokens as our runner cuts them. Neither example prints its
        end-of-generation token: it ended there when it printed fewer tokens than it generated (speculative: the
        tokens after it in the same round are counted, not printed) or than it was asked for (plain)."""
        if printed is None:
            tokens = self.vocab.ids_of(body, None, self.what, self.encode, at_most=generated)
            ended = len(tokens) < generated
        else:
            tokens = self.vocab.ids_of(body, printed, self.what, self.encode)
            ended = printed < max_new_tokens
        if ended and len(tokens) < max_new_tokens:
            tokens.append(self.vocab.eos if self.vocab.eos is not None else stop_token_ids[0])
        return tokens[:max_new_tokens]


def _decoded(stderr: bytes) -> int:
    """llama-simple's `decoded N tokens` line (the tokens it printed)."""
    for line in reversed(stderr.decode(errors="replace").splitlines()):
        if "decoded" in line and "tokens in" in line:
            return int(line.split("decoded", 1)[1].split()[0])
    raise EngineError(f"{PLAIN_TOOL} printed no `decoded N tokens` line.", "Rebuild it with `make llamacpp`.")
