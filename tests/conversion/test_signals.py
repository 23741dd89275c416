"""Signals and races end a conversion cleanly: no staging folder, no output, inputs unchanged, one line, 128+signum.

Deterministic, not timed: EAGLE_CONVERT_TEST_PAUSE stops the command at a known point (a writer mid-way, or just
before the final rename) and says so through a file; the test then signals it or races it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from support.convert import assert_nothing_left, flat, tree_fingerprint
from support.signals import WAIT_S, children_get_default_signals

import eagle_convert
from eagle_convert.io import interrupts


def start_paused(draft, target, out, gate, point, *extra):
    gate.mkdir(exist_ok=True)
    env = {**os.environ, interrupts.TEST_PAUSE: f"{point}:{gate}"}
    with children_get_default_signals():
        proc = subprocess.Popen([sys.executable, "-m", "eagle_convert", "convert", str(draft), "--target",
                                 str(target), "-o", str(out), *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env)
    deadline = time.monotonic() + WAIT_S
    while not (gate / f"{point}.ready").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"never reached the pause point {point}: {proc.communicate()}")
        time.sleep(0.02)
    return proc


def staging_folders(out):
    return sorted(out.parent.glob(f".{out.name}.eagle-convert-*"))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
def test_a_signal_mid_write_leaves_nothing_and_exits_128_plus_signum(pair, tmp_path, sig):
    target, draft, _ = pair()
    before = tree_fingerprint(draft), tree_fingerprint(target)
    out = tmp_path / "out"
    proc = start_paused(draft, target, out, tmp_path / "gate", "write")
    assert len(staging_folders(out)) == 1  # mid-way: the staging folder exists
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=WAIT_S)  # the pause would last 120 s: only the signal ends it sooner
    assert proc.returncode == 128 + sig, (proc.returncode, stderr)
    assert stderr.strip() == f"interrupted by {sig.name}: nothing was written.", stderr
    assert stdout == ""
    assert_nothing_left(out)
    assert (tree_fingerprint(draft), tree_fingerprint(target)) == before


def test_a_staging_folder_left_by_a_killed_run_is_removed_by_the_next(pair, tmp_path):
    target, draft, _ = pair()
    out = tmp_path / "out"
    proc = start_paused(draft, target, out, tmp_path / "gate", "write")
    proc.kill()  # SIGKILL: nothing of ours runs
    proc.communicate(timeout=WAIT_S)
    [left] = staging_folders(out)
    result = subprocess.run([sys.executable, "-m", "eagle_convert", "convert", str(draft), "--target", str(target),
                             "-o", str(out)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if str(left) in line]
    assert len(said) == 1 and f"killed (pid {proc.pid})" in said[0], result.stderr
    assert staging_folders(out) == [] and (out / "model.safetensors").is_file()
    assert ".eagle-convert-owner" not in os.listdir(out)


def test_only_stale_staging_folders_of_ours_are_removed(pair, tmp_path):
    """Negative controls: a live run's staging folder, and one without an owner marker, are never touched."""
    target, draft, _ = pair()
    out = tmp_path / "out"
    live, unmarked = tmp_path / ".out.eagle-convert-live0001.tmp", tmp_path / ".out.eagle-convert-nomark01.tmp"
    for folder in (live, unmarked):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"partial")
    (live / ".eagle-convert-owner").write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
    result = eagle_convert.convert(str(draft), str(target), out)
    assert result.notes == []
    assert (live / "model.safetensors").read_bytes() == b"partial" and (unmarked / "model.safetensors").exists()


def test_a_lost_signal_exception_still_stops_the_conversion(pair, tmp_path, monkeypatch):
    """Python may raise a handler's exception inside a __del__ or a callback, where it is printed and lost: the
    recorded signal must still stop the writers and keep the output from being moved into place."""
    target, draft, _ = pair()
    from eagle_convert.conversion import execute

    real = execute._produce

    def produce_then_lose_a_signal(planned, checkpoints, result):
        try:
            interrupts._handler(signal.SIGTERM, None)  # what the handler does, its exception lost
        except KeyboardInterrupt:
            pass
        return real(planned, checkpoints, result)

    monkeypatch.setattr(execute, "_produce", produce_then_lose_a_signal)
    out = tmp_path / "out"
    with interrupts.handled_signals(), pytest.raises(interrupts.Interrupted) as info:
        eagle_convert.convert(str(draft), str(target), out)
    assert info.value.signum == signal.SIGTERM
    assert_nothing_left(out)


def test_the_cli_restores_the_signal_handlers_it_replaced():
    def wakeup_fd() -> int:
        fd = signal.set_wakeup_fd(-1)
        signal.set_wakeup_fd(fd)
        return fd

    before = {s: signal.getsignal(s) for s in interrupts.HANDLED}, wakeup_fd()
    with interrupts.handled_signals():
        assert all(signal.getsignal(s) is interrupts._handler for s in interrupts.HANDLED)
        assert wakeup_fd() != before[1]
    assert ({s: signal.getsignal(s) for s in interrupts.HANDLED}, wakeup_fd()) == before


def test_two_conversions_racing_to_one_output_say_so(pair, tmp_path):
    target, draft, _ = pair()
    out = tmp_path / "out"
    proc = start_paused(draft, target, out, tmp_path / "gate", "rename")
    out.mkdir()  # the other conversion won: its output is in place first
    (out / "model.safetensors").write_bytes(b"the winner's")
    (tmp_path / "gate" / "rename.go").touch()
    _, stderr = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 1, stderr
    message = flat(stderr)
    assert "another conversion wrote" in message and "one conversion per output" in message, message
    assert "free space" not in message and "\n\n" not in stderr.strip()
    assert (out / "model.safetensors").read_bytes() == b"the winner's"
    assert staging_folders(out) == []


def test_a_race_while_replacing_with_force_keeps_the_winner_and_no_hidden_copy(tmp_path, monkeypatch):
    from pathlib import Path

    from eagle_convert import errors
    from eagle_convert.io import staging as staging_module

    staging, out, old = tmp_path / ".out.x.tmp", tmp_path / "out", tmp_path / ".out.x.old"
    staging.mkdir()
    (staging / "model.safetensors").write_bytes(b"ours")
    out.mkdir()
    (out / "model.safetensors").write_bytes(b"the old output")
    real_rename = Path.rename

    def rename_then_race(self, target):
        moved = real_rename(self, target)
        if self == out and not out.exists():  # the other conversion's output lands the moment ours moved aside
            out.mkdir()
            (out / "model.safetensors").write_bytes(b"the winner's")
        return moved

    monkeypatch.setattr(Path, "rename", rename_then_race)
    with pytest.raises(errors.OutputPathError, match="another conversion wrote the same output"):
        staging_module._move_into_place(staging, out, True, old)
    assert (out / "model.safetensors").read_bytes() == b"the winner's"
    assert not old.exists()  # no hidden copy left behind (--force asked for it to be replaced)


def test_a_signal_delivered_to_another_thread_wakes_the_waiting_main_thread():
    """The kernel may hand a process's signal to any thread; one that goes to a worker does not wake a main thread
    blocked on a lock, and Python runs the handler only when the main thread runs. Made certain here by blocking the
    signal in the main thread, so the kernel must deliver it to the other one."""
    import threading
    from concurrent.futures import Future

    from eagle_convert.io.digest import Digest

    pending, go = Future(), threading.Event()
    sender = threading.Thread(target=lambda: (go.wait(), os.kill(os.getpid(), signal.SIGTERM)))
    sender.start()  # before the mask: a thread inherits its creator's
    failsafe = threading.Timer(20, pending.set_result, ["a hash nobody interrupted"])
    failsafe.start()
    try:
        with interrupts.handled_signals(), interrupts.shielded():  # shielded: the handler records, never raises
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
            try:
                go.set()
                with pytest.raises(interrupts.Interrupted) as info:
                    Digest(future=pending).hexdigest()  # what the main thread waits on while a tensor is hashed
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        assert info.value.signum == signal.SIGTERM and not pending.done()  # woken by the signal, not the failsafe
    finally:
        failsafe.cancel()
        sender.join()


def test_a_signal_while_the_writers_start_stops_the_ones_running(tmp_path, monkeypatch):
    """The signal lands while tensors are still being handed to the writers (one already paused mid-write): the
    writers that run must be told to stop, or leaving the pool waits for them to finish (here: a 120 s pause; in a
    real run, the rest of the tensor). Seen once in a stress run: SIGHUP printed its line, then hung."""
    from concurrent.futures import ThreadPoolExecutor

    import torch

    from eagle_convert.io.write import OutTensor, write_safetensors

    gate = tmp_path / "gate"
    gate.mkdir()
    monkeypatch.setenv(interrupts.TEST_PAUSE, f"write:{gate}")
    submit, handed = ThreadPoolExecutor.submit, []

    def signal_on_the_second(pool, fn, *args, **kwargs):
        if pool._thread_name_prefix.startswith("eagle-convert-write") and handed:
            deadline = time.monotonic() + WAIT_S
            while not (gate / "write.ready").exists() and time.monotonic() < deadline:
                time.sleep(0.01)  # the first writer is paused mid-write: now the signal lands
            raise interrupts.Interrupted(signal.SIGTERM)
        handed.append(fn)
        return submit(pool, fn, *args, **kwargs)

    monkeypatch.setattr(ThreadPoolExecutor, "submit", signal_on_the_second)
    tensors = [OutTensor(f"t{i}", torch.float32, (4, 4)) for i in range(3)]
    started = time.monotonic()
    with pytest.raises(interrupts.Interrupted):
        write_safetensors(tmp_path / "x.safetensors", tensors, lambda t: torch.zeros(t.shape))
    assert (gate / "write.ready").exists()
    assert time.monotonic() - started < WAIT_S / 4  # the paused writer stopped; it would otherwise wait 120 s
