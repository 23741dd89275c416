"""`eagle_convert.bench`: resolve the draft through the format layer (any layout convert reads or writes), then run
the bundled draft/verify benchmark on the target."""

from __future__ import annotations

from pathlib import Path

from ..draft import load_draft, tensor_reader
from ..errors import LayoutError
from ..resolve import open_input
from .bench import BenchReport, run_bench


def bench(target: str, draft: str, *, k: int = 3, max_new_tokens: int = 256, prompts=None, temperature: float = 0.0,
          seed: int = 0, device: str = "auto", dtype: str = "auto", chat_template: str = "auto", baseline: bool = True,
          progress: bool = False, drop: tuple[str, ...] = (), revision: str | None = None, token: str | None = None,
          offline: bool | None = None, ignore_eos: bool = False) -> BenchReport:
    """Bench DRAFT on TARGET. A raw EAGLE-1 release uses the target's LM head and embedding in memory, so raw and
    converted heads give the same numbers. The target must be a local folder (the whole model runs)."""
    if not Path(target).is_dir():
        raise LayoutError(f"The bench target {target!r} is not a local folder.",
                          "bench runs the whole target: download it first (e.g. `hf download ORG/NAME --local-dir DIR`) "
                          "and pass the folder.")
    target_ckpt = open_input(target, role="target").checkpoint
    head = load_draft(open_input(draft, revision=revision, token=token, offline=offline, role="draft").checkpoint,
                      target_ckpt.config, drop=tuple(drop))
    return run_bench(target, head.spec, tensor_reader(head), k=k, max_new_tokens=max_new_tokens, prompts=prompts,
                     temperature=temperature, seed=seed, device=device, dtype=dtype, chat_template=chat_template,
                     baseline=baseline, progress=progress, ignore_eos=ignore_eos)
