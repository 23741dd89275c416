"""The streaming path: provenance hashes of exactly the bytes read, byte-for-byte verification of what is written,
and the background warm-up that reads inputs ahead (and, from the CLI, before torch loads)."""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

import eagle_convert
from eagle_convert import errors
from eagle_convert.checkpoint.index import Checkpoint
from eagle_convert.conversion import prefetch as early
from eagle_convert.io import digest as digest_module
from eagle_convert.io import readahead
from eagle_convert.io import write as write_module
from eagle_convert.io.source import LocalSource
from eagle_convert.io.write import same_bytes


def _sha(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_provenance_hashes_are_of_the_source_bytes(pair, tmp_path, dtype):
    target, draft, ttensors = pair(shards=2)
    out = tmp_path / "out"
    eagle_convert.convert(str(draft), str(target), out, dtype=dtype)
    prov = json.loads((out / "eagle_convert.json").read_text())
    draft_tensors = torch.load(draft / "pytorch_model.bin", weights_only=True)
    written = load_file(out / "model.safetensors")
    assert set(prov["tensors"]) == set(written)
    for name, entry in prov["tensors"].items():
        (src,) = entry["sources"]
        expected = ttensors[src["name"]] if src["origin"] == "target" else draft_tensors[src["name"]]
        assert src["sha256"] == _sha(expected), name
        assert "sha256" not in entry  # written bytes are verified, not hashed
        source_dtype = str(expected.dtype).removeprefix("torch.")
        expected_how = "copy" if source_dtype == entry["dtype"] else f"cast {source_dtype} -> {entry['dtype']}"
        assert entry["how"] == expected_how
    assert prov["tensors"]["fc.weight"]["how"] == ("copy" if dtype == "float32" else "cast float32 -> bfloat16")


def test_folded_tensor_records_every_source(pair, tmp_path):
    target, draft, _ = pair(fc_bias=True)
    out = tmp_path / "out"
    eagle_convert.convert(str(draft), str(target), out, to="vllm", fc_bias="fold")
    entry = json.loads((out / "eagle_convert.json").read_text())["tensors"]["embed_tokens.weight"]
    draft_tensors = torch.load(draft / "pytorch_model.bin", weights_only=True)
    assert entry["how"] == "fold_fc_bias"
    assert [(s["name"], s["sha256"]) for s in entry["sources"]] == [
        (n, _sha(draft_tensors[n])) for n in ("embed_tokens.weight", "fc.weight", "fc.bias")]


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 64, 1001])
def test_same_bytes(n):
    a = bytes(range(256)) * 4
    a = a[:n]
    assert same_bytes(memoryview(a), memoryview(bytes(a)))
    for i in {0, n // 2, n - 1} if n else ():
        b = bytearray(a)
        b[i] ^= 1
        assert not same_bytes(memoryview(a), memoryview(bytes(b))), i
    assert not same_bytes(memoryview(a), memoryview(a + b"x"))


def test_output_that_reads_back_differently_is_refused_and_removed(pair, tmp_path, monkeypatch):
    target, draft, _ = pair()
    calls = []

    def corrupted_on_third_chunk(a, b):
        # From the third chunk on every comparison fails, so each writer stops at its first comparison after the
        # third, whenever the other one sets the stop flag: at most one per writer, however the threads are scheduled.
        calls.append(len(a))
        return len(calls) < 3 and same_bytes(a, b)

    monkeypatch.setattr(write_module, "same_bytes", corrupted_on_third_chunk)
    out = tmp_path / "out"
    with pytest.raises(errors.VerificationError, match="does not read back as written"):
        eagle_convert.convert(str(draft), str(target), out)
    assert 3 <= len(calls) <= 4  # two writers: the other one may have compared its next chunk
    assert not out.exists() and not list(tmp_path.glob(".out.*"))


def test_warmer_queues_exact_ranges_once_within_its_budget(tmp_path, monkeypatch):
    f = tmp_path / "weights"
    f.write_bytes(bytes(1_500))
    submitted = []
    real_submit = readahead._submit

    def spy(path, ranges):
        # The shared WARMER's thread, still warming an earlier test's files, looks `_submit` up here too: only
        # this test's file is recorded, anything else is submitted as usual.
        if str(path) == str(f):
            submitted.append((path, ranges))
        else:
            real_submit(path, ranges)

    monkeypatch.setattr(readahead, "_submit", spy)
    monkeypatch.setattr(readahead, "_available_memory", lambda: 2_000)
    warmer = readahead.Warmer()  # budget: half the memory available at the first range, 1000 bytes

    def drained() -> list:
        # The thread marks itself done (under the lock) once its queue is empty, after its last submit.
        deadline = time.monotonic() + 30
        while not warmer.idle():
            assert time.monotonic() < deadline, "the warm-up thread did not drain its queue in 30 s"
            time.sleep(0.01)
        queued = list(submitted)
        submitted.clear()
        return queued

    warmer.add(f, 100, 400)
    warmer.add(f, 200, 100)  # inside a queued range: nothing new
    warmer.add(f, 0, 700)  # 600 bytes of budget left: its first 600 bytes are queued, the rest read on demand
    warmer.add(f, 600, 600)  # no budget left
    assert drained() == [(str(f), [(100, 400)]), (str(f), [(0, 600)])]
    assert warmer.covers(f, 150, 300) and warmer.covers(f, 0, 600) and not warmer.covers(f, 0, 700)
    assert not warmer.covers(f, 700, 500) and not warmer.covers(tmp_path / "other", 150, 10)
    warmer.forget()  # the next conversion: nothing is trusted to be cached, and the budget is measured again
    assert not warmer.covers(f, 150, 300)
    warmer.add(f, 600, 600)
    assert drained() == [(str(f), [(600, 600)])]


def test_reading_state_is_cleared_after_each_conversion(pair):
    target, draft, _ = pair()
    early.start_early_reads(str(draft), str(target))
    assert readahead.WARMER._seen and digest_module.PREHASH._jobs
    with pytest.raises(errors.OutputPathError):
        eagle_convert.convert(str(draft), str(target), draft / "inside")  # fails before writing anything
    assert not readahead.WARMER._seen and not digest_module.PREHASH._jobs


@pytest.mark.parametrize("draft_fmt", ["bin", "safetensors"])
def test_prehashed_draft_gives_the_same_provenance(pair, tmp_path, draft_fmt):
    target, draft, _ = pair(draft_fmt=draft_fmt)
    eagle_convert.convert(str(draft), str(target), tmp_path / "plain")
    early.start_early_reads(str(draft), str(target))
    pending = dict(digest_module.PREHASH._jobs)
    assert len(pending) == len(Checkpoint(LocalSource(draft)).refs()) == 11  # every tensor of the draft, from the file
    eagle_convert.convert(str(draft), str(target), tmp_path / "prehashed")
    assert not set(pending) & set(digest_module.PREHASH._jobs)  # all taken
    records = [json.loads((tmp_path / o / "eagle_convert.json").read_text())["tensors"] for o in ("plain", "prehashed")]
    assert records[0] == records[1]


def test_spans_of_a_mapped_pickle_are_the_tensors_bytes(pair):
    _, draft, _ = pair()
    ckpt = Checkpoint(LocalSource(draft))
    raw = (draft / "pytorch_model.bin").read_bytes()
    refs = ckpt.refs()
    assert len(refs) == 11
    for name, ref in refs.items():
        path, offset, length = ckpt.span(ref)
        assert path == str((draft / "pytorch_model.bin").resolve())
        expected = ckpt.load_pickle(ref.file)[name].contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        assert raw[offset : offset + length] == expected, name


def test_a_changed_file_is_hashed_again(tmp_path):
    f = tmp_path / "w"
    f.write_bytes(b"a" * 100)
    digest_module.PREHASH.start([(str(f), 10, 50)])
    assert digest_module.PREHASH.take(f, 10, 50).hexdigest() == hashlib.sha256(b"a" * 50).hexdigest()
    digest_module.PREHASH.start([(str(f), 10, 50)])
    # Let the background hash of the old bytes finish first: rewriting a file while it is mapped and hashed could
    # fault (SIGBUS) past its new end. Finished is also the harder case: a ready digest of old bytes must be refused.
    _, pending = digest_module.PREHASH._jobs[(os.path.realpath(f), 10, 50)]
    concurrent.futures.wait([pending], timeout=30)
    assert pending.done()
    f.write_bytes(b"b" * 101)
    assert digest_module.PREHASH.take(f, 10, 50) is None
    assert digest_module.PREHASH.take(f, 0, 5) is None  # never queued


def test_cli_starts_reading_the_draft_before_it_imports_torch(pair, tmp_path):
    target, draft, _ = pair()
    script = (
        "import sys\n"
        "import eagle_convert.conversion.prefetch as d\n"
        "seen = []\n"
        "d.WARMER.add_files = lambda paths: seen.append(('torch' in sys.modules, sorted(p.name for p in paths)))\n"
        "start = d.PREHASH.start\n"
        "d.PREHASH.start = lambda ranges: (seen.append(('torch' in sys.modules, len(ranges))), start(ranges))\n"
        "from eagle_convert.cli import main\n"
        "try:\n"
        f"    main(['convert', {str(draft)!r}, '--target', {str(target)!r}, '-o', {str(tmp_path / 'out')!r}])\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "print(seen, len(d.PREHASH._jobs))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[(False, ['pytorch_model.bin']), (False, 11)] 0"
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_early_target_reads_are_metadata_only(pair, monkeypatch):
    target, _, _ = pair(shards=3)
    reads = []
    original = LocalSource.read_range

    def spy(self, rel, offset, length, *, key=None):
        reads.append((rel, key))
        return original(self, rel, offset, length, key=key)

    monkeypatch.setattr(LocalSource, "read_range", spy)
    early.read_target_metadata(str(target))
    assert reads == [("config.json", None), ("model.safetensors.index.json", None),
                     ("model-00003-of-00003.safetensors", "__header_len__"),
                     ("model-00003-of-00003.safetensors", "__header__")]
