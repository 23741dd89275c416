"""What the EAGLE-3 variant tests share: the layouts a variant is written to, a head read back as the runner builds
it, and a config edit (None deletes a key; eagle_config is merged)."""

from __future__ import annotations

import json

from eagle_convert.checkpoint.index import Checkpoint
from eagle_convert.draft.load import load_draft, tensor_reader
from eagle_convert.io.source import LocalSource
from eagle_convert.runner.heads import build_draft_head

LAYOUTS = ("vllm", "speculators", "sglang")


def load(path, target_dir):
    return load_draft(Checkpoint(LocalSource(path)), json.loads((target_dir / "config.json").read_text()))


def runner_head(head_or_dir, target_tensors, target_dir=None):
    head = load(head_or_dir, target_dir) if target_dir is not None else head_or_dir
    return build_draft_head(head.spec, tensor_reader(head),
                            target_embedding=target_tensors["model.embed_tokens.weight"],
                            target_lm_head=target_tensors["lm_head.weight"]), head.spec


def edit_config(folder, **changes):
    cfg = json.loads((folder / "config.json").read_text())
    for key, value in changes.items():
        if key == "eagle_config":
            cfg.setdefault("eagle_config", {}).update(value)
        elif value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    (folder / "config.json").write_text(json.dumps(cfg))
