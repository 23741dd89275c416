"""The vocab-map fuzz family (issue 33): a map file in every format vocab/formats.py reads (SpecForge .pt,
speculators .npy pair, ModelOpt d2t .pt, SGLang token map .pt, safetensors), written with the formats' own libraries
(never ours) and damaged: dtypes, shapes, ids (negative, huge, duplicate, past the vocabulary), t2d, empty maps,
truncated / zero-byte / bit-flipped files, pickles of other things and pickles carrying code. Each is read by one of
`vocab-map check` (with and without a vocabulary), `vocab-map convert`, `convert --to sglang --token-map` and
`bench --token-map`.

The oracle reads the file itself (torch.load weights_only / numpy allow_pickle=False / safetensors) and decides from
those values alone whether the map is valid (valid_problem); a command that accepts an invalid map fails, so does
one that refuses an undamaged one, or writes a map other than the file's ids, or runs the code a pickle carries."""

from __future__ import annotations

import random
import warnings
from pathlib import Path

import numpy
import torch
from safetensors.torch import load_file, save_file

from support.fuzz_family import Family, Run
from support.fuzz_pair import VOCAB, Pair, bench_args, build_pair, plausible_bench

FORMATS = ("specforge", "speculators", "modelopt", "sglang", "safetensors")
ID_LIMIT = 2**31  # no vocabulary is larger: engines hold token ids in int32


def is_mask(t2d, written: bool) -> bool:
    """A 1-D bool t2d; one read may also be an integer 0/1 mask (it marks the same ids: vocab/check.py's note
    "t2d-not-bool"), one we wrote must be bool as every trainer writes it."""
    if not isinstance(t2d, torch.Tensor) or t2d.dim() != 1:
        return False
    if t2d.dtype == torch.bool:
        return True
    integer = not (t2d.dtype.is_floating_point or t2d.dtype.is_complex)
    return not written and integer and bool(((t2d == 0) | (t2d == 1)).all())


def valid_problem(d2t, t2d, vocab: int | None, written: bool = False) -> str | None:
    """Why (d2t, t2d) read from the bytes (or `written` by us) is not a usable map over `vocab` (None: unknown)."""
    if not isinstance(d2t, torch.Tensor) or d2t.dim() != 1 or d2t.dtype.is_floating_point or d2t.dtype.is_complex \
            or d2t.dtype == torch.bool:
        return f"d2t is not a 1-D integer tensor ({getattr(d2t, 'dtype', type(d2t).__name__)})"
    if d2t.numel() == 0:
        return "an empty map"
    ids = d2t.to(torch.int64) + torch.arange(d2t.numel())
    if t2d is not None:
        if not is_mask(t2d, written):
            return f"t2d is not a 1-D bool mask ({getattr(t2d, 'dtype', type(t2d).__name__)})"
        t2d = t2d.to(torch.bool)
        if vocab is not None and t2d.numel() != vocab:
            return f"t2d has {t2d.numel()} entries, the vocabulary {vocab}"
        vocab = vocab if vocab is not None else t2d.numel()
    if int(ids.min()) < 0:
        return "a negative id"
    if int(ids.max()) >= (vocab if vocab is not None else ID_LIMIT):
        return f"an id {int(ids.max())} past the vocabulary ({vocab or 'no vocabulary is 2**31'})"
    if ids.unique().numel() != ids.numel():
        return "duplicate ids"
    if t2d is not None and set(t2d.nonzero().flatten().tolist()) != set(ids.tolist()):
        return "t2d disagrees with d2t"
    return None


def read_truth(path: Path, fmt: str):
    """(d2t, t2d) as the format's own library reads the file: SGLang ids are turned into offsets like d2t."""
    if fmt == "speculators":
        t2d_path = path.with_name(path.name.replace("d2t", "t2d"))
        t2d = torch.from_numpy(numpy.load(t2d_path, allow_pickle=False)) if t2d_path.exists() else None
        return torch.from_numpy(numpy.load(path, allow_pickle=False)), t2d
    if fmt == "safetensors":
        tensors = load_file(path)
        return tensors["d2t"], tensors.get("t2d")
    with warnings.catch_warnings():  # torch's note on a bare pickle's protocol: the oracle's own read, not the CLI's
        warnings.simplefilter("ignore", UserWarning)
        data = torch.load(path, map_location="cpu", weights_only=True)
    if fmt == "specforge":
        return data["d2t"], data.get("t2d")
    if isinstance(data, list) and all(type(i) is int for i in data):
        data = torch.tensor(data, dtype=torch.int64)
    if fmt == "sglang" and isinstance(data, torch.Tensor) and data.dim() == 1 and not data.dtype.is_floating_point \
            and data.dtype != torch.bool:
        return data.to(torch.int64) - torch.arange(data.numel()), None
    return data, None


def truth_problem(path: Path, fmt: str, vocab: int | None,
                  written: bool = False) -> tuple[str | None, torch.Tensor | None]:
    """(why the file (one we `written`) is not a valid map, its target ids when it is)."""
    try:
        d2t, t2d = read_truth(path, fmt)
    except Exception as error:  # noqa: BLE001 - the format's own loader refuses it: not a map
        return f"its own loader refuses it ({type(error).__name__})", None
    problem = valid_problem(d2t, t2d, vocab, written)
    return problem, None if problem else d2t.to(torch.int64) + torch.arange(d2t.numel())


# ---- writing a (damaged) map with the formats' own libraries --------------------------------------------------------
def file_name(fmt: str, n: int) -> str:
    return {"specforge": f"vocab_mapping-{n}.pt", "speculators": f"d2t-{n}.npy", "modelopt": f"d2t-{n}.pt",
            "sglang": f"token_map-{n}.pt", "safetensors": f"vocab_map-{n}.safetensors"}[fmt]


def t2d_of(ids: torch.Tensor, vocab: int = VOCAB) -> torch.Tensor:
    mask = torch.zeros(vocab, dtype=torch.bool)
    mask[ids[(ids >= 0) & (ids < vocab)]] = True
    return mask


def write_map(folder: Path, fmt: str, ids: torch.Tensor, t2d: torch.Tensor | None | str = "auto",
              d2t: torch.Tensor | None = None) -> Path:
    """Write target `ids` (or a raw `d2t`) in `fmt` with torch / numpy / safetensors themselves."""
    d2t = d2t if d2t is not None else ids - torch.arange(ids.numel(), dtype=ids.dtype)
    t2d = t2d_of(ids.flatten().to(torch.int64)) if isinstance(t2d, str) else t2d
    path = folder / file_name(fmt, ids.numel())
    if fmt == "specforge":
        torch.save({"d2t": d2t} | ({"t2d": t2d} if t2d is not None else {}), path)
    elif fmt == "speculators":
        numpy.save(path, d2t.numpy())
        if t2d is not None:
            numpy.save(path.with_name(path.name.replace("d2t", "t2d")), t2d.numpy())
    elif fmt == "modelopt":
        torch.save(d2t, path)
    elif fmt == "sglang":
        torch.save(ids, path)
    else:
        save_file({"d2t": d2t.contiguous()} | ({"t2d": t2d.contiguous()} if t2d is not None else {}), str(path))
    return path


def good_ids(rng: random.Random, n: int | None = None) -> torch.Tensor:
    n = n or rng.choice([1, 4, 32, 100])
    ids = rng.sample(range(3, VOCAB), n)
    return torch.tensor(sorted(ids) if rng.random() < 0.7 else ids, dtype=torch.int64)


# ---- the commands that read a map, each with its oracle -------------------------------------------------------------
def command(rng: random.Random, pair: Pair, folder: Path, path: Path, fmt: str, what: str,
            must_succeed: bool = False, which: str | None = None) -> Run:
    which = which or rng.choice(["check", "check-vocab", "check-target", "convert-map", "convert", "bench"])
    inputs = sorted(folder.iterdir()) + [pair.target, pair.head]
    from_args = ["--from", fmt] if fmt in ("modelopt", "sglang") and rng.random() < 0.5 else []
    vocab = VOCAB if which not in ("check",) else None
    problem, ids = truth_problem(path, fmt, vocab)
    out = folder / "out"

    def judge(outcome) -> str | None:
        if outcome.exit_code != 0:
            return f"exit {outcome.exit_code}: {outcome.stderr[-300:]!r}"
        if problem:
            return f"accepted a map that is not valid: {problem}"
        if which == "bench":
            return plausible_bench(outcome.stdout)
        if which == "convert":
            written = torch.load(out / file_name("sglang", ids.numel()), weights_only=True)
            return None if torch.equal(torch.as_tensor(written, dtype=torch.int64), ids) else "token map ids differ"
        if which == "convert-map":
            return converted_problem(out, ids)
        return None

    what = f"{fmt} {path.name}: {what}; {which}"
    if which.startswith("check"):
        extra = {"check": [], "check-vocab": ["--target-vocab-size", str(VOCAB)],
                 "check-target": ["--target", str(pair.target)]}[which]
        return Run(what, ["vocab-map", "check", str(path), *extra, *from_args], inputs, [], judge,
                   must_succeed=must_succeed)
    if which == "convert-map":
        fmt_out = rng.choice(FORMATS)
        return Run(what + f" -> {fmt_out}", ["vocab-map", "convert", str(path), "--format", fmt_out, "-o", str(out),
                                             "-t", str(pair.target), *from_args], inputs, [out], judge,
                   must_succeed=must_succeed and fmt_out not in ("specforge", "speculators"))
    if which == "convert":
        return Run(what, ["convert", str(pair.head), "-t", str(pair.target), "-o", str(out), "--to", "sglang",
                          "--token-map", str(path), "-q"], inputs, [out], judge, must_succeed=must_succeed)
    return Run(what, bench_args(pair, "--prompts", str(pair.prompts), "--token-map", str(path)), inputs, [], judge,
               must_succeed=must_succeed)


def converted_problem(out: Path, ids: torch.Tensor) -> str | None:
    files = sorted(p for p in out.iterdir() if not p.name.startswith(("t2d", "eagle_convert")))
    fmt = {".npy": "speculators", ".safetensors": "safetensors"}.get(files[0].suffix) if files else None
    if fmt is None and files:
        fmt = next(f for f in FORMATS if file_name(f, ids.numel()) == files[0].name)
    if fmt is None:
        return f"no map written in {out}"
    problem, written = truth_problem(files[0], fmt, VOCAB, written=True)
    if problem:
        return f"wrote a map that is not valid: {problem}"
    if not torch.equal(written, ids):
        return f"wrote ids {written.tolist()[:8]}..., the file says {ids.tolist()[:8]}"
    return None


# ---- the mutations --------------------------------------------------------------------------------------------------
def undamaged(rng, pair: Pair, folder: Path) -> Run:
    fmt, ids = rng.choice(FORMATS), good_ids(rng)
    if fmt in ("specforge", "speculators"):
        ids = ids.sort().values
    return command(rng, pair, folder, write_map(folder, fmt, ids), fmt, "undamaged", must_succeed=True)


def bad_ids(rng, pair: Pair, folder: Path, which: str | None = None) -> Run:
    fmt, ids = rng.choice(FORMATS), good_ids(rng, rng.choice([4, 32]))
    how = rng.choice(["negative", "huge", "2**62", "vocab", "duplicate", "empty", "int64 max"])
    i = rng.randrange(ids.numel())
    ids[i] = {"negative": -1 - rng.randrange(5), "huge": 2**31 + rng.randrange(5), "2**62": 2**62, "vocab": VOCAB,
              "duplicate": int(ids[(i + 1) % ids.numel()]), "empty": 0, "int64 max": 2**63 - 1}[how]
    if how == "empty":
        ids = ids[:0]
    t2d = rng.choice(["auto", None])
    return command(rng, pair, folder, write_map(folder, fmt, ids, t2d), fmt, f"an id made {how}", which=which)


def bad_dtype(rng, pair: Pair, folder: Path) -> Run:
    fmt, ids = rng.choice(FORMATS), good_ids(rng, 16)
    dtype = rng.choice([torch.float32, torch.float64, torch.int32, torch.int16, torch.uint8, torch.bool,
                        torch.bfloat16, torch.int8])
    if fmt == "speculators" and dtype == torch.bfloat16:
        dtype = torch.float16  # numpy has no bfloat16
    d2t = (ids - torch.arange(ids.numel())).to(dtype) if dtype != torch.uint8 else None
    ids = ids.to(dtype) if fmt == "sglang" else ids
    path = write_map(folder, fmt, ids, "auto", d2t)
    return command(rng, pair, folder, path, fmt, f"stored as {dtype}")


def bad_shape(rng, pair: Pair, folder: Path) -> Run:
    fmt, ids = rng.choice(FORMATS), good_ids(rng, 16)
    shaped = rng.choice([ids.view(4, 4), ids.view(16, 1), ids[:1].view(()), ids.view(2, 2, 4)])
    d2t = shaped - torch.arange(shaped.numel()).view(shaped.shape)
    path = write_map(folder, fmt, shaped if fmt == "sglang" else ids, "auto", d2t)  # SGLang stores the ids alone
    return command(rng, pair, folder, path, fmt, f"shape {list(shaped.shape)}")


def bad_t2d(rng, pair: Pair, folder: Path) -> Run:
    fmt, ids = rng.choice(["specforge", "speculators", "safetensors"]), good_ids(rng, 16)
    how = rng.choice(["int64 0/1", "4 entries", "longer", "one more id", "one less id", "2-D", "float"])
    mask = t2d_of(ids)
    if how == "one more id":
        mask[[i for i in range(VOCAB) if not mask[i]][0]] = True
    elif how == "one less id":
        mask[int(ids[0])] = False
    t2d = {"int64 0/1": mask.to(torch.int64), "4 entries": mask[:4], "longer": torch.cat([mask, mask]),
           "2-D": mask.view(16, -1), "float": mask.float()}.get(how, mask)
    return command(rng, pair, folder, write_map(folder, fmt, ids, t2d), fmt, f"t2d {how}")


def damaged_bytes(rng, pair: Pair, folder: Path) -> Run:
    fmt, ids = rng.choice(FORMATS), good_ids(rng, 32).sort().values
    path = write_map(folder, fmt, ids)
    data = bytearray(path.read_bytes())
    how = rng.choice(["zero-byte", "truncated", "bits", "appended", "header"])
    if how == "zero-byte":
        data = bytearray()
    elif how == "truncated":
        data = data[:rng.randrange(len(data))]
    elif how == "bits":
        for _ in range(rng.randint(1, 6)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif how == "appended":
        data += bytes(rng.randrange(256) for _ in range(rng.choice([1, 8, 300])))
    else:
        data[:8] = bytes(rng.randrange(256) for _ in range(8))
    path.write_bytes(bytes(data))
    return command(rng, pair, folder, path, fmt, f"file {how}")


class CodePickle:
    """A pickle whose loading creates a marker file: a reader that runs pickled code leaves the marker behind."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def other_pickles(rng, pair: Pair, folder: Path) -> Run:
    fmt = rng.choice(["specforge", "modelopt", "sglang"])
    path = folder / file_name(fmt, 8)
    marker = folder.parent / f"{folder.name}-pickle-ran"
    how = rng.choice(["code", "code in a dict", "list of floats", "list of strings", "dict without d2t", "nested",
                      "None", "a number", "mixed list", "list of bools", "huge list int"])
    value = {"code": CodePickle(marker), "code in a dict": {"d2t": CodePickle(marker)},
             "list of floats": [3.0, 7.5, 9.0], "list of strings": ["t3", "t4"], "dict without d2t": {"ids": [3, 4]},
             "nested": [[3, 4], [5, 6]], "None": None, "a number": 7, "mixed list": [3, 4.0, 5],
             "list of bools": [True, False], "huge list int": [3, 10**30]}[how]
    if how.startswith("code"):
        import pickle

        path.write_bytes(pickle.dumps(value))
    else:
        torch.save(value, path)
    run = command(rng, pair, folder, path, fmt, f"a pickle of {how}")
    run.after = lambda: f"the pickle's code ran ({marker.name} exists)" if marker.exists() else None
    return run


MUTATIONS = {"undamaged": undamaged, "bad-ids": bad_ids, "bad-dtype": bad_dtype, "bad-shape": bad_shape,
             "bad-t2d": bad_t2d, "damaged-bytes": damaged_bytes, "other-pickles": other_pickles}
FAMILY = Family("maps", lambda root: build_pair(root), MUTATIONS, {"undamaged": 0.5, "bad-ids": 2})


# ---- the seeds: issue 29's map cases --------------------------------------------------------------------------------
def seed_negative_id(rng, pair: Pair, folder: Path) -> Run:
    ids = torch.tensor([-1, 5, 9])
    return command(rng, pair, folder, write_map(folder, "sglang", ids), "sglang", "ids [-1, 5, 9]", which="check")


def seed_zero_byte(rng, pair: Pair, folder: Path) -> Run:
    path = folder / "token_map-0.pt"
    path.write_bytes(b"")
    return command(rng, pair, folder, path, "sglang", "a zero-byte .pt", which="check")


def seed_list_of_floats(rng, pair: Pair, folder: Path) -> Run:
    path = folder / "token_map-3.pt"
    torch.save([3.0, 7.5, 9.0], path)
    return command(rng, pair, folder, path, "sglang", "a .pt list of floats", which="check")


# ---- and what the fuzzer found beside them in the same readers -----------------------------------------------------
def seed_pickle(name: str, value, protocol: int | None = None):
    """A .pt holding `value`: torch.save's, or a bare pickle of `protocol` (torch warns about it on stderr)."""
    def run(rng, pair: Pair, folder: Path) -> Run:
        path = folder / "token_map-2.pt"
        if protocol is None:
            torch.save(value, path)
        else:
            import pickle

            path.write_bytes(pickle.dumps(value, protocol=protocol))
        return command(rng, pair, folder, path, "sglang", name, which="check")
    return run


def seed_npy(name: str, damage):
    """A speculators d2t-4.npy written by numpy, then damaged by `damage(bytes) -> bytes`."""
    def run(rng, pair: Pair, folder: Path) -> Run:
        path = write_map(folder, "speculators", torch.tensor([3, 5, 9, 12]), t2d=None)
        path.write_bytes(damage(path.read_bytes()))
        return command(rng, pair, folder, path, "speculators", name, which="check")
    return run


def flip_descr_quote(data: bytes) -> bytes:
    """The quote opening 'descr' in the header, one bit flipped ("'" -> "#"): an unterminated dict numpy's
    tokenizer cannot scan."""
    at = data.index(b"'descr'")
    return data[:at] + bytes([data[at] ^ 0x04]) + data[at + 1:]


SEEDS = {"negative-id map": seed_negative_id, "zero-byte map": seed_zero_byte, "list of floats": seed_list_of_floats,
         "zero-byte .npy": seed_npy("a zero-byte d2t .npy", lambda data: b""),
         ".npy header bit flipped": seed_npy("a bit flipped in the .npy header's quote", flip_descr_quote),
         "id 10**30 in a list": seed_pickle("a .pt list [3, 10**30]", [3, 10**30]),
         "list of bools": seed_pickle("a .pt list [True, False]", [True, False]),
         "pickle protocol 4": seed_pickle("a bare protocol-4 pickle of [3, 4]", [3, 4], protocol=4)}
