"""`bench --engine-url URL`: an OpenAI-compatible vLLM server that already serves the target with its head, as
multi-GPU and multi-node deployments run. The prompts go as token ids to /v1/completions, one at a time (or N at
once with --concurrency N); the Prometheus spec-decode counters (/metrics) are read before and after each, and the
difference is that prompt's (that group's; per request when the server returns vLLM's per-request metrics).

vLLM records a step's metrics just after it hands the step's outputs to the HTTP handler, so a response can arrive
before its last step is counted: after each response, /metrics is read again until the finished-request counter has
moved (bounded). A server with no speculative decoding exposes no spec-decode counters: refused. Other traffic shows
as more finished requests than ours: a warning, or an error with --strict. Every wait is bounded."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from ..errors import EngineError
from .generation import Generation
from .vllm_batch import group_generations

METRICS_TIMEOUT_S = 30.0
COMPLETION_TIMEOUT_S = 600.0
SETTLE_TIMEOUT_S = 30.0  # for the finished-request counter to show our request

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_POSITION = re.compile(r'position="(\d+)"')
_SPEC = {"vllm:spec_decode_num_drafts_total": "num_drafts",
         "vllm:spec_decode_num_draft_tokens_total": "num_draft_tokens",
         "vllm:spec_decode_num_accepted_tokens_total": "num_accepted_tokens"}
_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
_FINISHED = "vllm:request_success_total"


def parse_metrics(text: str) -> dict:
    """The spec-decode counters (summed over engines; per position by its label) and the finished-request count;
    `spec` is False when the server exposes no spec-decode counter at all."""
    out = {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0, "per_pos": {}, "finished": 0,
           "spec": False}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match:
            continue
        name, labels, value = match.group(1), match.group(2) or "", float(match.group(3))
        if name in _SPEC:
            out[_SPEC[name]] += int(value)
            out["spec"] = True
        elif name == _PER_POS:
            position = int(_POSITION.search(labels).group(1)) if _POSITION.search(labels) else 0
            out["per_pos"][position] = out["per_pos"].get(position, 0) + int(value)
        elif name == _FINISHED:
            out["finished"] += int(value)
    return out


def counters_between(after: dict, before: dict, k: int) -> dict:
    return {"num_drafts": after["num_drafts"] - before["num_drafts"],
            "num_draft_tokens": after["num_draft_tokens"] - before["num_draft_tokens"],
            "num_accepted_tokens": after["num_accepted_tokens"] - before["num_accepted_tokens"],
            "num_accepted_tokens_per_pos": [after["per_pos"].get(i, 0) - before["per_pos"].get(i, 0)
                                            for i in range(k)]}


class ServerEngine:
    def __init__(self, url: str, *, strict: bool, warn):
        self.url = url.rstrip("/")
        self.strict = strict
        self.warn = warn
        self.model = None
        self.other_traffic: list[str] = []
        self.counters_scope: str | None = None  # after generate_group: vllm_batch.PER_REQUEST or PER_GROUP
        self.draft_limit: int | None = None  # the draft's position limit, for the disabled rounds (set by bench)
        self.draft_limit_known = False  # a server does not say its draft's limit: bench knows it only from --draft

    def _http(self, path: str, body: dict | None, timeout_s: float) -> bytes:
        request = urllib.request.Request(self.url + path, data=None if body is None else json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        what = f"{'POST' if body is not None else 'GET'} {self.url}{path}"
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                return response.read()
        except urllib.error.HTTPError as error:
            detail = error.read()[:500].decode(errors="replace").strip()
            kind = "refused the request" if error.code < 500 else "failed"
            raise EngineError(f"The vLLM server {kind}: {what} answered HTTP {error.code} ({detail or error.reason}).",
                              "4xx: check that the server serves --target with a speculative head and accepts token "
                              "ids (the prompt must fit its --max-model-len); 5xx: the server's own log has the "
                              "cause.") from error
        except TimeoutError as error:
            raise EngineError(f"The vLLM server did not answer {what} within {timeout_s:.0f} s.",
                              "Check that it is up and not overloaded, then retry.") from error
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise EngineError(f"Cannot reach the vLLM server at {self.url} ({what}: {reason}).",
                              "Start it (`vllm serve TARGET --speculative-config '{...}'`, the command `convert` "
                              "prints) or fix --engine-url (scheme, host and port, e.g. http://127.0.0.1:8000).") \
                from error

    def _json(self, path: str, body: dict | None = None, timeout_s: float = METRICS_TIMEOUT_S) -> dict:
        raw = self._http(path, body, timeout_s)
        try:
            return json.loads(raw)
        except ValueError as error:
            raise EngineError(f"The server at {self.url} answered {path} with something that is not JSON.",
                              "Point --engine-url at an OpenAI-compatible vLLM server.") from error

    def metrics(self) -> dict:
        return parse_metrics(self._http("/metrics", None, METRICS_TIMEOUT_S).decode(errors="replace"))

    def open(self, k: int) -> dict:
        models = self._json("/v1/models").get("data") or []
        if not models:
            raise EngineError(f"The server at {self.url} serves no model (/v1/models is empty).",
                              "Point --engine-url at the vLLM server that serves the target with its head.")
        self.model = models[0]["id"]
        metrics = self.metrics()
        if not metrics["spec"]:
            raise EngineError(f"The vLLM server at {self.url} (model {self.model}) has no speculative decoding "
                              "configured: its /metrics has no spec-decode counters, so there is no acceptance to "
                              "measure.", "Restart it with the head: `vllm serve TARGET --speculative-config "
                              "'{\"method\": ..., \"model\": DRAFT, \"num_speculative_tokens\": K}'` (the command "
                              "`eagle-convert convert` prints), or bench the head offline with --engine vllm.")
        server_k = len(metrics["per_pos"])
        if server_k != k:
            raise EngineError(f"The vLLM server drafts {server_k} tokens per round, not -k {k}.",
                              f"Pass -k {server_k} (a server's num_speculative_tokens is fixed when it starts).")
        try:
            version = self._json("/version").get("version")
        except EngineError:
            version = None
        return {"version": version, "model": self.model, "k": server_k, "max_model_len": models[0].get("max_model_len")}

    def generate(self, ids: list[int], *, max_new_tokens: int, temperature: float, seed: int,
                 stop_token_ids: tuple[int, ...]) -> Generation:
        before = self.metrics()
        k = len(before["per_pos"])
        start = time.perf_counter()
        tokens, _ = self._complete(ids, max_new_tokens, temperature, seed, stop_token_ids)
        seconds = time.perf_counter() - start
        after = self._settled(before, 1)
        return Generation(tokens, seconds, counters_between(after, before, k))

    def generate_group(self, batch: list[list[int]], *, max_new_tokens: int, temperature: float, seed: int,
                       stop_token_ids: tuple[int, ...]) -> list[Generation]:
        """The prompts as concurrent requests (bench --concurrency), so the server batches them. Per-request
        counters when the server returns them (`vllm serve --per-request-spec-decode-metrics detailed`), else the
        group's counters (vllm_batch.py); `counters_scope` says which."""
        before = self.metrics()
        k = len(before["per_pos"])
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=len(batch)) as pool:
            answers = list(pool.map(lambda ids: self._complete(ids, max_new_tokens, temperature, seed,
                                                               stop_token_ids), batch))
        seconds = time.perf_counter() - start
        after = self._settled(before, len(batch))
        outs, self.counters_scope = group_generations(k, self.draft_limit, batch, answers, seconds,
                                                      counters_between(after, before, k),
                                                      limit_known=self.draft_limit_known)
        return outs

    def _complete(self, ids: list[int], max_new_tokens: int, temperature: float, seed: int,
                  stop_token_ids: tuple[int, ...]) -> tuple[list[int], dict | None]:
        """One completion: its token ids, and vLLM's per-request spec-decode metrics when the server gives them."""
        body = {"model": self.model, "prompt": list(ids), "max_tokens": max_new_tokens, "temperature": temperature,
                "seed": seed, "ignore_eos": True, "stop_token_ids": list(stop_token_ids), "return_token_ids": True}
        answer = self._json("/v1/completions", body, COMPLETION_TIMEOUT_S)
        try:
            tokens = list(answer["choices"][0]["token_ids"])
        except (KeyError, IndexError, TypeError) as error:
            raise EngineError("The server's /v1/completions answer has no choices[0].token_ids.",
                              "bench needs a vLLM server recent enough to return token ids (return_token_ids).") \
                from error
        return tokens, (answer.get("metrics") or {}).get("speculative_decoding")

    def _settled(self, before: dict, ours: int) -> dict:
        """/metrics once our `ours` requests are counted (bounded wait); other traffic: a warning, or --strict's
        error."""
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while True:
            after = self.metrics()
            if after["finished"] >= before["finished"] + ours or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        finished = after["finished"] - before["finished"]
        if finished != ours:
            message = (f"other traffic moved the server's counters during a prompt ({finished} requests finished, "
                       f"{ours} were ours): its acceptance numbers include theirs")
            if self.strict:
                raise EngineError(f"The vLLM server was not ours alone: {message}.",
                                  "Bench a server nobody else uses, or drop --strict to accept a warning.")
            self.other_traffic.append(message)
            self.warn(message)
        return after




