"""`bench_target`: acceptance and speed of a draft head on its target with our runner (engines/our_runner.py), driven by
the bench loop every engine shares (loop.py); and what every engine's bench shares: the prompts and how they are
encoded.

Each prompt is a conversation. Turn by turn, the user message is appended, the conversation is tokenized (chat
template or raw text), speculative decoding answers it, and, unless `baseline=False`, plain decoding of the target
answers the same tokens again. The speculative answer is appended as the assistant's message, so later MT-bench turns
are conditioned on the model's own earlier answers; the baseline sees the same conversation, so both always decode
the same input.

Lossless check (greedy, with a baseline): in float32 the two token sequences must be identical, otherwise
`VerificationError` is raised after the run with the full report attached as `.report`. In bf16/fp16 a verify pass
over k+1 tokens and a one-token decode step round differently, so near-ties may flip: the first divergence is reported.
At temperature > 0 the two runs draw different random numbers, so only the distribution is lossless (see
speculate.py); no token comparison is made.

Context length: a turn whose prompt tokens + max_new_tokens pass the target's max_position_embeddings is refused
(PromptTooLongError) rather than run at positions the target never saw, as vLLM's server refuses prompt + max_tokens
> max_model_len; first turns are checked before the target loads, later turns (which hold earlier answers) as they
come.

`BenchReport.to_dict()` schema (version 4), all times in seconds:
  schema_version: 4
  settings: {target, draft_kind, k (a tree: its levels), tree, max_new_tokens, temperature, seed, device, dtype,
             chat_template (bool: used), aux_layer_ids, baseline, ignore_eos, num_prompts, token_map (only with
             bench --token-map: {path, hot_tokens, vocab_size})}
  overall:  acceptance (see below), generated_tokens, wall_time_s, tokens_per_s,
            baseline_generated_tokens, baseline_wall_time_s, baseline_tokens_per_s, speedup  (baseline_* and speedup
            are null without a baseline)
  lossless: {mode: "exact" | "first_divergence" | "not_checked", identical: bool | null,
             diverged_prompts: [prompt ids]}
  prompts:  [{id, category (null unless the prompt has one), num_turns, prompt_tokens: [per turn],
             prompt_ids_sha256: [per turn], acceptance, generated_tokens, wall_time_s, tokens_per_s,
             baseline_generated_tokens, baseline_wall_time_s, baseline_tokens_per_s, speedup,
             first_divergence: null | {turn, index, speculative, baseline} (token ids; null past a sequence's end),
             output_token_ids: [per turn, the speculative answer], accepted_per_round: [per turn, [a per round]],
             drafting_disabled_rounds: rounds past the draft's position limit (runner/draft_gate.py; our runner's
             chains), null where an engine's counters cannot tell}]
  gate:     {passed: bool, checks: [{name, passed, message, ...}], min_acceptance_length: the floor asked for or
             null}  (gates.py; no checks: passed)
  engine (only when an engine decoded: bench --engine vllm / --engine-url): which engine ran, how, its counters
  compare (only with --compare): {ours: {settings, overall}, rows: [per prompt, compare.py]}
  positions (only when the draft's config was read): the position and RoPE checks run before the bench
             (positions/checks.py; keys in docs/long-context.md)
  environment (our runner only): {device, device_name, torch, python, threads, float32_matmul_precision,
             TORCH_ALLOW_TF32_CUBLAS_OVERRIDE, sdpa_backends; on CUDA also capability, cuda, cudnn, tf32_matmul,
             tf32_cudnn}  (runner/precision.py)
  reference (only with a reference draft): {settings, overall: {acceptance}, prompts: [{id, category, acceptance,
             accepted_per_round}]}
  context (only with --context-lengths, context.py): {lengths, documents_per_bucket, documents: {source, ids,
             sha256: {id: hex}}, protocol: {kept: "start", chat_template, questions}, draft_position_limit,
             buckets: [{label, length, prompts: [ids], prompt_tokens: [per prompt], acceptance,
             drafting_disabled_rounds, drafting_disabled_share, all_rejected_share, draft_vocab_coverage,
             generated_tokens, lossless: {checked, identical, diverged_prompts}, engine_counters (an engine only)}],
             reference (with a reference draft): {draft_position_limit, buckets}}
  acceptance = {k, histogram, drafts, drafted, accepted, mean_acceptance_length (tau), acceptance_rate,
                per_position_rates}  (metrics.py; ratios are null when no verify round ran)
  tree = {mode: "chain" | "dynamic" | "static", source, levels, nodes, + depth, top_k, tokens (dynamic) or choices
          (static)}  (tree_shapes.py); for trees acceptance.drafted counts nodes verified and acceptance gains
          tree: {nodes_per_round, predicted_mean_acceptance_length}  (tree_metrics.py)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

from ..checkpoint.index import Checkpoint
from ..checkpoint.read import read_tensor
from ..errors import MissingTensorError, VerificationError
from ..io.interrupts import immediate, pause_for_test
from ..io.source import LocalSource
from ..runner.model import TargetModel
from ..runner.text_model import runner_target
from ..runner.trees.shapes import TreeShape
from ..spec import DraftSpec
from .bench_report import BenchReport
from .chat import ChatTokenizer, load_eos_token_ids
from .prompts import (
    BUILTIN_PROMPTS,
    Prompt,
    PromptFileError,
    check_prompt_fits,
    encode_fitting,
    load_prompts,
    sample_ids,
)
from .prompts import _prompt as prompt_from_row
from .unknown_tokens import warn_mostly_unknown

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}


def resolve_device_dtype(device: str, dtype: str | torch.dtype) -> tuple[torch.device, torch.dtype]:
    """"auto" device: CUDA when present; "auto" dtype: bf16 on CUDA, fp32 on CPU."""
    device = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else
                          "cpu" if device == "auto" else device)
    if isinstance(dtype, torch.dtype):
        return device, dtype
    if dtype == "auto":
        return device, torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use auto, {', '.join(DTYPES)}")
    return device, DTYPES[dtype]


def local_checkpoint(target: str | Path | Checkpoint) -> Checkpoint:
    """The target as opened once per bench (a path: opened here)."""
    return target if isinstance(target, Checkpoint) else Checkpoint(LocalSource(target))


def load_target(target: str | Path | Checkpoint, *, dtype: torch.dtype, device, aux_layer_ids=()) -> TargetModel:
    """A local HF folder (or its opened Checkpoint), read through the converter's checkpoint index: single or sharded
    safetensors, or `.bin` shards (weights_only), one tensor at a time."""
    ckpt = local_checkpoint(target)
    view = runner_target(ckpt)  # a multimodal checkpoint: its language model, text-only

    def get_tensor(name: str) -> torch.Tensor:
        name = view.saved_name(name)
        if not ckpt.has(name):
            raise MissingTensorError(f"The target {ckpt.label} has no tensor {name}.",
                                     "The target checkpoint is incomplete, or its layout is not a Llama-family one.")
        return read_tensor(ckpt, ckpt.ref(name))

    _check_layer_count(ckpt, view)
    return TargetModel(view.config, get_tensor, dtype=dtype, device=device, aux_layer_ids=aux_layer_ids)


def _check_layer_count(ckpt: Checkpoint, view) -> None:
    """`num_hidden_layers` drives per-layer tables and loops: bound it by the layers the tensors hold before anything
    is sized by it (a config promising 10**30 layers once hung or overflowed the runner)."""
    layers = view.config.get("num_hidden_layers")
    if not isinstance(layers, int) or isinstance(layers, bool):
        return  # the runner's own config check names a missing or wrong-typed key
    last = view.saved_name(f"model.layers.{layers - 1}.input_layernorm.weight")
    if layers < 1 or not ckpt.has(last):  # more layers than the config says is fine: MTP layers sit after the trunk
        held = sum(1 for i in range(4096) if ckpt.has(view.saved_name(f"model.layers.{i}.input_layernorm.weight")))
        raise MissingTensorError(
            f"The target {ckpt.label}'s config.json says num_hidden_layers = {layers}, but its tensors hold "
            f"{held} decoder layer(s) (model.layers.N.input_layernorm.weight).",
            "Fix num_hidden_layers in the target's config.json to the number of layers the checkpoint holds, or "
            "point --target at the complete checkpoint.")


@dataclass
class Session:
    """What every engine benched on a target shares: the prompts and how they are encoded."""
    target_path: str
    prompts: list[Prompt]
    tokenizer: ChatTokenizer | None
    use_template: bool
    eos: tuple[int, ...]
    max_positions: int | None = None  # the target's max_position_embeddings (None: unstated)

    def encode(self, messages: list[dict], prompt: Prompt) -> list[int]:
        if prompt.token_ids is not None:
            return list(prompt.token_ids)
        if self.use_template:
            return self.tokenizer.encode_chat(messages)
        return self.tokenizer.encode_text(self._text(messages))

    def _text(self, messages: list[dict]) -> str:
        return self.tokenizer.render(messages) if self.use_template else "\n\n".join(m["content"] for m in messages)

    def encode_turn(self, messages: list[dict], prompt: Prompt, max_new_tokens: int) -> list[int]:
        """The ids of the conversation so far, refused when they and max_new_tokens pass the target's positions;
        a text past them is refused from a bounded head, never encoded whole (prompts.encode_fitting)."""
        turn, limit = sum(m["role"] == "user" for m in messages) - 1, self.max_positions
        if prompt.token_ids is not None or limit is None:
            ids = self.encode(messages, prompt)
        else:
            ids = encode_fitting(self.tokenizer.tokenizer, self._text(messages), prompt, turn, max_new_tokens, limit)
            if not self.use_template:  # encode_text adds the tokenizer's special tokens: a short text, encoded again
                ids = self.tokenizer.encode_text(self._text(messages))
        check_prompt_fits(prompt, turn, len(ids), max_new_tokens, limit)
        return ids

    def check_first_turns(self, max_new_tokens: int) -> None:
        """Every prompt's first turn, before any work (later turns depend on the answers: checked as they come).
        Nothing written, no engine started yet: a CLI Ctrl-C while tokenizing acts at once (immediate)."""
        with immediate():
            for prompt in self.prompts:
                self.encode_turn([{"role": "user", "content": prompt.turns[0]}], prompt, max_new_tokens)


def open_session(target_path: str | Path, prompts, *, chat_template: str = "auto", ignore_eos: bool = False) -> Session:
    """The prompts and how they are encoded, without a target model (every engine encodes the same way). Called
    before any engine process starts: reading and tokenizing run inside immediate(), so a CLI Ctrl-C acts at once."""
    with immediate():
        return _open_session(target_path, prompts, chat_template, ignore_eos)


def _open_session(target_path: str | Path, prompts, chat_template: str, ignore_eos: bool) -> Session:
    if prompts is None:
        prompts = list(BUILTIN_PROMPTS)
    elif isinstance(prompts, (str, Path)):
        prompts = load_prompts(prompts)
    else:
        prompts = [_as_prompt(p, i) for i, p in enumerate(prompts, start=1)]
    pause_for_test("tokenizing")  # tests: a signal while the prompts are read and tokenized
    # Pre-tokenized prompts need no tokenizer (a target without tokenizer files can still be benched).
    needs_text = any(p.token_ids is None for p in prompts)
    tokenizer = ChatTokenizer.from_dir(target_path) if needs_text else None
    use_template = tokenizer is not None and chat_template == "auto" and tokenizer.chat_template is not None
    eos = () if ignore_eos else (tokenizer.eos_token_ids if tokenizer else load_eos_token_ids(target_path))
    if tokenizer is not None:  # the user's texts alone (no template around them): does the tokenizer read them?
        texts = [(p.id, sample_ids(tokenizer.tokenizer, "\n".join(p.turns))) for p in prompts if p.token_ids is None]
        warn_mostly_unknown(tokenizer.tokenizer, texts, "prompts")
    return Session(str(target_path), prompts, tokenizer, use_template, tuple(eos))


def _as_prompt(item: Prompt | str | dict, number: int) -> Prompt:
    """A Python caller's prompt: a Prompt, a string (one turn), or a dict read as a prompts-file line reads (else a
    dict's repr would be the prompt text)."""
    if isinstance(item, Prompt):
        return item
    if not isinstance(item, dict):
        return Prompt(str(number), (item,))
    try:
        return prompt_from_row(item, number)
    except (ValueError, KeyError, TypeError) as error:
        raise PromptFileError(f"prompts[{number - 1}] is not a prompt ({error}).",
                              'Give {"prompt": "..."}, {"turns": ["..."]} or {"prompt_ids": [1, 2, ...]}, a string or '
                              "a Prompt.") from error


def run_bench(target_path: str | Path | Checkpoint, draft_spec: DraftSpec,
              draft_get_tensor: Callable[[str], torch.Tensor], *, k: int = 3, max_new_tokens: int = 256,
              prompts: str | Path | Iterable[Prompt | str] | None = None, temperature: float = 0.0, seed: int = 0,
              device: str = "auto", dtype: str | torch.dtype = "auto", chat_template: str = "auto",
              baseline: bool = True, progress: bool = True, ignore_eos: bool = False,
              reference: tuple[DraftSpec, Callable[[str], torch.Tensor]] | None = None,
              tree: TreeShape | None = None) -> BenchReport:
    """The keyword form of `bench_target` (our_bench.py), for tests and scripts. `prompts`: None for the built-in set, a
    JSONL path, or Prompt objects / strings. `chat_template`: "auto" (the target's template when it has one, else raw
    text) or "none". `tree`: draft trees of this shape instead of k-token chains (None or mode "chain": chains)."""
    from ..settings.bench import DecodeSettings
    from .our_bench import bench_target

    decode = DecodeSettings(k=k, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
                            ignore_eos=ignore_eos, chat_template=chat_template, prompts=prompts)
    return bench_target(local_checkpoint(target_path), (draft_spec, draft_get_tensor), decode,
                        tree if tree is not None else TreeShape.chain(k), device=device, dtype=dtype,
                        baseline=baseline, progress=progress, reference=reference, target_path=target_path)


def check_lossless(report: BenchReport) -> None:
    lossless = report.lossless
    if lossless["mode"] == "exact" and not lossless["identical"]:
        first = next(p for p in report.prompts if p.first_divergence is not None)
        error = VerificationError(
            f"Speculative decoding changed the output in float32: prompt {first.id!r} diverges from plain greedy "
            f"decoding at {first.first_divergence} ({len(lossless['diverged_prompts'])} of {len(report.prompts)} "
            "prompts differ).",
            "The head cannot cause this. Either the target's top two logits nearly tie there (a (k+1)-token verify "
            "and a one-token step sum in different orders), or the runner has a bug: please report it with the prompt "
            "and both checkpoints.")
        error.report = report
        raise error

