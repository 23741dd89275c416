"""Ctrl-C while `bench` reads and tokenizes its prompts ends it at once (io/interrupts.immediate: no engine process
exists yet and nothing is written), as `vocab-map build` does; engines started later are still ended by the
KeyboardInterrupt cleanup (tests/engines/test_engines.py). Deterministic: EAGLE_CONVERT_TEST_PAUSE stops bench at the
point where its prompts are being tokenized and says so through a file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from support.signals import WAIT_S, children_get_default_signals

from eagle_convert.io import interrupts
from eagle_convert.testing.tiny import TinyConfig, make_eagle1_head, make_target

CFG = TinyConfig(vocab_size=128, num_hidden_layers=2)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_bench_tokenizes_its_prompts_ends_it_at_once(tmp_path, sig):
    tensors = make_target(tmp_path / "target", CFG)
    make_eagle1_head(tmp_path / "head", CFG, tensors)
    (tmp_path / "prompts.jsonl").write_text(json.dumps({"prompt": "t10 t11 t12"}) + "\n")
    gate = tmp_path / "gate"
    gate.mkdir()
    env = {**os.environ, interrupts.TEST_PAUSE: f"tokenizing:{gate}"}
    with children_get_default_signals():
        proc = subprocess.Popen([sys.executable, "-m", "eagle_convert", "bench", "-t", str(tmp_path / "target"),
                                 "-d", str(tmp_path / "head"), "--prompts", str(tmp_path / "prompts.jsonl"),
                                 "--max-new-tokens", "4", "--report", str(tmp_path / "report.json")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + WAIT_S
    while not (gate / "tokenizing.ready").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"never reached the tokenizing pause point: {proc.communicate()}")
        time.sleep(0.02)
    proc.send_signal(sig)
    stdout, _ = proc.communicate(timeout=WAIT_S)
    # killed by the signal itself (its default action), not a handler's exit: it acted without waiting for Python
    assert proc.returncode == -sig and stdout == ""
    assert not (tmp_path / "report.json").exists()
