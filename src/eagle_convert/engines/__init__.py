"""Serving engines behind `bench`: our bundled runner (`--engine ours`, runner/) and vLLM (`--engine vllm` offline,
`--engine-url URL` for a running server), with one report, one set of gates, and `--compare` between them.

  api.py           bench_engine(): the orchestration, the report's `engine` block
  loop.py          the bench loop over any engine's generate(); the BenchReport it builds
  base.py          Generation; vLLM's counters read as our AcceptanceStats
  prepare.py       the draft in a layout vLLM loads (converted in a temporary folder when needed)
  vllm_offline.py  the vLLM interpreter, the LLM(...) arguments; vllm_worker.py runs inside it (vllm only)
  process.py       the engine subprocess: bounded waits, its root-cause line, always ended with its children
  vllm_server.py   an OpenAI-compatible vLLM server: /v1/completions and the Prometheus spec-decode counters
  compare.py       ours beside the engine, prompt by prompt; the gate that fails when fp32 greedy counters differ
"""
