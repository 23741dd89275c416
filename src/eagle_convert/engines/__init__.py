"""Who decodes behind `bench`: our bundled runner (engines/our_runner.py over runner/) and vLLM (`--engine vllm`
offline, `--engine-url URL` for a running server), each an engine of the one bench loop (benchmark/loop.py).

  generation.py    Generation (an answer with the engine's counters); vLLM's counters read as our AcceptanceStats
  our_runner.py    our runner as an engine: speculative decoding (RoundsGeneration: its rounds) and plain decoding
  prepare.py       the draft in a layout vLLM loads (converted in a temporary folder when needed)
  vllm_offline.py  the vLLM interpreter, the LLM(...) arguments; vllm_worker.py runs inside it (vllm only)
  process.py       the engine subprocess: bounded waits, its root-cause line, always ended with its children
  vllm_server.py   an OpenAI-compatible vLLM server: /v1/completions and the Prometheus spec-decode counters
  openvino_offline.py  OpenVINO GenAI's LLMPipeline in its interpreter, its per-step counts read as counters;
                   openvino_worker.py runs inside it (openvino-genai only)

The orchestration (benchmark/engine_bench.py), the report and --compare (benchmark/compare.py) live in benchmark/.
"""
