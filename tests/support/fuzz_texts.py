"""The text fuzz family (issue 33): prompts, conversations (corpora) and documents, the JSONL files a user hands to
`bench --prompts`, `bench --context-lengths --documents`, `vocab-map build` and `vocab-map coverage`, damaged in their
encoding (UTF-16 with its ff fe BOM, invalid bytes, Latin-1), line lengths (long lines, bounded by the run's memory
limit), nesting, row types and sizes.

The oracle reads the bytes itself: a file that is not UTF-8, a line that is not a JSON object, or a row whose known key
holds the wrong type must be refused (accepting it means the command read something the bytes do not say); a
command that succeeds must report plausible numbers (support/fuzz_pair.plausible_bench) or write a valid map."""

from __future__ import annotations

import codecs
import json
import random
from dataclasses import dataclass
from pathlib import Path

from support.fuzz_family import Family, Run
from support.fuzz_maps import file_name, good_ids, truth_problem, write_map
from support.fuzz_pair import Pair, bench_args, build_pair, plausible_bench

# What each key of a row must hold; a row of these keys with another type must be refused, never skipped or guessed.
ROW_TYPES = {"prompt": str, "turns": list, "prompt_ids": list, "conversations": list, "messages": list,
             "context": str, "question": str, "text": str}


@dataclass(frozen=True)
class TextFixtures:
    pair: Pair
    token_map: Path  # a valid map for coverage --map


def build(root: Path) -> TextFixtures:
    pair = build_pair(root)
    return TextFixtures(pair, write_map(root, "sglang", good_ids(random.Random(0), 32)))


def decoded(data: bytes) -> str:
    """UTF-8, one leading byte-order mark dropped: io/text.py's documented decision (Windows editors write one)."""
    return data.removeprefix(codecs.BOM_UTF8).decode("utf-8")


def bytes_problem(data: bytes) -> str | None:
    """Why these bytes are not rows of JSON objects with well-typed known keys (None: they are)."""
    try:
        text = decoded(data)
    except UnicodeDecodeError as error:
        return f"not UTF-8 (byte {error.start})"
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            return f"line {n} is not JSON"
        if not isinstance(row, dict):
            return f"line {n} is a {type(row).__name__}, not an object"
        wrong = [k for k, t in ROW_TYPES.items() if k in row and not isinstance(row[k], t)]
        if wrong:
            return f"line {n}: {wrong[0]} holds a {type(row[wrong[0]]).__name__}"
    return None


def rows_in(data: bytes) -> int:
    return sum(1 for line in decoded(data).splitlines() if line.strip())


# ---- the commands ---------------------------------------------------------------------------------------------------
def command(rng: random.Random, fx: TextFixtures, folder: Path, path: Path, kind: str, what: str,
            which: str | None = None, must_succeed: bool = False) -> Run:
    """Read `path` (a `kind` file: prompts, corpus or documents) with one of the commands that take it."""
    pair, data = fx.pair, path.read_bytes()
    problem = bytes_problem(data)
    which = which or rng.choice({"prompts": ["bench", "coverage"], "corpus": ["build", "coverage-corpus"],
                                 "documents": ["context"]}[kind])
    out, cache = folder / "out", folder / "cache"
    compat = rng.choice(["specforge", "speculators", "modelopt"])
    argv = {
        "bench": bench_args(pair, "--prompts", str(path)),
        "context": bench_args(pair, "--context-lengths", "64", "--documents", str(path), "--documents-per-bucket",
                              "1"),
        "coverage": ["vocab-map", "coverage", "-t", str(pair.target), "--prompts", str(path), "--map",
                     str(fx.token_map), "--max-new-tokens", "4", "--json", "-q"],
        "coverage-corpus": ["vocab-map", "coverage", "-t", str(pair.target), "--prompts", str(pair.prompts),
                            "--corpus", str(path), "-n", "4", "--compat", compat, "--cache-dir", str(cache),
                            "--max-new-tokens", "4", "--json", "-q"],
        "build": ["vocab-map", "build", "-t", str(pair.target), "--prompts", str(path), "-n", "4", "--compat",
                  compat, "--cache-dir", str(cache), "-o", str(out), "--format", "sglang", "-q"],
    }[which]

    def judge(outcome) -> str | None:
        if outcome.exit_code != 0:
            return f"exit {outcome.exit_code}: {outcome.stderr[-300:]!r}"
        if problem:
            return f"accepted a file that is {problem}"
        if which == "bench":
            return plausible_bench(outcome.stdout, prompts=rows_in(data))
        if which == "context":
            return plausible_bench(outcome.stdout)
        if which == "build":
            return truth_problem(out / file_name("sglang", 4), "sglang", 256, written=True)[0]
        return coverage_problem(outcome.stdout)

    inputs = [path, pair.target, pair.head, fx.token_map, pair.prompts]
    return Run(f"{kind} file: {what}; {which}", argv, inputs, [out], judge, must_succeed=must_succeed)


def coverage_problem(stdout: str) -> str | None:
    try:
        rows = json.loads(stdout)["rows"]
    except (ValueError, KeyError) as error:
        return f"no coverage report ({error})"
    bad = [r for r in rows if r["outside_share"] is not None and not 0 <= r["outside_share"] <= 1]
    return f"a share outside [0, 1]: {bad[0]}" if bad else None


# ---- the rows and their damage --------------------------------------------------------------------------------------
def words(rng: random.Random, n: int) -> str:
    return " ".join(f"t{rng.randrange(6, 256)}" for _ in range(n))


def good_row(rng: random.Random, kind: str, n: int = 6) -> dict:
    if kind == "prompts":
        return rng.choice([{"prompt": words(rng, n)}, {"turns": [words(rng, n)]}])  # (coverage needs text)
    if kind == "corpus":
        return rng.choice([{"conversations": [{"from": "human", "value": words(rng, n)},
                                              {"from": "gpt", "value": words(rng, n)}]},
                           {"messages": [{"role": "user", "content": words(rng, n)},
                                         {"role": "assistant", "content": words(rng, n)}]}])
    return rng.choice([{"context": words(rng, max(n, 120)), "question": words(rng, 3)}, {"text": words(rng, 150)}])


def lines(rows: list) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def write(folder: Path, kind: str, data: bytes | str) -> Path:
    path = folder / f"{kind}.jsonl"
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def pick_kind(rng: random.Random) -> str:
    return rng.choice(["prompts", "corpus", "documents"])


def undamaged(rng, fx: TextFixtures, folder: Path) -> Run:
    kind = pick_kind(rng)
    rows = [good_row(rng, kind) for _ in range(rng.randint(1, 3))]
    return command(rng, fx, folder, write(folder, kind, lines(rows)), kind, "undamaged", must_succeed=True)


def encoding(rng, fx: TextFixtures, folder: Path) -> Run:
    kind = pick_kind(rng)
    text = lines([good_row(rng, kind) | {"note": "café"} for _ in range(2)])
    how = rng.choice(["utf-16", "utf-16-be", "utf-8-sig", "latin-1", "invalid byte", "nul byte", "crlf"])
    data = {"utf-16": lambda: text.encode("utf-16"), "utf-16-be": lambda: text.encode("utf-16-be"),
            "utf-8-sig": lambda: text.encode("utf-8-sig"), "latin-1": lambda: text.encode("latin-1"),
            "invalid byte": lambda: text.encode().replace(b"t", b"\xff", 1), "nul byte": lambda: b"\0" + text.encode(),
            "crlf": lambda: text.replace("\n", "\r\n").encode()}[how]()
    return command(rng, fx, folder, write(folder, kind, data), kind, f"encoded {how}")


def long_line(rng, fx: TextFixtures, folder: Path, tokens: int | None = None) -> Run:
    kind = pick_kind(rng)
    tokens = tokens or rng.choice([2_000, 5_000, 20_000])  # longer: the seed (2M) and t29-bounded's benchmark
    return command(rng, fx, folder, write(folder, kind, lines([good_row(rng, kind, tokens)])), kind,
                   f"one line of {tokens} tokens")


def nesting(rng, fx: TextFixtures, folder: Path) -> Run:
    kind, depth = pick_kind(rng), rng.choice([50, 10_000, 200_000])
    key = rng.choice(sorted(ROW_TYPES))
    row = '{"' + key + '": ' + "[" * depth + "]" * depth + "}\n"
    return command(rng, fx, folder, write(folder, kind, row), kind, f"{key} nested {depth} deep")


def wrong_types(rng, fx: TextFixtures, folder: Path) -> Run:
    kind = pick_kind(rng)
    row = rng.choice([{"conversations": 5}, {"messages": "hi"}, {"prompt": 5}, {"prompt": None}, {"turns": "t5"},
                      {"turns": [5]}, {"prompt_ids": [1.5]}, {"prompt_ids": [-1]}, {"prompt_ids": [10**30]},
                      {"prompt_ids": "t5"}, {"context": ["t5"], "question": "t6"}, {"text": 7}, [1, 2], "t5", 5,
                      None, {"conversations": [5]}, {"conversations": [{"from": "gpt"}]},
                      {"messages": [{"role": 5, "content": "t5"}]}, {}, {"other": "t5"}])
    rows = [good_row(rng, kind), row] if rng.random() < 0.5 else [row]
    return command(rng, fx, folder, write(folder, kind, lines(rows)), kind, f"a row {json.dumps(row)[:60]}")


def sizes(rng, fx: TextFixtures, folder: Path) -> Run:
    kind = pick_kind(rng)
    how = rng.choice(["empty", "blank lines", "no final newline", "many rows", "cut mid-row", "empty strings"])
    rows = [good_row(rng, kind) for _ in range(40 if how == "many rows" else 2)]
    text = {"empty": "", "blank lines": "\n \n\n", "no final newline": lines(rows).rstrip("\n"),
            "many rows": lines(rows), "cut mid-row": lines(rows)[:-7],
            "empty strings": lines([{"prompt": ""}, {"text": ""}, {"turns": [""]}])}[how]
    return command(rng, fx, folder, write(folder, kind, text), kind, how)


MUTATIONS = {"undamaged": undamaged, "encoding": encoding, "long-line": long_line, "nesting": nesting,
             "wrong-types": wrong_types, "sizes": sizes}
FAMILY = Family("texts", build, MUTATIONS, {"undamaged": 0.5, "long-line": 0.5})


# ---- the seeds: issue 29's text cases -------------------------------------------------------------------------------
def seed_bom(which: str, kind: str):
    def run(rng, fx: TextFixtures, folder: Path) -> Run:
        data = lines([good_row(rng, kind) for _ in range(2)]).encode("utf-16")  # starts with ff fe
        run = command(rng, fx, folder, write(folder, kind, data), kind, "ff fe (UTF-16)", which=which)
        run.expect = r"(?is)^(?!.*chat template).*utf-8"  # says the file is not UTF-8, never blames the template
        return run
    return run


def seed_long_line(rng, fx: TextFixtures, folder: Path) -> Run:
    row = {"conversations": [{"from": "human", "value": "t10"}, {"from": "gpt", "value": words(rng, 2_000_000)}]}
    return command(rng, fx, folder, write(folder, "corpus", lines([row])), "corpus", "a 2M-token line",
                   which="build")


def seed_conversations_5(rng, fx: TextFixtures, folder: Path) -> Run:
    run = command(rng, fx, folder, write(folder, "corpus", lines([{"conversations": 5}])), "corpus",
                  '{"conversations": 5}', which="build")
    run.expect = r"(?s)^(?!.*\('prompt'\)).*conversations"  # names the key, not "not a conversation ('prompt')"
    return run


def seed_nesting(which: str, kind: str):
    def run(rng, fx: TextFixtures, folder: Path) -> Run:
        row = '{"prompt": ' + "[" * 200_000 + "]" * 200_000 + "}\n"  # past Python's recursion limit in json
        run = command(rng, fx, folder, write(folder, kind, row), kind, "a row nested 200000 deep", which=which)
        run.expect = r"nested too deeply"
        return run
    return run


SEEDS = {"ff fe prompts (bench)": seed_bom("bench", "prompts"),
         "ff fe documents (context bench)": seed_bom("context", "documents"),
         "ff fe prompts (coverage)": seed_bom("coverage", "prompts"),
         "ff fe corpus (build)": seed_bom("build", "corpus"),
         "2M-token line (build)": seed_long_line,
         '{"conversations": 5} (build)': seed_conversations_5,
         "nested 200000 deep (bench)": seed_nesting("bench", "prompts"),
         "nested 200000 deep (context bench)": seed_nesting("context", "documents"),
         "nested 200000 deep (build)": seed_nesting("build", "corpus")}
