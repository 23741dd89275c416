"""vLLM's offline engine as bench drives it (start, generate, a context), faked: each request answers tokens that
depend on the prompt ids only, so the plain twin agrees, and the speculative one reports `counters`. Tests subclass
it to set the device, the counters and the token rule they assert on."""

from __future__ import annotations

from eagle_convert.engines.generation import Generation


class FakeVllmOffline:
    device = "cpu"
    counters = {"num_drafts": 1, "num_draft_tokens": 2, "num_accepted_tokens": 1, "num_accepted_tokens_per_pos": [1, 0]}
    token_multiplier = 1  # the answer to ids is (sum(ids) * token_multiplier + i) % 90

    def __init__(self, python, llm_kwargs, *, what, on_cpu=None):
        self.spec = llm_kwargs.get("speculative_config")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def start(self):
        return {"version": "0.0-fake", "tp": 1, "device": self.device, "dtype": "float32", "start_s": 1.0,
                "speculative_config": self.spec}

    def generate(self, ids, *, max_new_tokens, temperature, seed, stop_token_ids):
        tokens = [(sum(ids) * self.token_multiplier + i) % 90 for i in range(max_new_tokens)]
        return Generation(tokens, 0.01, None if self.spec is None else dict(self.counters))
