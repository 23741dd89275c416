"""A group of requests decoded at once (`bench --concurrency N`): each request's counters from vLLM's per-request
spec-decode metrics, and which of its rounds vLLM's batch-wide position rule ran with drafting disabled.

vLLM 0.32 decides once per step, for the whole batch, whether the drafter runs: only while the batch's LONGEST
sequence + k fits the draft's limit (runner/draft_gate.py has the file:line; docs/long-context.md). Otherwise every
request in the step gets k dummy zeros as drafts, which the target verifies and the counters count. vLLM counts no
"disabled" round anywhere, so the share is reconstructed from what it does report, and then checked:
  * `per_step_accepted` / `per_step_drafted` (--per-request-spec-decode-metrics detailed) give each request's length
    at every step; the group's requests are admitted together and each running request verifies one round per step
    (checked: a request's tokens must be what its rounds produced), so step j's batch is the requests with >= j rounds.
  * A round is disabled when, at the step before it, the longest sequence in the batch + k passed the limit.
  * Check: in a disabled round the drafts were zeros, so every token it accepted must be token id 0. A round that
    accepted anything else means the reconstruction does not hold (e.g. a chunked prefill): the share is then None,
    never a guess."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import EngineError
from .generation import Generation, add_counters, zero_counters


@dataclass(frozen=True)
class RequestSteps:
    """One request of a group: its prompt length, output tokens and vLLM's per-step spec-decode detail."""
    prompt_len: int
    tokens: list[int]
    accepted: list[int]  # per verify round: drafts accepted
    drafted: list[int]  # per verify round: drafts scheduled (k, or fewer near the end)


def counters_from_metrics(k: int, metrics: dict) -> dict:
    """vLLM's per-request `speculative_decoding` metrics (acceptance_histogram over accepted drafts 0..k) as the four
    counters the engine-wide metrics give: position i counts the rounds that accepted more than i drafts."""
    histogram = list(metrics["acceptance_histogram"])
    if len(histogram) != k + 1:
        raise ValueError(f"vLLM's per-request acceptance histogram has {len(histogram)} entries, expected k+1={k + 1}")
    counters = zero_counters(k)
    counters["num_drafts"] = sum(histogram)
    counters["num_draft_tokens"] = int(metrics["num_draft_tokens"])
    counters["num_accepted_tokens"] = sum(j * n for j, n in enumerate(histogram))
    counters["num_accepted_tokens_per_pos"] = [sum(histogram[i + 1:]) for i in range(k)]
    return counters


def _lengths(request: RequestSteps) -> list[int] | None:
    """The request's sequence at each step (num_computed + num_scheduled, as the runner's max_seq_len counts it):
    step 0 its prefill, step j its j-th round (the pending token + the drafts scheduled). None when its tokens are
    not what its rounds produce (a step without a round: the lockstep assumption fails)."""
    produced = 1 + sum(a + 1 for a in request.accepted)  # the prefill's token, then accepted + the bonus per round
    last = request.accepted[-1] + 1 if request.accepted else 1
    if not produced - last < len(request.tokens) <= produced:  # the last round may be cut by max_tokens or a stop id
        return None
    lengths, done = [request.prompt_len], request.prompt_len
    for accepted, drafted in zip(request.accepted, request.drafted):
        lengths.append(done + 1 + drafted)
        done += accepted + 1
    return lengths


def disabled_rounds(group: list[RequestSteps], k: int, limit: int | None) -> list[int] | None:
    """Per request, the rounds vLLM verified with drafting disabled (see the module doc); None when the
    reconstruction fails its check. `limit`: the draft's position limit (None: none, nothing is disabled)."""
    if limit is None:
        return [0] * len(group)
    lengths = [_lengths(request) for request in group]
    if any(item is None for item in lengths):
        return None
    steps = max(len(item) for item in lengths)
    # drafting for step j+1 is decided after step j's forward, over the requests in step j's batch
    fits = [max(item[j] for item in lengths if len(item) > j) + k <= limit for j in range(steps)]
    out = []
    for request in group:
        disabled, start = 0, 1  # output index of the round's first token
        for j, accepted in enumerate(request.accepted, start=1):
            if not fits[j - 1]:
                disabled += 1
                if any(token != 0 for token in request.tokens[start:start + accepted]):
                    return None  # dummy zeros cannot accept a non-zero token: this round did draft
            start += accepted + 1
        out.append(disabled)
    return out


PER_REQUEST, PER_GROUP = "per request", "per group"


def group_generations(k: int, limit: int | None, batch: list[list[int]], outputs: list[tuple[list[int], dict | None]],
                      seconds: float, group_counters: dict | None, *,
                      limit_known: bool = True) -> tuple[list[Generation], str | None]:
    """One Generation per prompt of a group, and where its counters come from. `outputs`: per prompt its tokens and
    vLLM's per-request `speculative_decoding` metrics (None when the engine gives none). Each prompt's seconds are
    the group's share (their sum stays the wall time). With every request's metrics: per-request counters, checked
    against the group's delta of the engine-wide counters, and the disabled rounds; without: the group's delta sits
    on its first prompt and the others count zeros (per-group: per-prompt τ is then not measured). `limit_known`
    False (a server whose draft bench was not given): the disabled rounds are not measured."""
    share = seconds / len(batch)
    if group_counters is None:  # plain decoding
        return [Generation(tokens, share) for tokens, _ in outputs], None
    metrics = [spec for _, spec in outputs]
    if any(spec is None for spec in metrics):
        counters = [group_counters] + [zero_counters(k) for _ in outputs[1:]]
        return [Generation(tokens, share, item) for (tokens, _), item in zip(outputs, counters)], PER_GROUP
    counters = [counters_from_metrics(k, spec) for spec in metrics]
    total = zero_counters(k)
    for item in counters:
        total = add_counters(total, item)
    if total != group_counters:  # the two of vLLM's counts must agree, or neither means what we read it as
        raise EngineError(f"vLLM's per-request spec-decode metrics ({total}) do not add up to its engine-wide counters "
                          f"for the same group ({group_counters}).",
                          "Another request moved the counters, or this vLLM counts differently: bench with "
                          "--concurrency 1 and report the version.")
    steps = [RequestSteps(len(ids), tokens, list(spec.get("per_step_accepted") or []),
                          list(spec.get("per_step_drafted") or [])) for ids, (tokens, spec) in zip(batch, outputs)]
    detailed = all(len(item.accepted) == spec["num_spec_steps"] for item, spec in zip(steps, metrics))
    disabled = disabled_rounds(steps, k, limit) if detailed and limit_known else None
    return [Generation(tokens, share, item, disabled_rounds=None if disabled is None else disabled[i])
            for i, ((tokens, _), item) in enumerate(zip(outputs, counters))], PER_REQUEST
