"""Every background thread a conversion starts (read-ahead, pre-hashing, hashing, writing) has ended when `convert`
returns: on success, on error and on Ctrl-C, and when the early reads were started but the conversion never ran.
A thread left inside native code when the interpreter finalizes aborts the process (exit 134) after a complete
write; these tests look at the threads themselves, so they fail on a leak whether or not that abort happens."""

from __future__ import annotations

import threading

import numpy
import pytest

import eagle_convert
from eagle_convert import errors
from eagle_convert.conversion import prefetch as early
from eagle_convert.io import background, digest
from eagle_convert.io import write as write_module


def ours() -> list[str]:
    """Threads of ours still alive: tracked ones, and any other thread named like ours (pools, strays)."""
    names = {t.name for t in background.running()}
    names |= {t.name for t in threading.enumerate() if t.name.startswith("eagle-convert")}
    return sorted(names)


def test_nothing_runs_after_a_conversion(pair, tmp_path):
    target, draft, _ = pair()
    early.start_early_reads(str(draft), str(target))  # as the CLI does: read-ahead and pre-hash threads first
    eagle_convert.convert(str(draft), str(target), tmp_path / "out")
    assert ours() == []


def test_nothing_runs_after_a_failed_write(pair, tmp_path, monkeypatch):
    target, draft, _ = pair()
    early.start_early_reads(str(draft), str(target))

    def broken(a, b):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(write_module, "same_bytes", broken)
    with pytest.raises(OSError):
        eagle_convert.convert(str(draft), str(target), tmp_path / "out")
    assert ours() == [] and not (tmp_path / "out").exists()


def test_nothing_runs_after_ctrl_c(pair, tmp_path, monkeypatch):
    target, draft, _ = pair()
    early.start_early_reads(str(draft), str(target))
    calls = []

    def interrupted(a, b):
        calls.append(1)
        if len(calls) == 2:  # mid-conversion: one tensor written, hash threads of others still running
            raise KeyboardInterrupt
        return write_module.numpy.array_equal(numpy.frombuffer(a, numpy.uint8), numpy.frombuffer(b, numpy.uint8))

    monkeypatch.setattr(write_module, "same_bytes", interrupted)
    with pytest.raises(KeyboardInterrupt):
        eagle_convert.convert(str(draft), str(target), tmp_path / "out")
    assert ours() == [] and not (tmp_path / "out").exists()


def test_nothing_runs_after_early_reads_of_a_conversion_that_fails_at_once(pair):
    target, draft, _ = pair()
    early.start_early_reads(str(draft), str(target))
    with pytest.raises(errors.OutputPathError):
        eagle_convert.convert(str(draft), str(target), draft / "inside")
    assert ours() == []


def test_finish_stops_a_long_hash_within_a_step():
    data = memoryview(numpy.zeros(64 * digest.HASH_STEP, numpy.uint8))  # 1 GiB: seconds of hashing
    pending = digest.Digest(data)
    background.finish()
    assert ours() == []
    with pytest.raises(background.Cancelled):
        pending.hexdigest()
    assert digest.Digest(memoryview(b"abc")).hexdigest() == (  # and the next conversion hashes again
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
