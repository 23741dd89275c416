"""Ctrl-C acts at once while `vocab-map build` reads and tokenizes, and a signal after the output is in place says
that the output is whole and where it is.

Not timed beyond a generous bound: the corpus is one 13 MB row then 20,000 short ones (~4 s of counting here); the
test waits for the first progress line (EAGLE_CONVERT_PROGRESS_EVERY=0: a line per row) and 1 s more, so the signal
lands while counting is under way, then allows 10 s for an exit that takes well under one. Before immediate() and
bounded tokenizing (a6dcb48), the long row was one tokenizer call that held the GIL for over a minute and Python's
handler waited for it: this test fails there."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from support.signals import WAIT_S, children_get_default_signals

from eagle_convert.io import interrupts
from eagle_convert.testing.tiny import TinyConfig, make_target

CFG = TinyConfig(vocab_size=128, num_hidden_layers=1)
TEMPLATE = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}t3 {{ m['content'] }} t5 "
            "{% else %}t4 {{ m['content'] }} t5 {% endif %}{% endfor %}{% if add_generation_prompt %}t4 {% endif %}")
EXIT_BOUND_S = 10


def _target(tmp_path):
    make_target(tmp_path / "target", CFG)
    config_file = tmp_path / "target" / "tokenizer_config.json"
    config_file.write_text(json.dumps({**json.loads(config_file.read_text()), "chat_template": TEMPLATE}))
    return tmp_path / "target"


def _row(words: int, turns: int) -> str:
    answer = " ".join(f"t{10 + i % 100}" for i in range(words))
    return json.dumps({"conversations": [{"from": "human", "value": "t10"}, {"from": "gpt", "value": answer}] * turns})


def _corpus(path, words: int, turns: int = 5, short_rows: int = 0):
    path.write_text("\n".join([_row(words, turns)] + [_row(30, 2)] * short_rows) + "\n")
    return path


def _start(tmp_path, corpus, *extra, env=None):
    with children_get_default_signals():
        return subprocess.Popen([sys.executable, "-m", "eagle_convert", "vocab-map", "build", "-t",
                                 str(_target(tmp_path)), "--prompts", str(corpus), "-n", "8", "--compat", "specforge",
                                 "-o", str(tmp_path / "maps"), "--cache-dir", str(tmp_path / "cache"), *extra],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env or os.environ)


def _wait_for(proc, stream, marker: bytes) -> list[bytes]:
    """Collect `stream` on a thread (tqdm writes without newlines) until `marker` shows; fail if the command ends."""
    seen: list[bytes] = []
    reader = threading.Thread(target=lambda: seen.extend(iter(lambda: os.read(stream.fileno(), 4096), b"")),
                              daemon=True)
    reader.start()
    deadline = time.monotonic() + WAIT_S
    while marker not in b"".join(seen):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"never saw {marker!r}: rc {proc.wait()}, stderr {b''.join(seen)[-2000:]!r}")
        time.sleep(0.02)
    return seen


def test_ctrl_c_while_counting_exits_at_once(tmp_path):
    corpus = _corpus(tmp_path / "long.jsonl", words=600_000, short_rows=20_000)
    proc = _start(tmp_path, corpus, env={**os.environ, "EAGLE_CONVERT_PROGRESS_EVERY": "0"})
    seen = _wait_for(proc, proc.stderr, b"counting tokens")
    time.sleep(1)  # well inside the counting (~4 s of rows left); the old code: inside the long row's one encode
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=EXIT_BOUND_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"SIGINT not acted on within {EXIT_BOUND_S} s")
    assert proc.returncode in (-signal.SIGINT, 128 + signal.SIGINT), proc.returncode
    assert time.monotonic() - sent < EXIT_BOUND_S
    assert not (tmp_path / "maps").exists()
    assert not list(tmp_path.glob("cache/*"))  # no cache entry, no .tmp file
    assert b"counting tokens (specforge): done" not in b"".join(seen)  # it was stopped while counting


def test_a_signal_after_the_output_is_in_place_says_it_is_whole(tmp_path):
    corpus = _corpus(tmp_path / "short.jsonl", words=20)
    gate = tmp_path / "gate"
    gate.mkdir()
    proc = _start(tmp_path, corpus, "-q", env={**os.environ, interrupts.TEST_PAUSE: f"renamed:{gate}"})
    deadline = time.monotonic() + WAIT_S
    while not (gate / "renamed.ready").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"never reached the point after the rename: {proc.communicate()}")
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=WAIT_S)
    said = " ".join(stderr.decode().split())
    assert proc.returncode == 128 + signal.SIGTERM, (proc.returncode, said)
    assert said == f"interrupted by SIGTERM after the output was complete: {tmp_path / 'maps'} is whole and in place."
    assert sorted(p.name for p in (tmp_path / "maps").iterdir()) == ["vocab_mapping-8.pt"]
