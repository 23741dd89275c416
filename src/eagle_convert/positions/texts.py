"""What each engine does with a draft's positions, as data for the position checks (positions.py): read in vLLM
0.32 and SGLang 0.5.23's code (file:line, docs/long-context.md), said in one sentence each."""

from __future__ import annotations

# Past the draft's position limit.
ENGINE_PAST_LIMIT = {
    "vllm": "vLLM 0.32 raises an EAGLE draft's max_position_embeddings to the target's max_model_len on load "
            "(config/speculative.py:1393-1399, 1677-1710) but keeps the draft's max_model_len derived from its own "
            "config (speculative.py:1556-1562); its V1 model runner (CPU, no Triton, or VLLM_USE_V2_MODEL_RUNNER=0) "
            "then silently stops drafting for the whole batch once the batch's longest sequence plus k passes it, "
            "so a short request batched with one past the limit loses its drafts too "
            "(v1/worker/gpu_model_runner.py:4288-4301, 4454; an MTP draft is fed dummy token 0 there, vllm#58080), "
            "while the V2 runner, its default on GPU, "
            "has no such gate (v1/worker/gpu/spec_decode/speculator.py:119-120) and drafts on past the trained "
            "context",
    "sglang": "SGLang 0.5.23 gives the draft the target's context length (speculative/eagle_worker_v2.py:229) and "
              "refuses to start when it passes the draft's own (configs/model_config.py:1296-1316) unless "
              "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1, which raises the draft's limit and drafts on: prompts "
              "past a 2048 head's limit ran slower than no speculation (sglang#6783)",
    "ours": "bench's runner stops drafting past the draft's limit as vLLM's V1 runner does (runner/draft_gate.py: "
            "the rounds verify k dummy zeros and are reported as drafting disabled); it refuses a prompt past the "
            "target's limit (benchmark/prompts.py)",
}

# A sliding window in the draft's config.
ENGINE_WINDOWS = {
    "vllm": "vLLM's Llama draft windows the layers layer_types marks sliding_attention with sliding_window "
            "(model_executor/models/llama.py:185-204); use_sliding_window alone is not read",
    "sglang": "SGLang's EAGLE-3 draft ignores the config's window and windows only with "
              "--speculative-draft-window-size N (models/llama_eagle3.py:285-299, 383-384)",
    "ours": "bench's runner windows the head's layers as vLLM reads them when layer_types is given, else by the "
            "family's rule (Mistral: every layer; Qwen2/3: use_sliding_window) (runner/model.py)",
}

# Acceptance past the context a head was made for (said by short_training_context).
TAU_PAST_TRAINING = ("acceptance (τ) will fall past {limit} tokens of context (an EAGLE-3 head for Qwen3-8B in "
                     "vLLM: τ 2.30 at 2k, 1.69 at 8k, 1.09 at 16k, speculators PR#684).")
