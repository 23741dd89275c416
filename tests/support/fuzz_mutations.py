"""The mutations of the input fuzzer (support/fuzz.py): each takes a random generator and the copied
inputs of one conversion, damages one file in place, and says what it did and which source tensors it may have
changed (for the oracle)."""

from __future__ import annotations

import json
import pickle
import random
import struct
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


@dataclass
class Mutation:
    what: str
    file: Path | None = None  # the file changed (None: only added or removed files)
    touched: set[str] = field(default_factory=set)  # source tensor names whose bytes or header may have changed


# ---- safetensors files ----------------------------------------------------------------------------------------------
def split(path: Path) -> tuple[dict, bytes]:
    data = path.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n]), data[8 + n:]


def join(path: Path, header: dict | bytes, body: bytes) -> None:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + body)


def tensor_names(header: dict) -> list[str]:
    return sorted(n for n in header if n != "__metadata__")


def odd_value(rng: random.Random) -> object:
    return rng.choice([None, True, -1, 1.5, "7", [], {}, [1, 2, 3], 2**64, -(2**63), float("1e300"), "F32", [[4]]])


def mutate_offsets(rng, header, name) -> str:
    entry, others = header[name], [n for n in tensor_names(header) if n != name]
    begin, end = entry["data_offsets"]
    choice = rng.randrange(7)
    if choice == 0 and others:  # overlap, or exact swap of two entries of the same size (a valid file)
        other = rng.choice(others)
        entry["data_offsets"], header[other]["data_offsets"] = header[other]["data_offsets"], [begin, end]
        return f"swap offsets of {name} and {other}"
    if choice == 1 and others:
        entry["data_offsets"] = list(header[rng.choice(others)]["data_offsets"])
        return f"{name} points at another tensor's bytes"
    if choice == 2:
        delta = rng.choice([-8, -4, -1, 1, 2, 4, 8])
        entry["data_offsets"] = [begin + delta, end + delta]
        return f"{name} offsets shifted by {delta}"
    if choice == 3:
        entry["data_offsets"] = [begin, end + rng.choice([-4, -1, 1, 4])]
        return f"{name} end offset changed"
    if choice == 4:
        entry["data_offsets"] = [end, begin]
        return f"{name} offsets reversed"
    if choice == 5:
        entry["data_offsets"] = rng.choice([[begin], [begin, end, end], [float(begin), float(end)], [str(begin), end],
                                            [-begin - 1, end], None, {"0": begin}])
        return f"{name} data_offsets = {entry['data_offsets']!r}"
    entry["data_offsets"] = [begin + 2**64, end + 2**64]
    return f"{name} offsets past 2**64"


def mutate_shape(rng, header, name) -> str:
    shape = header[name]["shape"]
    options = [[d + 0.5 for d in shape], [-d for d in shape], shape + [1], [1] + shape, [], list(reversed(shape)),
               [True] * len(shape), [d * 2 for d in shape], [str(d) for d in shape], [2**40] + shape[1:], None,
               [d // 2 for d in shape] + [2] if shape and shape[-1] % 2 == 0 else shape + [0]]
    header[name]["shape"] = rng.choice(options)
    return f"{name} shape {shape} -> {header[name]['shape']!r}"


def mutate_dtype(rng, header, name) -> str:
    old = header[name]["dtype"]
    header[name]["dtype"] = rng.choice(["F33", "f32", "", None, 4, "I32", "F16", "BF16", "U8", "F8_E4M3", "F64",
                                        "BOOL", "C64", "F4"])
    return f"{name} dtype {old} -> {header[name]['dtype']!r}"


def mutate_entry(rng, header, name) -> str:
    choice = rng.randrange(6)
    if choice == 0:
        del header[name]
        return f"entry {name} deleted"
    if choice == 1:
        header[name + ".extra"] = dict(header[name])
        return f"entry {name} duplicated under another name"
    if choice == 2:
        header[name.upper() + "x"] = header.pop(name)
        return f"entry {name} renamed"
    if choice == 3:
        header[name] = odd_value(rng)
        return f"entry {name} = {header[name]!r}"
    if choice == 4:
        header[name][rng.choice(["dtype", "shape", "data_offsets"])] = odd_value(rng)
        return f"entry {name}: a field replaced by an odd value"
    header[name]["extra_field"] = odd_value(rng)  # safetensors ignores unknown fields: still valid
    return f"entry {name}: an unknown field added"


def mutate_metadata(rng, header) -> str:
    header["__metadata__"] = rng.choice([None, {"format": 1}, {"format": None}, [], "pt", {"a": {"b": "c"}},
                                         {"format": "pt", "note": "x" * 1000}, {}])
    return f"__metadata__ = {header['__metadata__']!r:.60}"


def mutate_safetensors(rng: random.Random, path: Path) -> Mutation:
    header, body = split(path)
    names = tensor_names(header)
    name = rng.choice(names)
    kind = rng.choice(["offsets", "shape", "dtype", "entry", "metadata", "length", "nesting", "header-bytes",
                       "truncate", "append", "data-bits", "nonfinite", "nonfinite", "data-bits"])
    if kind in ("offsets", "shape", "dtype", "entry"):
        what = {"offsets": mutate_offsets, "shape": mutate_shape, "dtype": mutate_dtype,
                "entry": mutate_entry}[kind](rng, header, name)
        join(path, header, body)
        return Mutation(what, path, set(names))
    if kind == "metadata":
        what = mutate_metadata(rng, header)
        join(path, header, body)
        return Mutation(what, path, set())
    raw_header = json.dumps(header).encode()
    if kind == "length":
        n = rng.choice([0, 1, len(raw_header) - 1, len(raw_header) + 1, 2**63, 100 * 1024 * 1024 + 1,
                        len(raw_header) + len(body) + 1])
        path.write_bytes(struct.pack("<Q", n) + raw_header + body)
        return Mutation(f"header length field = {n}", path, set(names))
    if kind == "nesting":
        depth = rng.choice([50, 5_000, 100_000, 1_000_000])
        deep = b"[" * depth + b"]" * depth
        where = rng.choice(["value", "metadata", "top"])
        raw = (b'{"x": ' + deep + b"," + raw_header[1:] if where == "value" else
               b'{"__metadata__": {"a": ' + deep + b"}," + raw_header[1:].replace(b'"__metadata__"', b'"m"', 1)
               if where == "metadata" else deep)
        join(path, raw, body)
        return Mutation(f"{where} nested {depth} deep in the header", path, set(names))
    if kind == "header-bytes":
        raw = bytearray(raw_header)
        for _ in range(rng.randint(1, 3)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        join(path, bytes(raw), body)
        return Mutation("random bytes of the header JSON changed", path, set(names))
    if kind == "truncate":
        data = path.read_bytes()
        cut = rng.choice([0, 4, 8, 8 + len(raw_header) // 2, len(data) - 1, rng.randrange(len(data))])
        path.write_bytes(data[:cut])
        return Mutation(f"truncated to {cut} of {len(data)} bytes", path, set(names))
    if kind == "append":
        with open(path, "ab") as f:
            f.write(bytes(rng.randrange(256) for _ in range(rng.choice([1, 7, 8, 4096]))))
        return Mutation("bytes appended", path, set(names))
    if kind == "data-bits":  # a valid file with other values: must convert to exactly them (or refuse NaN/Inf)
        entry = header[name]
        begin, end = entry["data_offsets"]
        if end == begin:
            return Mutation("nothing (empty tensor)", path, set())
        body = bytearray(body)
        for _ in range(rng.randint(1, 4)):
            body[rng.randrange(begin, end)] ^= 1 << rng.randrange(8)
        join(path, header, bytes(body))
        return Mutation(f"bits flipped in {name}'s data", path, {name})
    return nonfinite_safetensors(rng, path)


def nonfinite_safetensors(rng: random.Random, path: Path) -> Mutation:
    tensors = load_file(path)
    floats = [n for n, t in tensors.items() if t.dtype.is_floating_point and t.numel()]
    name = rng.choice(floats)
    poison(rng, tensors[name])
    save_file(tensors, path, metadata={"format": "pt"})
    return Mutation(f"NaN/Inf written into {name}", path, {name})


def poison(rng: random.Random, t: torch.Tensor) -> None:
    flat = t.view(-1)
    for _ in range(rng.choice([1, 1, 3, 50])):
        flat[rng.randrange(flat.numel())] = rng.choice([float("nan"), float("inf"), -float("inf")])


# ---- pickles, JSON, files -------------------------------------------------------------------------------------------
class Payload:
    def __reduce__(self):
        return (print, ("unsafe pickle executed",))


def mutate_pickle(rng: random.Random, path: Path) -> Mutation:
    kind = rng.choice(["bits", "truncate", "nonfinite", "nonfinite", "not-tensors", "unsafe", "nested", "empty"])
    data = path.read_bytes()
    if kind == "bits":
        raw = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(raw))
        return Mutation("bits flipped in the pickle", path, {"*"})
    if kind == "truncate":
        path.write_bytes(data[:rng.randrange(len(data))])
        return Mutation("pickle truncated", path, {"*"})
    state = torch.load(path, weights_only=True)
    if kind == "nonfinite":
        name = rng.choice([n for n, t in state.items() if t.dtype.is_floating_point])
        poison(rng, state[name])
        torch.save(state, path)
        return Mutation(f"NaN/Inf written into {name} (pickle)", path, {name})
    if kind == "not-tensors":
        state[rng.choice(sorted(state))] = rng.choice([1, "x", [1.0], {"a": torch.zeros(1)}])
        torch.save(state, path)
        return Mutation("a pickle value that is not a tensor", path, {"*"})
    if kind == "unsafe":
        with open(path, "wb") as f:
            pickle.dump({"fc.weight": Payload()}, f)
        return Mutation("a pickle that needs arbitrary unpickling", path, {"*"})
    if kind == "nested":
        torch.save({"state_dict": state}, path)  # the converter unwraps it: still the same tensors
        return Mutation("state dict nested under 'state_dict'", path, set())
    path.write_bytes(b"")
    return Mutation("empty pickle", path, {"*"})


def mutate_json(rng: random.Random, path: Path) -> Mutation:
    text = path.read_text()
    value = json.loads(text)
    kind = rng.choice(["delete", "odd", "invalid", "nested", "not-object", "bytes", "index-map"])
    if kind == "index-map" and "weight_map" in value:
        wm = value["weight_map"]
        name = rng.choice(sorted(wm))
        choice = rng.randrange(4)
        if choice == 0:
            wm[name] = "missing.safetensors"
        elif choice == 1:
            del wm[name]
        elif choice == 2:
            wm[name] = rng.choice(sorted(set(wm.values())))
        else:
            value["weight_map"] = odd_value(rng)
        path.write_text(json.dumps(value))
        return Mutation(f"index weight_map changed ({choice}) at {name}", path, {"*"})
    if kind in ("delete", "odd", "index-map"):
        key = rng.choice(sorted(value))
        if kind == "delete":
            del value[key]
        else:
            value[key] = odd_value(rng)
        path.write_text(json.dumps(value))
        return Mutation(f"{path.name}: {key} {'deleted' if kind == 'delete' else '= ' + repr(value[key])[:40]}",
                        path, {"*"})
    if kind == "invalid":
        path.write_text(text[: rng.randrange(len(text))])
        return Mutation(f"{path.name} cut short", path, {"*"})
    if kind == "nested":
        depth = rng.choice([100, 100_000])
        path.write_text('{"x": ' + "[" * depth + "]" * depth + ', "y": 1}')
        return Mutation(f"{path.name} nested {depth} deep", path, {"*"})
    if kind == "not-object":
        path.write_text(rng.choice(["[]", "1", '"x"', "null"]))
        return Mutation(f"{path.name} not an object", path, {"*"})
    raw = bytearray(path.read_bytes())
    raw[rng.randrange(len(raw))] = rng.randrange(256)
    path.write_bytes(bytes(raw))
    return Mutation(f"a byte of {path.name} changed", path, {"*"})


def mutate_files(rng: random.Random, folder: Path) -> Mutation:
    files = sorted(p for p in folder.iterdir() if p.is_file())
    kind = rng.choice(["delete", "extra", "empty", "dir"])
    victim = rng.choice(files)
    if kind == "delete":
        victim.unlink()
        return Mutation(f"{victim.name} deleted", None, {"*"})
    if kind == "extra":
        name = rng.choice(["model.safetensors", "pytorch_model.bin", "model.safetensors.index.json", "junk.bin",
                           "model-00009-of-00009.safetensors"])
        if (folder / name).exists():
            name = "junk.bin"
        (folder / name).write_bytes(bytes(rng.randrange(256) for _ in range(rng.choice([0, 8, 100]))))
        return Mutation(f"extra file {name}", None, {"*"})
    if kind == "empty":
        victim.write_bytes(b"")
        return Mutation(f"{victim.name} emptied", victim, {"*"})
    victim.unlink()
    victim.mkdir()
    return Mutation(f"{victim.name} replaced by a folder", None, {"*"})


def mutate(rng: random.Random, folders: list[Path]) -> Mutation:
    """One mutation of one file (or the file list) of one of `folders`."""
    folder = rng.choice(folders)
    files = sorted(p for p in folder.iterdir() if p.is_file())
    weights = [p for p in files if p.suffix in (".safetensors", ".bin")]
    roll = rng.random()
    if roll < 0.65 and weights:
        path = rng.choice(weights)
        return mutate_safetensors(rng, path) if path.suffix == ".safetensors" else mutate_pickle(rng, path)
    if roll < 0.9:
        return mutate_json(rng, rng.choice([p for p in files if p.suffix == ".json"]))
    return mutate_files(rng, folder)
