"""The DFlash-head fuzz family (issue 33): the tiny DFlash heads of src/eagle_convert/testing/dflash.py (z-lab,
z-lab Qwen3DFlashDraftModel, JetSpec's causal variant, speculators) beside their 4-layer target, damaged in their
DFlash keys (mask token, target layer ids: negative, huge, unsorted, repeated, past the target's layers, the last
layer; block size 0 / huge / negative; causality of the wrong type; each deleted) and in their safetensors file
(support/fuzz_mutations.py's header, data and NaN/Inf damage), read by `convert --to dflash` and
`--to speculators-dflash`.

The oracle: a refusal as every family's; or a faithful output: every tensor equal, bit for bit and in dtype, to the
source as safetensors' own loader reads the (damaged) file, no tensor added or left out, and the DFlash facts (mask
token, block size, causality, target layer ids in the output convention, docs/taps.md) equal the source's."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file

from eagle_convert.testing.dflash import build_dflash_set, read_dflash
from support.fuzz_family import Family, Run
from support.fuzz_mutations import mutate_safetensors

HEADS = ("zlab", "zlab-qwen3", "jetspec", "speculators")
LAYOUTS = ("dflash", "speculators-dflash")
ODD = [10**30, 2**63, -1, 0, 1.5, "2", None, [], True, {"n": 1}, "x" * 5000]
ODD_IDS = [[-1, 2], [0, 10**30], [2, 0], [0, 4], [0, 3], [3], [0, 0], [], [0.5, 2], ["0", "2"], [[0], [2]],
           list(range(4)) * 3, [0, 2**63], [-(2**63), 1]]
BLOCKS = [0, -1, 1, 2, 10**30, 2**31, 2**63, 1.5, "4", None, True]


def build(root: Path) -> dict[str, Path]:
    return build_dflash_set(root, layers=1)


def copy_head(rng: random.Random, fx: dict[str, Path], folder: Path) -> tuple[str, Path]:
    name = rng.choice(HEADS)
    shutil.copytree(fx[name], folder / "head")
    return name, folder / "head"


def facts(head: Path) -> dict:
    return {k: v for k, v in read_dflash(head).items() if k != "config"}


def output_problem(out: Path, head: Path) -> str | None:
    """Tensors bit-equal (and of the same dtype) to the source as safetensors reads it; the DFlash facts kept."""
    source, written = load_file(head / "model.safetensors"), load_file(out / "model.safetensors")
    if source.keys() != written.keys():
        return f"tensors added or left out: {sorted(source.keys() ^ written.keys())[:3]}"
    for name, t in source.items():
        w = written[name]
        if t.dtype != w.dtype or t.shape != w.shape or not torch.equal(
                t.contiguous().view(-1).view(torch.uint8), w.contiguous().view(-1).view(torch.uint8)):
            return f"{name} differs from the source as safetensors reads it"
    try:
        want = facts(head)
    except (KeyError, TypeError, ValueError) as e:
        return f"converted a head whose DFlash facts do not read ({type(e).__name__}: {e})"
    if (got := facts(out)) != want:
        return f"DFlash facts changed: {got} != {want}"
    return None


def command(rng: random.Random, fx: dict[str, Path], head: Path, folder: Path, what: str,
            must_succeed: bool = False, layout: str | None = None) -> Run:
    layout = layout or rng.choice(LAYOUTS)
    out = folder / "out"
    argv = ["convert", str(head), "--target", str(fx["target"]), "-o", str(out), "--to", layout, "-q"]

    def judge(outcome) -> str | None:
        if outcome.exit_code != 0:
            return f"exit {outcome.exit_code}: {outcome.stderr[-300:]!r}"
        return output_problem(out, head)

    return Run(f"{what}; --to {layout}", argv, [head, fx["target"]], [out], judge, seconds=60.0,
               must_succeed=must_succeed)


def set_key(head: Path, key: str, value) -> str:
    """Set (or delete: value KeyError) one DFlash key where the head's layout keeps it."""
    path = head / "config.json"
    config = json.loads(path.read_text())
    place = config if "speculators_model_type" in config else config["dflash_config"]
    if value is KeyError:
        place.pop(key, None)
    else:
        place[key] = value
    path.write_text(json.dumps(config))
    return f"{key} = {'deleted' if value is KeyError else repr(value)[:40]}"


# ---- the mutations --------------------------------------------------------------------------------------------------
def undamaged(rng, fx, folder: Path) -> Run:
    name, head = copy_head(rng, fx, folder)
    return command(rng, fx, head, folder, f"{name} undamaged", must_succeed=True)


def layer_ids(rng, fx, folder: Path) -> Run:
    name, head = copy_head(rng, fx, folder)
    key = "aux_hidden_state_layer_ids" if name == "speculators" else "target_layer_ids"
    what = set_key(head, key, rng.choice(ODD_IDS + ODD + [KeyError]))
    return command(rng, fx, head, folder, f"{name} {what}")


def dflash_key(rng, fx, folder: Path) -> Run:
    name, head = copy_head(rng, fx, folder)
    causal = "sliding_window_non_causal" if name == "speculators" else "causal"
    key = rng.choice(["mask_token_id", "block_size", causal])
    values = {"block_size": BLOCKS, "mask_token_id": [255, 0, 256, 10**30] + ODD, causal: [False, 0, 1] + ODD}[key]
    what = set_key(head, key, rng.choice(values + [KeyError]))
    return command(rng, fx, head, folder, f"{name} {what}")


def tensors(rng, fx, folder: Path) -> Run:
    name, head = copy_head(rng, fx, folder)
    mutation = mutate_safetensors(rng, head / "model.safetensors")
    return command(rng, fx, head, folder, f"{name} model.safetensors: {mutation.what}")


MUTATIONS = {"undamaged": undamaged, "layer-ids": layer_ids, "dflash-key": dflash_key, "tensors": tensors}
FAMILY = Family("dflash", build, MUTATIONS, {"undamaged": 0.5})


# ---- the seeds: what this family found (ids of the wrong type once escaped as a TypeError or were read as ints) ----
def seed_ids(head_name: str, value, layout: str):
    def run(rng, fx, folder: Path) -> Run:
        shutil.copytree(fx[head_name], folder / "head")
        key = "aux_hidden_state_layer_ids" if head_name == "speculators" else "target_layer_ids"
        what = set_key(folder / "head", key, value)
        return command(random.Random(layout), fx, folder / "head", folder, f"{head_name} {what}", layout=layout)
    return run


SEEDS = {"dflash target_layer_ids ['0', '2'] (read as ints)": seed_ids("zlab", ["0", "2"], "dflash"),
         "dflash target_layer_ids [[0], [2]] (TypeError)": seed_ids("zlab-qwen3", [[0], [2]], "speculators-dflash"),
         "dflash aux_hidden_state_layer_ids -1 (TypeError)": seed_ids("speculators", -1, "dflash")}
