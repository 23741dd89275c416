"""What llama.cpp's examples print (build b11434): llama-speculative-simple's counters at `-lv 4`, and the text both
examples echo on stdout (the prompt's pieces, then each generated token's piece).

The counters are read as vLLM's spec-decode counters (generation.py): drafts are the verification rounds, accepted
tokens per position come from the statistics line's rates times its rounds (printed with three decimals: exact
below 500 rounds per request, and checked against the accepted total)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import EngineError


@dataclass(frozen=True)
class SpecCounters:
    """What llama-speculative-simple prints at exit: its own totals (n_predict: tokens generated, overshoot and the
    end-of-generation token included; n_drafted: the tokens of every draft it verified; n_accept: those accepted),
    the prompt's token count (`encoded N tokens`) and, at -lv 4, the speculator's statistics line (accept_calls:
    verification rounds; gen/acc drafts and tokens; acc_rate_per_pos: accepted tokens at draft position i /
    accept_calls)."""
    n_predict: int
    n_drafted: int
    n_accept: int
    n_prompt: int
    accept_calls: int
    gen_drafts: int
    acc_drafts: int
    gen_tokens: int
    acc_tokens: int
    acc_rate_per_pos: tuple[float, ...]

    def accepted_per_pos(self, k: int) -> list[int]:
        """Accepted tokens at each of the k draft positions (llama.cpp prints rates only up to the last position
        anything was accepted at)."""
        if len(self.acc_rate_per_pos) > k:
            raise EngineError(f"llama.cpp reports accepted tokens for {len(self.acc_rate_per_pos)} draft positions, "
                              f"not k = {k}.", "It ran another draft length than asked: check the llama.cpp build.")
        counts = [round(rate * self.accept_calls) for rate in self.acc_rate_per_pos]
        counts += [0] * (k - len(counts))
        if sum(counts) != self.n_accept:
            raise EngineError(f"llama.cpp's per-position rates ({self.acc_rate_per_pos} over {self.accept_calls} "
                              f"rounds) do not add up to its {self.n_accept} accepted tokens.",
                              "Its rates are printed with three decimals: bench fewer --max-new-tokens per prompt "
                              "(under 500 rounds each).")
        return counts

    def as_counters(self, k: int) -> dict:
        """vLLM's counter keys (generation.COUNTER_KEYS), so the report is computed by the same code as vLLM's."""
        return {"num_drafts": self.accept_calls, "num_draft_tokens": self.n_drafted,
                "num_accepted_tokens": self.n_accept, "num_accepted_tokens_per_pos": self.accepted_per_pos(k)}


_TOTALS = {key: re.compile(rf"^.*\b{key}\s*=\s*(\d+)\s*$", re.M) for key in ("n_predict", "n_drafted", "n_accept")}
_ENCODED = re.compile(r"\bencoded\s+(\d+) tokens in")
_STATS = re.compile(r"statistics\s+draft-eagle3: #calls\(b,g,a\) =\s*\d+\s+\d+\s+(\d+), #gen drafts =\s*(\d+), "
                    r"#acc drafts =\s*(\d+), #gen tokens =\s*(\d+), #acc tokens =\s*(\d+)(.*)$", re.M)
_RATES = re.compile(r"#acc rate/pos = \(([^)]*)\)")
_HINT = ("llama-speculative-simple needs -lv 4 for its statistics, and b11434's logger can exit before writing "
         "them (ggml-org/llama.cpp#22142): use the build of `make llamacpp`, which flushes the log at exit.")


def parse_counters(log: str) -> SpecCounters:
    """The counters in llama-speculative-simple's log. A missing one is an error, never read as 0."""
    totals = {}
    for key, pattern in _TOTALS.items():
        found = pattern.findall(log)
        if not found:
            raise EngineError(f"llama-speculative-simple printed no `{key} = N` line.", _HINT)
        totals[key] = int(found[-1])
    encoded = _ENCODED.findall(log)
    stats = _STATS.findall(log)
    if not stats or not encoded:
        raise EngineError("llama-speculative-simple printed no `statistics draft-eagle3` or `encoded N tokens` "
                          "line.", _HINT)
    *numbers, rest = stats[-1]
    accept_calls, gen_drafts, acc_drafts, gen_tokens, acc_tokens = map(int, numbers)
    rates = _RATES.search(rest)  # printed only after a verification round
    per_pos = tuple(float(r) for r in rates.group(1).split(",") if r.strip()) if rates else ()  # "()": none accepted
    return SpecCounters(**totals, n_prompt=int(encoded[-1]), accept_calls=accept_calls, gen_drafts=gen_drafts,
                        acc_drafts=acc_drafts, gen_tokens=gen_tokens, acc_tokens=acc_tokens, acc_rate_per_pos=per_pos)


def generated_bytes(stdout: bytes, echo: bytes, *, prefix: bytes, suffix: bytes, tool: str) -> bytes:
    """The generated pieces in an example's stdout: `prefix`, the prompt's pieces (`echo`, what the bench's ids
    render to), the generation, `suffix`. An echo that differs means llama.cpp tokenized the prompt into other ids."""
    if not stdout.startswith(prefix + echo):
        shown = stdout[len(prefix):len(prefix) + len(echo) + 40].decode(errors="replace")
        raise EngineError(f"{tool} read the prompt as other tokens than the bench sent: it echoed {shown!r}, "
                          f"where the bench's ids render to {echo.decode(errors='replace')!r}.",
                          "llama.cpp tokenizes the prompt text itself; give prompts as text that round-trips, or as "
                          "{\"prompt_ids\": [...]} ids that the target's tokenizer produces for some text.")
    body = stdout[len(prefix) + len(echo):]
    return body[:len(body) - len(suffix)] if body.endswith(suffix) else body
