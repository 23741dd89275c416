"""Conversion benchmark (issue 6): `eagle-convert convert` vs the hand-made recipe vs the I/O floor, on the shapes of
a real draft/target pair, each run as its own process on the same files with their pages evicted first.

    python scripts/bench/bench_convert.py WORKDIR [--shape llama3-8b|llama2-70b] [--scale 1] [--repeat 3] [--warmup 1]

Builds (once, reused while the parameters match) a target in WORKDIR/<shape>-s<scale>/target and an EAGLE-1 head in
.../draft, then runs, per round: (a) eagle-convert, (b) the recipe, (c) the floor (after --warmup rounds that are
not counted; the order rotates from round to round); compares (a) and (b) tensor by tensor; prints a markdown table (and
--json). For every run: wall time, CPU time, peak RssAnon and VmHWM (sampled
every 10 ms from /proc/PID/status; wait4's ru_maxrss would include the forked parent's), bytes of the target's and
the draft's files resident after the run (all their pages are evicted with POSIX_FADV_DONTNEED before it; counted
with mincore), and the size of the output. The floor (c): read every byte of the draft's weight files and exactly
the LM head's byte range of its target shard, interleaved with writing as many bytes as (a) wrote, to one file, then
fsync: `cat | head -c N > out; sync`. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import mmap
import os
import shutil
import statistics
import struct
import subprocess
import sys
import time
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

MB = 10**6
SAMPLE_S = 0.010
FILL_POOL = 8 << 20  # elements of random values reused, at a per-tensor offset, to fill tensors fast


@dataclass(frozen=True)
class Shape:
    """A real pair at scale 1: sizes from the released configs; shard limit = what their shard sizes imply."""
    name: str
    target: str
    draft: str
    hidden: int
    intermediate: int
    vocab: int
    layers: int
    heads: int
    kv_heads: int
    target_dtype: str
    draft_dtype: str
    fc_bias: bool
    rope_theta: float
    max_positions: int
    shard_bytes: int  # HF save_pretrained's max_shard_size: greedy in state-dict order
    lm_head_alone: bool  # the released index puts lm_head.weight in a shard of its own
    bos: int
    eos: int


SHAPES = {
    # Meta-Llama-3-8B-Instruct: 4 shards of 4.98/5.00/4.92/1.17 GB (5 GB limit, lm_head + model.norm + the tail of
    # layer 31 in the last). yuhuili/EAGLE-LLaMA3-Instruct-8B is a 1.55 GB fp16 pickle with embed_tokens; issue 6 asks
    # for an fp32 one (3.1 GB, the costlier case: every tensor is cast); --draft-dtype float16 gives the real one.
    "llama3-8b": Shape("llama3-8b", "Meta-Llama-3-8B-Instruct", "EAGLE-LLaMA3-Instruct-8B", 4096, 14336, 128256, 32,
                       32, 8, "bfloat16", "float32", False, 500000.0, 8192, 5 * 10**9, False, 128000, 128009),
    # Llama-2-70b-chat-hf: 15 shards of ~9.8-9.97 GB (10 GB limit) and a 524 MB last one holding lm_head alone.
    # yuhuili/EAGLE-llama2-chat-70B: a 5.01 GB fp32 pickle (FloatStorage) with embed_tokens and fc.bias.
    "llama2-70b": Shape("llama2-70b", "Llama-2-70b-chat-hf", "EAGLE-llama2-chat-70B", 8192, 28672, 32000, 80, 64, 8,
                        "float16", "float32", True, 10000.0, 4096, 10 * 10**9, True, 1, 2),
}
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
ST_CODE = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}


def scaled(s: Shape, scale: float, draft_dtype: str | None) -> dict:
    """Dimensions scaled by sqrt(scale) so every matrix (and so every file) scales by ~`scale`; names, layer count
    and shard structure stay the real ones."""
    f = math.sqrt(scale)
    head_dim = max(4, 2 * round(s.hidden // s.heads * f / 2))
    dims = dict(hidden=s.heads * head_dim, head_dim=head_dim, intermediate=max(8, 8 * round(s.intermediate * f / 8)),
                vocab=max(64, round(s.vocab * f)))
    full = _target_bytes(s, s.hidden, s.intermediate, s.vocab, s.hidden // s.heads)
    now = _target_bytes(s, dims["hidden"], dims["intermediate"], dims["vocab"], head_dim)
    return dims | {"shard_bytes": int(s.shard_bytes * now / full), "draft_dtype": draft_dtype or s.draft_dtype}


def _target_bytes(s: Shape, h: int, i: int, v: int, hd: int) -> int:
    kv = s.kv_heads * hd
    return ITEMSIZE[s.target_dtype] * (2 * v * h + s.layers * (2 * h * h + 2 * kv * h + 3 * h * i + 2 * h) + h)


def target_tensors(s: Shape, d: dict) -> list[tuple[str, tuple[int, ...]]]:
    h, i, v, kv = d["hidden"], d["intermediate"], d["vocab"], s.kv_heads * d["head_dim"]
    out = [("model.embed_tokens.weight", (v, h))]
    for n in range(s.layers):
        p = f"model.layers.{n}."
        out += [(p + "self_attn.q_proj.weight", (h, h)), (p + "self_attn.k_proj.weight", (kv, h)),
                (p + "self_attn.v_proj.weight", (kv, h)), (p + "self_attn.o_proj.weight", (h, h)),
                (p + "mlp.gate_proj.weight", (i, h)), (p + "mlp.up_proj.weight", (i, h)),
                (p + "mlp.down_proj.weight", (h, i)), (p + "input_layernorm.weight", (h,)),
                (p + "post_attention_layernorm.weight", (h,))]
    return out + [("model.norm.weight", (h,)), ("lm_head.weight", (v, h))]


def draft_tensors(s: Shape, d: dict) -> list[tuple[str, tuple[int, ...]]]:
    h, i, v, kv = d["hidden"], d["intermediate"], d["vocab"], s.kv_heads * d["head_dim"]
    p = "layers.0."
    out = [("embed_tokens.weight", (v, h)), (p + "self_attn.q_proj.weight", (h, h)),
           (p + "self_attn.k_proj.weight", (kv, h)), (p + "self_attn.v_proj.weight", (kv, h)),
           (p + "self_attn.o_proj.weight", (h, h)), (p + "mlp.gate_proj.weight", (i, h)),
           (p + "mlp.up_proj.weight", (i, h)), (p + "mlp.down_proj.weight", (h, i)),
           (p + "post_attention_layernorm.weight", (h,)), ("fc.weight", (h, 2 * h))]
    return out + ([("fc.bias", (h,))] if s.fc_bias else [])


def nbytes(shape: tuple[int, ...], dtype: str) -> int:
    return math.prod(shape) * ITEMSIZE[dtype]


def shard_greedy(tensors, dtype: str, limit: int, lm_head_alone: bool) -> list[list]:
    shards, size = [[]], 0
    for name, shape in tensors:
        n = nbytes(shape, dtype)
        if shards[-1] and (size + n > limit or (lm_head_alone and name == "lm_head.weight")):
            shards.append([])
            size = 0
        shards[-1].append((name, shape))
        size += n
    return shards


class Filler:
    """Writes plausible values (normal * 0.02, in the tensor's dtype) fast: one random pool per dtype, read
    cyclically from a per-tensor offset, so GBs cost disk time and not minutes of RNG."""

    def __init__(self):
        self.pools: dict[str, memoryview] = {}

    def write(self, f, name: str, shape: tuple[int, ...], dtype: str, skip: int = 0, count: int | None = None) -> None:
        """The bytes of tensor `name`; `skip`/`count`: only bytes [skip, skip + count) of them (a rank's slice)."""
        import torch

        if dtype not in self.pools:
            g = torch.Generator().manual_seed(0)
            pool = (torch.randn(FILL_POOL, generator=g) * 0.02).to(getattr(torch, dtype))
            self.pools[dtype] = memoryview(pool.view(torch.uint8).numpy()).cast("B")
        pool, item = self.pools[dtype], ITEMSIZE[dtype]
        left = nbytes(shape, dtype) - skip if count is None else count
        pos = ((zlib.crc32(name.encode()) % FILL_POOL) * item + skip) % len(pool)
        while left:
            chunk = pool[pos: pos + left]
            f.write(chunk)
            left -= len(chunk)
            pos = 0


def write_safetensors(path: Path, tensors, dtype: str, filler: Filler, data=None) -> None:
    """`data(f, name, shape)` writes a tensor's bytes (default: the filler's)."""
    data = data or (lambda f, name, shape: filler.write(f, name, shape, dtype))
    order = sorted(tensors)  # safetensors' save_file orders same-dtype tensors by name
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in order:
        header[name] = {"dtype": ST_CODE[dtype], "shape": list(shape),
                        "data_offsets": [off, off + nbytes(shape, dtype)]}
        off += nbytes(shape, dtype)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for name, shape in order:
            data(f, name, shape)


VOCAB_SHARDED = ("lm_head.weight", "model.embed_tokens.weight")


def build_ranks(root: Path, s: Shape, d: dict, tp: int) -> Path:
    """The target as vLLM's save_sharded_state writes it at TP=`tp` (model-rank-{r}-part-0.safetensors: the vocab
    padded with zero rows to a multiple of 64 and cut into tp slices; the source's index copied, stale), holding
    the LM head, the embedding and the final norm (what the CPU backend saves of the linear-free part; a GPU save
    would add the sharded layers, which a splice never reads). Each slice's rows are the whole target's same rows,
    so a conversion against it must write the same bytes as one against the whole target."""
    folder = root / f"target-tp{tp}"
    marker = folder / "built.json"
    if marker.exists() and json.loads(marker.read_text()) == {"tp": tp, **d}:
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    v, h, dtype, filler = d["vocab"], d["hidden"], s.target_dtype, Filler()
    rows = -(-v // 64) * 64 // tp
    row_bytes = h * ITEMSIZE[dtype]
    for r in range(tp):
        real = max(0, min(rows, v - r * rows))

        def data(f, name, shape, real=real, r=r):
            if name not in VOCAB_SHARDED:
                return filler.write(f, name, shape, dtype)
            filler.write(f, name, (v, h), dtype, skip=r * rows * row_bytes, count=real * row_bytes)
            f.write(bytes((rows - real) * row_bytes))  # vLLM's zero padding rows

        tensors = [("model.embed_tokens.weight", (rows, h)), ("model.norm.weight", (h,)), ("lm_head.weight", (rows, h))]
        write_safetensors(folder / f"model-rank-{r}-part-0.safetensors", tensors, dtype, filler, data)
    for name in ("config.json", "model.safetensors.index.json"):  # what the save script copies
        shutil.copyfile(root / "target" / name, folder / name)
    os.sync()
    marker.write_text(json.dumps({"tp": tp, **d}))
    return folder


def build(folder: Path, s: Shape, scale: float, draft_dtype: str | None) -> dict:
    d = scaled(s, scale, draft_dtype)
    params = {"shape": s.name, "scale": scale, **d}
    marker = folder / "built.json"
    if marker.exists() and json.loads(marker.read_text()) == params:
        return params
    import torch

    shutil.rmtree(folder, ignore_errors=True)
    tdir, ddir = folder / "target", folder / "draft"
    tdir.mkdir(parents=True)
    ddir.mkdir()
    filler = Filler()
    common = {"hidden_act": "silu", "hidden_size": d["hidden"], "intermediate_size": d["intermediate"],
              "model_type": "llama", "num_attention_heads": s.heads, "num_key_value_heads": s.kv_heads,
              "rms_norm_eps": 1e-5, "rope_theta": s.rope_theta, "vocab_size": d["vocab"], "bos_token_id": s.bos,
              "eos_token_id": s.eos, "tie_word_embeddings": False, "initializer_range": 0.02, "pretraining_tp": 1}
    (tdir / "config.json").write_text(json.dumps(common | {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "max_position_embeddings": s.max_positions,
        "num_hidden_layers": s.layers, "torch_dtype": s.target_dtype}, indent=2))
    tensors = target_tensors(s, d)
    shards = shard_greedy(tensors, s.target_dtype, d["shard_bytes"], s.lm_head_alone)
    weight_map = {}
    for k, group in enumerate(shards):
        rel = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(tdir / rel, group, s.target_dtype, filler)
        weight_map.update({name: rel for name, _ in group})
    (tdir / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": sum(
        nbytes(shape, s.target_dtype) for _, shape in tensors)}, "weight_map": weight_map}, indent=2))
    # SafeAILab EAGLE-1 config: the target family's config, one layer, `bias` = fc bias, a 2048 position limit.
    (ddir / "config.json").write_text(json.dumps(common | {
        "architectures": ["LlamaForCausalLM"], "bias": s.fc_bias, "max_position_embeddings": 2048,
        "num_hidden_layers": 1, "torch_dtype": "float16"}, indent=2))
    # torch.save of tensors backed by file pages (one scratch file each), so the pickle needs no RAM of its size.
    scratch, state = folder / "scratch", {}
    scratch.mkdir()
    for name, shape in draft_tensors(s, d):
        with open(scratch / name, "wb") as f:
            filler.write(f, name, shape, d["draft_dtype"])
        state[name] = torch.from_file(str(scratch / name), shared=False, size=math.prod(shape),
                                      dtype=getattr(torch, d["draft_dtype"])).reshape(shape)
    torch.save(state, ddir / "pytorch_model.bin")
    del state
    shutil.rmtree(scratch)
    os.sync()
    marker.write_text(json.dumps(params))
    return params


# (b) The hand-made recipe, as users write it: plain torch + safetensors.
RECIPE = """
import json, os, sys, torch
from safetensors.torch import load_file, save_file
draft, target, out = sys.argv[1:4]
state = torch.load(f"{draft}/pytorch_model.bin", map_location="cpu", weights_only=True)
index = json.load(open(f"{target}/model.safetensors.index.json"))
state["lm_head.weight"] = load_file(f"{target}/" + index["weight_map"]["lm_head.weight"])["lm_head.weight"]
state = {name: t.to(torch.bfloat16).contiguous() for name, t in state.items()}
config = json.load(open(f"{draft}/config.json"))
fc_bias = config.pop("bias", True)
os.makedirs(out)
save_file(state, f"{out}/model.safetensors", metadata={"format": "pt"})
json.dump({"model_type": "eagle", "model": config, "eagle_fc_bias": fc_bias}, open(f"{out}/config.json", "w"))
"""

# (c) The I/O floor: read what the conversion must read while writing as many bytes as it writes, then fsync.
FLOOR = """
import os, sys
out, total, spans = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
buf = memoryview(bytearray(16 << 20))
os.makedirs(os.path.dirname(out), exist_ok=True)
with open(out, "wb", buffering=0) as w:
    for span in spans:
        path, off, length = span.rsplit(":", 2)
        off, length = int(off), int(length)
        with open(path, "rb", buffering=0) as r:
            whole = off == 0 and length == os.fstat(r.fileno()).st_size  # else: the span, not readahead past it
            os.posix_fadvise(r.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL if whole else os.POSIX_FADV_RANDOM)
            r.seek(off)
            while length:
                n = r.readinto(buf[: min(length, len(buf))])
                length -= n
                k = min(n, total)
                w.write(buf[:k])
                total -= k
    while total:
        total -= w.write(buf[: min(total, len(buf))])
    os.fsync(w.fileno())
"""


def weight_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file())


def evict(folders: list[Path]) -> None:
    os.sync()  # dirty pages cannot be dropped, and a previous run's writeback must not overlap this one
    for folder in folders:
        for p in weight_files(folder):
            fd = os.open(p, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


def resident_bytes(path: Path) -> int:
    """Bytes of `path` in the page cache: mincore over a read-only shared map, which touches no page."""
    size = path.stat().st_size
    if size == 0:
        return 0
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap {path}")
        try:
            pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
            vec = (ctypes.c_ubyte * pages)()
            if _libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore {path}")
            return min((pages - bytes(vec).count(0)) * mmap.PAGESIZE, size)
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


def _status_kb(pid: int, keys=("RssAnon", "VmHWM")) -> dict[str, int]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in keys:
                    out[k] = int(v.split()[0]) * 1024
    except (FileNotFoundError, ProcessLookupError, ValueError):
        pass
    return out


def measure(cmd: list[str], out: Path, draft: Path, target: Path) -> dict:
    evict([draft, target])
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak_anon = peak_hwm = 0
    while True:
        st = _status_kb(proc.pid)
        peak_anon, peak_hwm = max(peak_anon, st.get("RssAnon", 0)), max(peak_hwm, st.get("VmHWM", 0))
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        time.sleep(SAMPLE_S)
    wall = time.perf_counter() - t0
    stderr = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[:3]} failed ({proc.returncode}):\n{stderr}")
    written = sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) if out.is_dir() else out.stat().st_size
    return {"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "rss_anon": peak_anon,
            "vm_hwm": peak_hwm, "load": load,
            "target_read": sum(resident_bytes(p) for p in weight_files(target)),
            "draft_read": sum(resident_bytes(p) for p in weight_files(draft)), "written": written}


def compare(a: Path, b: Path) -> tuple[bool, str]:
    """Every tensor of (a) equals (b)'s: same names, dtypes, shapes and bytes."""
    import torch
    from safetensors import safe_open

    ta, tb = _tensor_files(a), _tensor_files(b)
    if set(ta) != set(tb):
        return False, f"names differ: only in (a) {sorted(set(ta) - set(tb))}, only in (b) {sorted(set(tb) - set(ta))}"
    for name in sorted(ta):
        with safe_open(str(ta[name]), "pt") as fa, safe_open(str(tb[name]), "pt") as fb:
            x, y = fa.get_tensor(name), fb.get_tensor(name)
            if x.dtype != y.dtype or x.shape != y.shape or not torch.equal(x.view(torch.uint8), y.view(torch.uint8)):
                return False, f"{name} differs ({x.dtype} {tuple(x.shape)} vs {y.dtype} {tuple(y.shape)})"
    return True, f"{len(ta)} tensors identical"


def _tensor_files(folder: Path) -> dict[str, Path]:
    from safetensors import safe_open

    out = {}
    for p in sorted(folder.glob("*.safetensors")):
        with safe_open(str(p), "pt") as f:
            out.update({k: p for k in f.keys()})
    return out


def lm_head_span(target: Path) -> tuple[str, int, int]:
    index = json.loads((target / "model.safetensors.index.json").read_text())
    rel = index["weight_map"]["lm_head.weight"]
    with open(target / rel, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        begin, end = json.loads(f.read(n))["lm_head.weight"]["data_offsets"]
    return str(target / rel), 8 + n + begin, end - begin


def machine(workdir: Path) -> str:
    mem = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal"))
    dev = os.stat(workdir).st_dev
    disk = "?"
    for line in open("/proc/self/mountinfo"):
        f = line.split()
        if tuple(map(int, f[2].split(":"))) == (os.major(dev), os.minor(dev)):
            src, fstype = f[-2], f[-3]
            name = Path(src).name.rstrip("0123456789") if not Path(src).name.startswith("nvme") else Path(src).name
            rota = Path(f"/sys/block/{name}/queue/rotational")
            disk = f"{src} ({fstype}, rotational={rota.read_text().strip() if rota.exists() else '?'})"
            break
    return f"{os.cpu_count()} CPUs, {mem / 2**20:.0f} GiB RAM, {disk}, Linux {os.uname().release}"


def largest_tensor(folder: Path) -> int:
    sizes = [0]
    for p in folder.glob("*.safetensors"):
        with open(p, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            sizes += [e["data_offsets"][1] - e["data_offsets"][0] for k, e in json.loads(f.read(n)).items()
                      if k != "__metadata__"]
    return max(sizes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workdir", type=Path)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="llama3-8b")
    ap.add_argument("--scale", type=float, default=1.0, help="bytes of every file x SCALE (default 1: real sizes)")
    ap.add_argument("--draft-dtype", choices=sorted(ITEMSIZE), help="override the head's storage dtype")
    ap.add_argument("--repeat", type=int, default=3, help="counted rounds (default 3); the table shows medians")
    ap.add_argument("--warmup", type=int, default=1, help="rounds run first and not counted (default 1)")
    ap.add_argument("--only", default="convert,recipe,floor", help="comma-separated subset")
    ap.add_argument("--clean", action="store_true", help="delete the built checkpoints at the end")
    ap.add_argument("--json", type=Path, help="also write every run's figures here")
    ap.add_argument("--ranks", type=int, metavar="TP", help="also convert against the target saved per rank at TP")
    args = ap.parse_args()
    s = SHAPES[args.shape]
    root = args.workdir.resolve() / f"{s.name}-s{args.scale:g}{'-' + args.draft_dtype if args.draft_dtype else ''}"
    t = time.perf_counter()
    params = build(root, s, args.scale, args.draft_dtype)
    draft, target = root / "draft", root / "target"
    print(f"inputs ready in {time.perf_counter() - t:.0f}s: {params}", file=sys.stderr)
    exe = Path(sys.executable).parent / "eagle-convert"
    convert = [str(exe)] if exe.exists() else [sys.executable, "-m", "eagle_convert"]
    head = lm_head_span(target)
    spans = [f"{p}:0:{p.stat().st_size}" for p in weight_files(draft) if p.name != "config.json"]
    spans.append(":".join(map(str, head)))
    only = args.only.split(",") + (["ranks"] if args.ranks else [])
    ranked = build_ranks(root, s, params, args.ranks) if args.ranks else None
    runs: dict[str, list[dict]] = {k: [] for k in ("convert", "recipe", "floor", "ranks") if k in only}
    params["largest_output_tensor"] = 0
    written = {"bytes": 0}
    commands = {
        "convert": lambda out: convert + ["convert", str(draft), "--target", str(target), "-o", str(out), "--to",
                                          "vllm-v0", "--dtype", "bfloat16", "--quiet"],
        "recipe": lambda out: [sys.executable, "-c", RECIPE, str(draft), str(target), str(out)],
        "floor": lambda out: [sys.executable, "-c", FLOOR, str(out / "copy.bin"), str(written["bytes"]), *spans],
        "ranks": lambda out: convert + ["convert", str(draft), "--target", str(ranked), "-o", str(out), "--to",
                                        "vllm-v0", "--dtype", "bfloat16", "--quiet"],
    }
    kinds = [k for k in commands if k in runs]
    for r in range(-args.warmup, args.repeat):
        outs = {k: root / f"out-{k}" for k in runs}
        for o in outs.values():
            shutil.rmtree(o, ignore_errors=True)
        # The floor writes as many bytes as a conversion did, so it runs after one in the first round; later rounds
        # rotate the order, so that no run always follows the same one (on this VM the first writes after a pause cost
        # more: freed memory goes back to the host).
        order = kinds if r <= 0 else kinds[r % len(kinds):] + kinds[: r % len(kinds)]
        for kind in order:
            target_file = outs[kind] / "copy.bin" if kind == "floor" else outs[kind]
            result = measure(commands[kind](outs[kind]), target_file, draft, ranked if kind == "ranks" else target)
            if kind not in ("floor", "ranks"):
                written["bytes"] = written["bytes"] or result["written"]
                params["largest_output_tensor"] = params["largest_output_tensor"] or largest_tensor(outs[kind])
            if r >= 0:
                runs[kind].append(result | {"round": r})
        if r == 0 and {"convert", "recipe"} <= set(runs):
            same, why = compare(outs["convert"], outs["recipe"])
            params["identical"] = why if same else f"DIFFERENT: {why}"
            print(f"(a) vs (b): {'IDENTICAL' if same else 'DIFFERENT'}: {why}", file=sys.stderr)
        if r == 0 and {"convert", "ranks"} <= set(runs):
            same, why = compare(outs["convert"], outs["ranks"])
            params["identical_ranks"] = why if same else f"DIFFERENT: {why}"
            print(f"(a) vs (d): {'IDENTICAL' if same else 'DIFFERENT'}: {why}", file=sys.stderr)
        for o in outs.values():
            shutil.rmtree(o, ignore_errors=True)
    params["machine"] = machine(root)
    report(runs, params, head[2], s, args)
    if args.json:
        args.json.write_text(json.dumps({"params": params, "runs": runs, "shape": asdict(s)}, indent=2))
    if args.clean:
        shutil.rmtree(root)
    if any(params.get(k, "").startswith("DIFFERENT") for k in ("identical", "identical_ranks")):
        raise SystemExit(1)


def report(runs: dict[str, list[dict]], params: dict, lm_head: int, s: Shape, args) -> None:
    med = {k: {m: statistics.median(r[m] for r in v) for m in v[0]} | {"rss_anon": max(r["rss_anon"] for r in v),
                                                                       "best_s": min(r["wall_s"] for r in v)}
           for k, v in runs.items() if v}
    biggest = params["largest_output_tensor"]
    floor, recipe = med.get("floor", {}).get("wall_s"), med.get("recipe", {}).get("wall_s")
    print(f"\n{s.name} at --scale {args.scale:g}: draft {params['draft_dtype']}, target {s.target_dtype}; largest "
          f"output tensor {biggest / MB:.1f} MB, LM head {lm_head / MB:.1f} MB; {params['machine']}\n"
          f"medians of {args.repeat} run(s) (best wall in brackets; RssAnon: the max over runs, sampled every "
          f"{SAMPLE_S * 1000:.0f} ms); load = 1-minute load average when each run started\n")
    print("| run | wall s | cpu s | × floor | × recipe | peak RssAnon MB | VmHWM MB | target read MB | draft read MB "
          "| written MB | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    labels = {"convert": "(a) eagle-convert", "recipe": "(b) recipe", "floor": "(c) floor",
              "ranks": f"(d) eagle-convert, TP={args.ranks} rank files"}
    for k, m in med.items():
        ratio = lambda base, m=m: f"{m['wall_s'] / base:.2f}" if base else "-"  # noqa: E731
        print(f"| {labels[k]} | {m['wall_s']:.1f} ({m['best_s']:.1f}) | {m['cpu_s']:.1f} | {ratio(floor)} | "
              f"{ratio(recipe)} | {m['rss_anon'] / MB:.0f} | {m['vm_hwm'] / MB:.0f} | {m['target_read'] / MB:.1f} | "
              f"{m['draft_read'] / MB:.0f} | {m['written'] / MB:.0f} | {m['load']:.2f} |")
    if "convert" not in med:
        return
    m = med["convert"]
    print(f"\n- peak RssAnon {m['rss_anon'] / MB:.0f} MB ≤ largest output tensor + 300 MB = "
          f"{(biggest + 300 * MB) / MB:.0f} MB: {'met' if m['rss_anon'] <= biggest + 300 * MB else 'MISSED'}")
    print(f"- target bytes read {int(m['target_read'])} ≤ LM head + 1 MB = {lm_head + MB} (LM head + "
          f"{(m['target_read'] - lm_head) / 1e3:.0f} KB): {'met' if m['target_read'] <= lm_head + MB else 'MISSED'}")
    if floor:
        best = med["convert"]["best_s"] / med["floor"]["best_s"]
        paired = [a["wall_s"] / b["wall_s"] for a, b in zip(runs["convert"], runs["floor"])]
        print(f"- wall {m['wall_s']:.1f} s ≤ 1.3 × floor = {1.3 * floor:.1f} s: "
              f"{'met' if m['wall_s'] <= 1.3 * floor else 'MISSED'} (best runs: {best:.2f} × floor; per round: "
              f"{', '.join(f'{x:.2f}' for x in paired)})")
    if "identical" in params:
        print(f"- (a) vs (b): {params['identical']}")
    if "ranks" in med:
        d = med["ranks"]
        print(f"- (d) against TP={args.ranks} rank files: peak RssAnon {d['rss_anon'] / MB:.0f} MB = "
              f"{d['rss_anon'] / m['rss_anon']:.2f} × (a)'s; ≤ (a) + one output LM head ({biggest / MB:.0f} MB): "
              f"{'met' if d['rss_anon'] <= m['rss_anon'] + biggest + 50 * MB else 'MISSED'}; wall "
              f"{d['wall_s'] / m['wall_s']:.2f} × (a)'s; target read {d['target_read'] / MB:.1f} MB")
    if "identical_ranks" in params:
        print(f"- (a) vs (d): {params['identical_ranks']}")


if __name__ == "__main__":
    main()
