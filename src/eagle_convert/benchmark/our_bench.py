"""`bench_target`: a draft head on its target with our bundled runner (engines/our_runner.py), through the bench loop
every engine shares (loop.py): warm-up outside the clock, the speculative run, then plain decoding of the same ids for
the baseline, and optionally the reference head (--reference-draft) on the same loaded target and prompts."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from ..checkpoint.index import Checkpoint
from ..conversion.validate import check_sizes
from ..engines.our_runner import OursEngine, PlainEngine
from ..runner.draft_gate import draft_position_limit
from ..runner.heads import aux_layer_ids_for, build_draft_head
from ..runner.model import TargetModel
from ..runner.precision import runtime_environment
from ..runner.text_model import runner_target
from ..runner.trees.shapes import TreeShape, check_tree_for_head
from ..settings.bench import DecodeSettings
from ..spec import DraftSpec
from .bench_report import BenchReport
from .loop import run_baseline, run_conversations
from .session import Session, check_lossless, load_target, open_session, resolve_device_dtype
from .settings import report_settings

Head = tuple[DraftSpec, Callable[[str], torch.Tensor]]  # a head's spec and its tensors (canonical names)


def bench_target(target: Checkpoint, head: Head, decode: DecodeSettings, shape: TreeShape, *, device: str = "auto",
                 dtype: str | torch.dtype = "auto", baseline: bool = True, progress: bool = True,
                 reference: Head | None = None, target_path: str | Path | None = None,
                 hot_token_ids: torch.Tensor | None = None) -> BenchReport:
    """Bench `head` on the opened `target` (a local folder; `target_path`: its name in the report, by default the
    folder). `reference`: another head, benched after it with the same seed and no baseline: `.reference`.
    `hot_token_ids`: decode.token_map's ids (token_map.py), each head's LM head restricted to them."""
    if decode.chat_template not in ("auto", "none"):
        raise ValueError(f"chat_template must be 'auto' or 'none', got {decode.chat_template!r}")
    if decode.temperature < 0:
        raise ValueError("temperature must be >= 0")
    target_path = str(target_path if target_path is not None else target.label)
    device, dtype = resolve_device_dtype(device, dtype)
    session = open_session(target_path, decode.prompts, chat_template=decode.chat_template,
                           ignore_eos=decode.ignore_eos)
    view = runner_target(target)
    session.max_positions = view.config.get("max_position_embeddings")
    session.check_first_turns(decode.max_new_tokens)
    num_layers = view.config["num_hidden_layers"]
    spec, get_tensor = head
    model = _load_target(target, dtype, device, aux_layer_ids_for(spec, num_layers))

    token_map = None if hot_token_ids is None else {"path": str(decode.token_map), "hot_tokens": len(hot_token_ids),
                                                    "vocab_size": model.config.vocab_size}

    def settings(spec: DraftSpec, model: TargetModel, baseline: bool) -> dict:
        return report_settings(target_path, shape, decode, device=str(device),
                               dtype=str(dtype).removeprefix("torch."), use_template=session.use_template,
                               baseline=baseline, num_prompts=len(session.prompts), draft_kind=spec.kind,
                               aux_layer_ids=list(model.aux_layer_ids), text_only=view.text_only, token_map=token_map)

    report = _bench_head(session, model, spec, get_tensor, shape, decode, baseline=baseline, progress=progress,
                         hot_token_ids=hot_token_ids)
    report.settings = settings(spec, model, baseline)
    report.environment = runtime_environment(device)
    if reference is not None:
        ref_spec, ref_get = reference
        ref_model = model.with_aux_layer_ids(aux_layer_ids_for(ref_spec, num_layers))
        report.reference = _bench_head(session, ref_model, ref_spec, ref_get, shape, decode, baseline=False,
                                       progress=progress, hot_token_ids=hot_token_ids, what="bench (reference draft)")
        report.reference.settings = settings(ref_spec, ref_model, False)
    check_lossless(report)
    return report


def _bench_head(session: Session, target: TargetModel, spec: DraftSpec, get_tensor, shape: TreeShape,
                decode: DecodeSettings, *, baseline: bool, progress: bool,
                hot_token_ids: torch.Tensor | None = None, what: str = "bench") -> BenchReport:
    check_sizes(spec, target.config.hidden_size, target.config.vocab_size, session.target_path)
    head = build_draft_head(spec, get_tensor, target_embedding=target.embed_weight,
                            target_lm_head=target.lm_head_weight, dtype=target.dtype, device=target.device,
                            hot_token_ids=hot_token_ids)
    check_tree_for_head(shape, spec.vocab_size if head.draft_to_target is None else len(head.draft_to_target))
    limit = draft_position_limit(spec.extra, session.max_positions)  # where vLLM stops drafting
    engine, plain = OursEngine(target, head, shape, limit), PlainEngine(target) if baseline else None
    request = dict(max_new_tokens=decode.max_new_tokens, temperature=decode.temperature, seed=decode.seed)
    first_turns = [session.encode([{"role": "user", "content": p.turns[0]}], p) for p in session.prompts]
    # room for the longest first turn, its answer and one round's rows; later turns may still grow the caches
    longest = max(map(len, first_turns)) + decode.max_new_tokens + 2 * (shape.nodes + 1)
    for runner in filter(None, (engine, plain)):
        runner.reserve(longest)
        runner.warm_up(first_turns[0], stop_token_ids=session.eos, **request)
    run = run_conversations(session, engine, shape, progress=progress, what=what, **request)
    if plain is not None:
        run_baseline(run, plain, eos=session.eos, progress=progress, **request)
    return BenchReport(settings={}, prompts=run.prompts)


_loaded: dict | None = None  # inside targets_loaded_once: (folder, dtype, device) -> the target loaded there


@contextmanager
def targets_loaded_once() -> Iterator[None]:
    """Within: benches of the same target folder, dtype and device share one loaded target (`bench --tree-sweep`
    runs one pair under many shapes). Sharing its caches is safe: every forward writes a position before any query
    reads it (runner/layers.py)."""
    global _loaded
    outer, _loaded = _loaded, {}
    try:
        yield
    finally:
        _loaded = outer


def _load_target(target: Checkpoint, dtype: torch.dtype, device: torch.device, aux_layer_ids) -> TargetModel:
    if _loaded is None:
        return load_target(target, dtype=dtype, device=device, aux_layer_ids=aux_layer_ids)
    key = (str(target.label), dtype, str(device))
    if key not in _loaded:
        _loaded[key] = load_target(target, dtype=dtype, device=device)
    return _loaded[key].with_aux_layer_ids(aux_layer_ids)
