"""Peak memory and time of `vocab-map build`'s counting (token_counts.count_corpus, --max-length 2048) on ONE long
JSONL line, before and after bounded tokenizing (issue 29, point 3), in one run so both see the same machine.

Lines (deterministic prose, sized by the target's own chars-per-token on a sample, so token counts are ~):
* single: one user prompt and one assistant answer of N tokens;
* turns: a conversation of N tokens in user/assistant turns of --turn-tokens each.
Each count runs in its own process (`python -c`, PYTHONPATH = the src folder under test) under an address-space
limit (RLIMIT_AS, --mem-cap-gb) and a timeout; peak RSS is the child's ru_maxrss from wait4. A child that runs out
of address space or time is reported as such ("> cap" / "> timeout"), not retried. When both finish, their counts
must be equal (checked: the run fails otherwise).

  git -C /work/main worktree add --detach /tmp/before a6dcb48      # the code before the change
  python scripts/bench/tokenize_bound_bench.py --target TOKENIZER_DIR --before-src /tmp/before/src
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORDS = ("the of and to in a is that for it as was with be by on not he this are or his from at which but have an "
         "they you were her she there been one all we their has would when if so no will more can said who what "
         "about out up them into some could him than time only new like other then its also two may first after "
         "any these most").split()
CHILD = """
import json, sys, time
from eagle_convert.benchmark.chat import ChatTokenizer
from eagle_convert.benchmark.token_counts import CountSettings, count_corpus, read_conversations
chat, rows = ChatTokenizer.from_dir(sys.argv[1]), read_conversations(sys.argv[2])
start = time.perf_counter()
counts, _ = count_corpus(chat, rows, CountSettings(sys.argv[3], int(sys.argv[4]), progress=False))
print(json.dumps({"seconds": time.perf_counter() - start, "counts": counts.as_json()}))
"""


def prose(rng: random.Random, chars: int) -> str:
    parts, size = [], 0
    while size < chars:
        word = rng.choice(WORDS)
        if rng.random() < 0.08:
            word = word.capitalize() + rng.choice([",", ".", ";", "!", "?"])
        elif rng.random() < 0.03:
            word = str(rng.randint(0, 99999))
        parts.append(word)
        size += len(word) + 1
    return " ".join(parts)


def chars_per_token(target: Path) -> float:
    from tokenizers import Tokenizer
    sample = prose(random.Random(0), 200_000)
    return len(sample) / len(Tokenizer.from_file(str(target / "tokenizer.json")).encode(sample).ids)


def write_line(path: Path, shape: str, tokens: int, turn_tokens: int, ratio: float) -> None:
    rng = random.Random(tokens)
    if shape == "single":
        messages = [{"role": "user", "content": "Write a long story."},
                    {"role": "assistant", "content": prose(rng, int(tokens * ratio))}]
    else:
        messages = [{"role": role, "content": prose(rng, int(turn_tokens * ratio))}
                    for _ in range(max(tokens // (2 * turn_tokens), 1)) for role in ("user", "assistant")]
    path.write_text(json.dumps({"messages": messages}) + "\n")


def run_child(src: Path, target: Path, line: Path, compat: str, max_length: int, cap_gb: float,
              timeout: float) -> dict:
    def limit_memory():
        cap = int(cap_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(target), str(line), compat, str(max_length)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, preexec_fn=limit_memory)
    try:
        out, err = proc.communicate(timeout=timeout)
        status = None
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate()
        status = f"> {timeout:.0f} s"
    rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # children so far: see note in main
    wall = time.perf_counter() - start
    if status is None and proc.returncode != 0:
        status = f"> {cap_gb:g} GB" if "MemoryError" in err.decode() or proc.returncode < 0 else "error"
    result = {"status": status, "wall_s": wall, "rss_mb": rss_mb}
    if status is None:
        result.update(json.loads(out))
    return result


def measure(src: Path, *args) -> dict:
    # RUSAGE_CHILDREN is a maximum over every child so far: each measurement runs in a fresh helper process whose
    # only child is the count, so its ru_maxrss is that count's own peak.
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); from tokenize_bound_bench import run_child; "
            "from pathlib import Path; a = sys.argv[2:]; print(json.dumps(run_child(Path(a[0]), Path(a[1]), "
            "Path(a[2]), a[3], int(a[4]), float(a[5]), float(a[6]))))")
    out = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent), str(src), *map(str, args)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def cell(result: dict) -> str:
    if result is None:
        return "not run"
    if result["status"] == "error":
        return "error"
    if result["status"]:
        return f"killed: {result['status']} (peak {result['rss_mb'] / 1024:.2f} GB)"
    return f"{result['seconds']:.2f} s / {result['rss_mb']:.0f} MB"


def ratio(before: dict | None, after: dict) -> str:
    if not before or before["status"] or after["status"]:
        return "-"
    return f"{before['seconds'] / after['seconds']:.0f}x / {before['rss_mb'] / after['rss_mb']:.1f}x"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", type=Path, required=True, help="a folder with tokenizer.json and a chat template")
    parser.add_argument("--before-src", type=Path, required=True, help="src/ of the code before the change")
    parser.add_argument("--after-src", type=Path, default=Path(__file__).resolve().parents[2] / "src")
    parser.add_argument("--tokens", type=int, nargs="+", default=[10_000, 100_000, 1_000_000, 2_000_000])
    parser.add_argument("--shapes", nargs="+", default=["single", "turns"], choices=["single", "turns"])
    parser.add_argument("--compat", nargs="+", default=["specforge", "speculators"])
    parser.add_argument("--turn-tokens", type=int, default=1000)
    parser.add_argument("--max-length", type=int, default=2048)
    parser.add_argument("--mem-cap-gb", type=float, default=4.0)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--before-up-to", type=int, default=2_000_000, help="skip the old code past this size")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    ratio_chars = chars_per_token(args.target)
    rows, failures = [], []
    print("| line | tokens | --compat | before | after | before/after (time / memory) |\n|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as work:
        for shape in args.shapes:
            for tokens in args.tokens:
                line = Path(work) / f"{shape}-{tokens}.jsonl"
                write_line(line, shape, tokens, args.turn_tokens, ratio_chars)
                for compat in args.compat:
                    common = (args.target, line, compat, args.max_length, args.mem_cap_gb, args.timeout)
                    before = measure(args.before_src, *common) if tokens <= args.before_up_to else None
                    after = measure(args.after_src, *common)
                    if before and not before["status"] and not after["status"] \
                            and before["counts"] != after["counts"]:
                        failures.append(f"{shape} {tokens} {compat}: counts differ")
                    rows.append({"shape": shape, "tokens": tokens, "compat": compat, "before": before,
                                 "after": after, "line_mb": line.stat().st_size / 1e6})
                    print(f"| {shape} ({rows[-1]['line_mb']:.2f} MB) | ~{tokens:,} | {compat} | {cell(before)} | "
                          f"{cell(after)} | {ratio(before, after)} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"chars_per_token": ratio_chars, "rows": rows}, indent=1))
    if failures:
        sys.exit("counts differ between before and after: " + "; ".join(failures))


if __name__ == "__main__":
    main()
