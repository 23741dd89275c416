"""The MTP-target fuzz family (issue 33): tiny targets that carry MTP layers (src/eagle_convert/testing/mtp_targets.py:
MiMo, DeepSeek-V3 in block FP8, GLM-4.5), damaged in their config (every count and key: 10**30, 2**63, negatives, zero,
wrong types, deleted) and in their MTP shard (tensors left out or added, shapes and dtypes changed, FP8 scales of
other shapes or dtypes), read by `convert --mtp` (both layouts) and `inspect`.

The oracle: a refusal as every family's, within the time and memory bound (a count of 10**30 that drives a loop is a
hang the runner reports); `inspect` that exits 0 without a traceback; a `convert --mtp` whose every output tensor
equals, bit for bit, its source as safetensors' own loader reads the (damaged) file."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from support.fuzz_family import Family, Run

FIXTURES = {"mimo": {}, "deepseek_v3": {"fp8": True}, "glm4_moe": {}}
ODD_COUNTS = [10**30, 2**63, 2**31, 10**6, -1, 0, 1.5, "2", None, [], True, {"n": 1}]
COUNT_KEYS = ("num_nextn_predict_layers", "n_routed_experts", "num_hidden_layers", "hidden_size", "vocab_size",
              "num_experts_per_tok", "first_k_dense_replace", "intermediate_size", "moe_intermediate_size",
              "num_attention_heads", "num_key_value_heads", "head_dim", "kv_lora_rank", "q_lora_rank",
              "n_shared_experts", "n_group", "topk_group")


def build(root: Path) -> dict[str, Path]:
    from eagle_convert.testing.mtp_targets import MtpFixture, build_mtp_target

    return {family: build_mtp_target(root / family, MtpFixture(family, **options)).path
            for family, options in FIXTURES.items()}


def copy_target(rng: random.Random, targets: dict[str, Path], folder: Path) -> tuple[str, Path]:
    family = rng.choice(sorted(targets))
    shutil.copytree(targets[family], folder / "target")
    return family, folder / "target"


def mtp_shard(target: Path) -> Path:
    return sorted(target.glob("model-*.safetensors"))[-1]  # the MTP layer is alone in the last shard


def relist(target: Path, shard: Path, names: set[str]) -> None:
    """The index's weight map for `shard` made to name exactly `names`."""
    index_path = target / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    weight_map = {n: f for n, f in index["weight_map"].items() if f != shard.name}
    index["weight_map"] = weight_map | {n: shard.name for n in sorted(names)}
    index_path.write_text(json.dumps(index))


def command(rng: random.Random, target: Path, folder: Path, what: str, which: str | None = None,
            must_succeed: bool = False) -> Run:
    which = which or rng.choice(["convert", "convert-sglang", "inspect", "inspect-json"])
    out = folder / "out"
    argv = {"convert": ["convert", "--mtp", str(target), "-o", str(out), "-q"],
            "convert-sglang": ["convert", "--mtp", str(target), "-o", str(out), "--to", "sglang", "-q"],
            "inspect": ["inspect", str(target)], "inspect-json": ["inspect", str(target), "--json"]}[which]

    def judge(outcome) -> str | None:
        if outcome.exit_code != 0:
            return f"exit {outcome.exit_code}: {outcome.stderr[-300:]!r}"
        return output_problem(out, target) if which.startswith("convert") else None

    return Run(f"{what}; {which}", argv, [target], [out], judge, seconds=60.0, must_succeed=must_succeed)


def output_problem(out: Path, target: Path) -> str | None:
    """Every copied tensor equal, bit for bit, to its source as safetensors reads it; every tensor of the MTP shard
    written or named as dropped (nothing left out in silence); every FP8 weight with a float32 block scale of its
    shape (an engine reads the weight through it)."""
    provenance = json.loads((out / "eagle_convert.json").read_text())
    written = {}
    for f in sorted(out.glob("*.safetensors")):
        written.update(load_file(f))
    sources = {s["name"] for record in provenance["tensors"].values() for s in record["sources"]}
    dropped = {d["name"] if isinstance(d, dict) else d for d in provenance.get("dropped", [])}  # {name, reason}
    left_out = set(load_file(mtp_shard(target))) - sources - dropped
    if left_out:
        return f"MTP tensors neither written nor named as dropped: {sorted(left_out)[:3]}"
    if problem := fp8_problem(written):
        return problem
    for name, record in provenance["tensors"].items():
        if record["how"] != "copy":
            continue
        (src,) = record["sources"]
        expected = load_file(src["file"])[src["name"]]
        if name not in written or expected.dtype != written[name].dtype or not torch.equal(
                expected.view(-1).view(torch.uint8), written[name].contiguous().view(-1).view(torch.uint8)):
            return f"{name} differs from {src['name']} as safetensors reads it"
    return None


def fp8_problem(written: dict[str, torch.Tensor]) -> str | None:
    for name, t in written.items():
        if t.dtype not in (torch.float8_e4m3fn, torch.float8_e5m2) or t.dim() != 2:
            continue
        scale = written.get(name + "_scale_inv")
        want = [-(-d // 128) for d in t.shape]
        if scale is None or scale.dtype != torch.float32 or list(scale.shape) != want:
            return f"FP8 {name} written with scale {None if scale is None else (scale.dtype, list(scale.shape))}"
    return None


# ---- the mutations --------------------------------------------------------------------------------------------------
def undamaged(rng, targets, folder: Path) -> Run:
    family, target = copy_target(rng, targets, folder)
    which = rng.choice(["convert", "inspect"] + (["convert-sglang"] if family != "mimo" else []))
    return command(rng, target, folder, f"{family} undamaged", which, must_succeed=True)


def set_config(target: Path, key: str, value) -> None:
    config = json.loads((target / "config.json").read_text())
    if value is KeyError:
        config.pop(key, None)
    else:
        config[key] = value
    (target / "config.json").write_text(json.dumps(config))


def config_count(rng, targets, folder: Path) -> Run:
    family, target = copy_target(rng, targets, folder)
    config = json.loads((target / "config.json").read_text())
    keys = sorted(set(COUNT_KEYS) & set(config)) + sorted(k for k, v in config.items() if type(v) is int)
    key = rng.choice(keys)
    value = rng.choice(ODD_COUNTS + [KeyError])
    set_config(target, key, value)
    return command(rng, target, folder, f"{family} {key} = {'deleted' if value is KeyError else repr(value)}")


def config_key(rng, targets, folder: Path) -> Run:
    family, target = copy_target(rng, targets, folder)
    config = json.loads((target / "config.json").read_text())
    key = rng.choice(sorted(config))
    value = rng.choice(ODD_COUNTS + ["x" * 5000, {"a": [1]}, KeyError])
    set_config(target, key, value)
    return command(rng, target, folder, f"{family} config {key} = {'deleted' if value is KeyError else value!r:.40}")


def shard_tensors(rng, targets, folder: Path, how: str | None = None, family: str | None = None,
                  which: str | None = None) -> Run:
    family, target = copy_target(rng, {family: targets[family]} if family else targets, folder)
    shard = mtp_shard(target)
    tensors = load_file(shard)
    name = rng.choice(sorted(tensors))
    how = how or rng.choice(["drop", "extra", "shape", "dtype", "scale-shape", "scale-dtype", "empty"])
    scales = sorted(n for n in tensors if n.endswith("_scale_inv"))
    if how.startswith("scale") and scales:
        name = rng.choice(scales)
    if how == "drop":
        del tensors[name]
    elif how == "extra":
        prefix = name.rsplit(".", 2)[0]
        tensors[f"{prefix}.extra_{rng.randrange(9)}.weight"] = torch.zeros(rng.choice([(4,), (4, 4)]))
    elif how in ("shape", "scale-shape"):
        t = tensors[name]
        tensors[name] = torch.zeros(rng.choice([(1,), (t.shape[0] + 1,) + tuple(t.shape[1:]), (2, 2)]), dtype=t.dtype)
    elif how in ("dtype", "scale-dtype"):
        tensors[name] = tensors[name].to(rng.choice([torch.float16, torch.bfloat16, torch.int32, torch.float8_e5m2,
                                                     torch.float64]))
    else:
        tensors = {}
    if tensors:
        save_file({k: t.contiguous() for k, t in tensors.items()}, str(shard), metadata={"format": "pt"})
        relist(target, shard, set(tensors))  # the index lists what the shard holds: the damage is to the layer
    else:
        shard.write_bytes(b"")
    return command(rng, target, folder, f"{family} MTP shard: {how} {name}", which)


MUTATIONS = {"undamaged": undamaged, "config-count": config_count, "config-key": config_key,
             "shard-tensors": shard_tensors}
FAMILY = Family("mtp", build, MUTATIONS, {"undamaged": 0.5, "config-count": 2})


# ---- the seeds: issue 29's count cases ------------------------------------------------------------------------------
def seed_count(family: str, key: str, which: str):
    def run(rng, targets, folder: Path) -> Run:
        shutil.copytree(targets[family], folder / "target")
        set_config(folder / "target", key, 10**30)
        return command(rng, folder / "target", folder, f"{family} {key} = 10**30", which)
    return run


SEEDS = {"num_nextn_predict_layers 10**30 (convert --mtp)": seed_count("deepseek_v3", "num_nextn_predict_layers",
                                                                        "convert"),
         "num_nextn_predict_layers 10**30 (inspect)": seed_count("deepseek_v3", "num_nextn_predict_layers", "inspect"),
         "n_routed_experts 10**30 (convert --mtp)": seed_count("deepseek_v3", "n_routed_experts", "convert"),
         "n_routed_experts 10**30 (inspect)": seed_count("deepseek_v3", "n_routed_experts", "inspect")}
