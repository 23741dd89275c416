"""Chain speculative decoding with an EAGLE head, batch 1: draft k tokens, verify them in one target forward, accept.

Alignment (the one thing every EAGLE bug gets wrong): draft row i pairs the target feature at position i with the
token at position i+1, at RoPE position i. After each round the head's context is extended with the *target's*
features for the tokens just accepted (never the head's own guesses), whose last row yields the next first draft.

Greedy (temperature 0): accept the longest prefix of drafts equal to the target's argmax, then the target's own token.
Sampling (temperature > 0): standard speculative sampling (Leviathan et al. 2023; Chen et al. 2023): accept draft d
with probability min(1, p(d)/q(d)), otherwise emit a sample of normalise(max(p - q, 0)) and stop; if all k are
accepted, a bonus token from p. The emitted tokens are distributed exactly as the target's own samples.

A DFlash head drafts its k tokens in one forward (draft_block; runner/dflash_drafter.py) from the same verified
context, and its block is verified and accepted exactly like a chain.

Caches are static and indexed by position, so a rejected suffix is forgotten by writing the next round at the right
positions: nothing is copied or truncated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from .draft_gate import drafts_fit
from .heads import DraftOutput, HeadModule
from .model import TargetModel
from .prefill import prefill


@dataclass
class SpeculativeResult:
    tokens: list[int]  # generated tokens, prompt excluded; ends at the first EOS or at max_new_tokens
    accepted_per_round: list[int] = field(default_factory=list)  # a per verify round, before truncation (as vLLM)
    k: int = 0
    # Verify rounds whose drafts were k dummy zeros because the sequence had passed the draft's position limit
    # (draft_gate.py: vLLM's rule); they are counted in accepted_per_round too, as vLLM counts them.
    drafting_disabled_rounds: int = 0
    # Per verify round, greedy only: the k drafted target ids, and the head's top-1 minus top-2 logit at each step (how
    # near a tie each draft choice was). What `bench --reference-draft` shows when two heads draft differently.
    drafted_per_round: list[list[int]] = field(default_factory=list)
    margins_per_round: list[list[float]] = field(default_factory=list)


def token_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    return torch.softmax(logits.float() / temperature, dim=-1)


def choose_token(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    """Argmax at temperature 0, else one sample; a 0-d tensor that stays on the device."""
    if temperature == 0:
        return logits.argmax(-1)
    return torch.multinomial(token_probs(logits, temperature), 1, generator=generator)[0]


def head_probs_in_target_vocab(head: HeadModule, head_probs: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """q over the target vocab: an EAGLE-3 draft vocab is a subset, and target tokens outside it get q = 0."""
    if head.draft_to_target is None:
        return head_probs
    full = head_probs.new_zeros(vocab_size)
    return full.index_copy_(0, head.draft_to_target, head_probs)


def draft_chain(head: HeadModule, first: DraftOutput, next_position: int, k: int, *, vocab_size: int,
                temperature: float = 0.0, generator: torch.Generator | None = None,
                margins: list[torch.Tensor] | None = None):
    """Propose k target ids. `first` is the head's output whose last row sits at position next_position - 1 (it
    predicts the token at next_position + 1). Returns (ids [k], q [k, V] over the target vocab, or None when greedy).
    Greedy with a `margins` list: each step's top-1 minus top-2 head logit is appended to it (0-d tensors, no sync)."""
    logits, hidden = first.logits[0, -1], first.hidden[:, -1:]
    ids, probs = [], []
    for step in range(k):
        if step:
            out = head(ids[-1].view(1, 1), hidden, range(next_position - 1 + step, next_position + step),
                       from_target=False)
            logits, hidden = out.logits[0, -1], out.hidden
        ids.append(_pick(head, logits, vocab_size, temperature, generator, margins, probs))
    return torch.stack(ids), (torch.stack(probs) if probs else None)


def draft_block(head: HeadModule, bonus: torch.Tensor, next_position: int, k: int, *, vocab_size: int,
                temperature: float = 0.0, generator: torch.Generator | None = None,
                margins: list[torch.Tensor] | None = None):
    """draft_chain's answer for a head that drafts its k proposals in one forward (DFlash): `bonus` is the newest
    emitted token, at next_position. Each mask row is chosen (or sampled) from its own logits, as vLLM's parallel
    drafting does."""
    probs: list[torch.Tensor] = []
    ids = [_pick(head, row, vocab_size, temperature, generator, margins, probs)
           for row in head.draft_block(bonus, next_position, k)]
    return torch.stack(ids), (torch.stack(probs) if probs else None)


def _pick(head: HeadModule, logits: torch.Tensor, vocab_size: int, temperature: float,
          generator: torch.Generator | None, margins: list[torch.Tensor] | None, probs: list[torch.Tensor]):
    """One proposal (a target id) from the head's logits [head vocab]: argmax, its margin appended to `margins`; or a
    sample, its q over the target vocab appended to `probs`."""
    if temperature == 0:
        head_id = logits.argmax(-1)
        if margins is not None:
            top2 = logits.float().topk(min(2, logits.shape[-1])).values
            margins.append(top2[0] - top2[-1])
    else:
        q = token_probs(logits, temperature)
        head_id = torch.multinomial(q, 1, generator=generator)[0]
        probs.append(head_probs_in_target_vocab(head, q, vocab_size))
    return head.to_target_ids(head_id)


def verify(target: TargetModel, last_token: torch.Tensor, draft_ids: torch.Tensor, next_position: int):
    """One target forward over [last emitted token, d_1..d_k] at positions next_position..next_position+k."""
    input_ids = torch.cat([last_token.view(1), draft_ids]).view(1, -1)
    return target(input_ids, range(next_position, next_position + input_ids.shape[1]))


def accept_greedy(draft_ids: torch.Tensor, target_logits: torch.Tensor) -> tuple[int, int]:
    """(a, next): a = longest prefix of drafts equal to the target's argmax rows; next = the argmax after it."""
    target_ids = target_logits.argmax(-1).tolist()
    accepted = longest_agreeing_prefix(draft_ids.tolist(), target_ids)
    return accepted, target_ids[accepted]


def read_greedy_round(draft_ids: torch.Tensor, target_logits: torch.Tensor,
                      margins: list[torch.Tensor]) -> tuple[list[int], list[int], list[float]]:
    """(drafts, the target's argmax rows, margins) in ONE device-to-host copy: on a GPU each read is a sync that
    drains the queue, and a round needs only this one. Ids travel as float64, exact far beyond any vocabulary."""
    k = len(draft_ids)
    parts = [draft_ids.double(), target_logits.argmax(-1).double()] + ([torch.stack(margins).double()] if margins
                                                                       else [])
    values = torch.cat(parts).tolist()
    return [int(x) for x in values[:k]], [int(x) for x in values[k:2 * k + 1]], values[2 * k + 1:]


def longest_agreeing_prefix(drafts: list[int], target_ids: list[int]) -> int:
    accepted = 0
    while accepted < len(drafts) and drafts[accepted] == target_ids[accepted]:
        accepted += 1
    return accepted


def accept_sampled(draft_ids: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor,
                   generator: torch.Generator | None = None) -> tuple[int, int]:
    """Speculative sampling. draft_probs [k, V] = q, target_probs [k+1, V] = p. Returns (a, next token)."""
    k = len(draft_ids)
    rows = torch.arange(k, device=draft_ids.device)
    p_d, q_d = target_probs[rows, draft_ids], draft_probs[rows, draft_ids]
    uniforms = torch.rand(k, generator=generator, device=draft_ids.device)
    accepted_mask = (uniforms * q_d < p_d).tolist()  # u < p/q without dividing; q_d > 0 since d was drawn from q
    accepted = accepted_mask.index(False) if False in accepted_mask else k
    if accepted == k:
        return k, int(torch.multinomial(target_probs[k], 1, generator=generator))
    residual = (target_probs[accepted] - draft_probs[accepted]).clamp_min(0)
    # residual sums to 0 only when p == q, where rejection has probability 0; fall back to p for rounding's sake
    residual = residual if float(residual.sum()) > 0 else target_probs[accepted]
    return accepted, int(torch.multinomial(residual / residual.sum(), 1, generator=generator))


def emit_tokens(tokens: list[int], new: Sequence[int], eos_ids: set[int], max_new_tokens: int) -> bool:
    """Append up to the limit or the first EOS; True when generation is over."""
    for token in new:
        tokens.append(token)
        if token in eos_ids or len(tokens) >= max_new_tokens:
            return True
    return False


@torch.inference_mode()  # one mode for the whole generation: every cache update inside it
def speculative_generate(target: TargetModel, head: HeadModule, prompt_ids: Sequence[int], *, k: int,
                         max_new_tokens: int, temperature: float = 0.0, eos_ids: Sequence[int] = (),
                         generator: torch.Generator | None = None, draft_limit: int | None = None
                         ) -> SpeculativeResult:
    """`draft_limit`: the draft's position limit (draft_gate.py); past it a round verifies k dummy zeros instead of
    drafts, as vLLM does, and the head is no longer run."""
    if k < 1 or max_new_tokens < 1 or not prompt_ids:
        raise ValueError("need k >= 1, max_new_tokens >= 1 and a non-empty prompt")
    eos, device, vocab, n = set(eos_ids), target.device, target.config.vocab_size, len(prompt_ids)
    # Head context: row i = (target feature i, token i+1) at position i; the last row pairs f_{n-1} with `last`.
    # vLLM never runs a drafter past its limit, so neither does the prefill.
    drafter = head if drafts_fit(n, k, draft_limit) else None
    last, _, head_out = prefill(target, drafter, prompt_ids, lambda logits: choose_token(logits, temperature,
                                                                                         generator))
    result = SpeculativeResult(tokens=[], k=k)
    if emit_tokens(result.tokens, [int(last)], eos, max_new_tokens):
        return result
    position = n  # position of `last`, the newest emitted token, which the target has not seen yet
    seen = n  # tokens in the target's cache after its last forward, rejected drafts included (vLLM's max_seq_len)
    while True:
        margins: list[torch.Tensor] = []
        drafting = drafts_fit(seen, k, draft_limit)
        if drafting:
            how = dict(vocab_size=vocab, temperature=temperature, generator=generator, margins=margins)
            draft_ids, draft_probs = (draft_block(head, last, position, k, **how) if head.drafts_block
                                      else draft_chain(head, head_out, position, k, **how))
        else:  # vLLM's dummy drafts: token id 0, k times, verified like drafts (greedy: accepted where 0 is next)
            draft_ids, draft_probs = torch.zeros(k, dtype=torch.int64, device=device), None
            result.drafting_disabled_rounds += 1
        checked = verify(target, last, draft_ids, position)
        seen = position + k + 1
        if temperature == 0:  # one host-device sync per round (read_greedy_round)
            drafts, target_ids, margin_values = read_greedy_round(draft_ids, checked.logits[0], margins)
            accepted = longest_agreeing_prefix(drafts, target_ids)
            result.drafted_per_round.append(drafts)
            result.margins_per_round.append(margin_values if drafting else [0.0] * k)
            new = drafts[:accepted] + [target_ids[accepted]]
            # built on the device from what it already holds: no host-to-device copy either
            bonus = checked.logits[0, accepted].argmax(-1, keepdim=True)
            new_ids = torch.cat([draft_ids[:accepted], bonus]).view(1, -1)
        else:
            accepted, next_token = accept_sampled(draft_ids, draft_probs, token_probs(checked.logits[0], temperature),
                                                  generator) if drafting else (
                0, int(choose_token(checked.logits[0, 0], temperature, generator)))
            new = draft_ids[:accepted].tolist() + [next_token]
            new_ids = torch.tensor([new], dtype=torch.int64, device=device)
        result.accepted_per_round.append(accepted)
        if emit_tokens(result.tokens, new, eos, max_new_tokens):
            return result
        # Extend the head with the target's features at positions position..position+accepted, each paired with the
        # token one position later: the accepted drafts and then next_token (no more once drafting has stopped).
        if drafts_fit(seen, k, draft_limit):
            features = head.target_feature(checked)[:, : accepted + 1]
            head_out = head(new_ids, features, range(position, position + accepted + 1), from_target=True,
                            last_logits_only=True)
        last = new_ids[0, -1]
        position += accepted + 1


@torch.inference_mode()  # one mode for the whole generation: every cache update inside it
def plain_generate(target: TargetModel, prompt_ids: Sequence[int], *, max_new_tokens: int, temperature: float = 0.0,
                   eos_ids: Sequence[int] = (), generator: torch.Generator | None = None) -> list[int]:
    """The baseline: one target forward per token."""
    if max_new_tokens < 1 or not prompt_ids:
        raise ValueError("need max_new_tokens >= 1 and a non-empty prompt")
    eos, n = set(eos_ids), len(prompt_ids)
    token, _, _ = prefill(target, None, prompt_ids, lambda logits: choose_token(logits, temperature, generator))
    tokens: list[int] = []
    for position in range(n, n + max_new_tokens):
        if emit_tokens(tokens, [int(token)], eos, max_new_tokens):
            return tokens
        logits = target(token.view(1, 1), range(position, position + 1), last_logits_only=True).logits
        token = choose_token(logits[0, -1], temperature, generator)
    return tokens
