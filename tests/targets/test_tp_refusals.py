"""Every malformed per-rank target is refused by name: a typed error, one paragraph from the CLI with exit code 1
saying what to do next, and nothing written (issue 15)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from eagle_convert import errors
from eagle_convert.cli.main import main
from eagle_convert.testing.ranks import save_trtllm_ranks, save_vllm_ranks
from eagle_convert.testing.tiny import TinyConfig, make_eagle1_head, make_target

CFG = TinyConfig(vocab_size=1000)


@pytest.fixture
def folders(tmp_path):
    tensors = make_target(tmp_path / "hf", CFG)
    make_eagle1_head(tmp_path / "draft", CFG, tensors, fc_bias=False)
    return tmp_path, tensors


def rewrite(path, change):
    state = load_file(path)
    change(state)
    save_file(state, str(path))


def edit_config(folder, **changes):
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(changes)
    (folder / "config.json").write_text(json.dumps(cfg))


def vllm(tmp, tensors, tp=4, **kw):
    save_vllm_ranks(tmp / "t", CFG.hf_config(), tensors, tp, **kw)
    return tmp / "t"


def last_rank_tail_nonzero(t, tensors):
    def poke(s):
        s["lm_head.weight"][-1, 3] = 1.0
    rewrite(t / "model-rank-3-part-0.safetensors", poke)


def quantized_sibling(t, tensors):
    for r in range(4):
        rewrite(t / f"model-rank-{r}-part-0.safetensors", lambda s: s.update({"lm_head.weight_scale": torch.ones(1)}))


def integer_head(t, tensors):
    for r in range(4):
        rewrite(t / f"model-rank-{r}-part-0.safetensors",
                lambda s: s.update({"lm_head.weight": s["lm_head.weight"].to(torch.int8)}))


def ragged_shard(t, tensors):
    rewrite(t / "model-rank-1-part-0.safetensors", lambda s: s.update({"lm_head.weight": s["lm_head.weight"][:200]}))


def mixed_dtypes(t, tensors):
    rewrite(t / "model-rank-2-part-0.safetensors",
            lambda s: s.update({"lm_head.weight": s["lm_head.weight"].to(torch.bfloat16)}))


def strip_heads(t):
    for r in range(2):
        rewrite(t / f"model-rank-{r}-part-0.safetensors",
                lambda s: [s.pop("lm_head.weight"), s.pop("model.embed_tokens.weight")])


def megatron(t, tensors):
    (t / "iter_0000100" / "mp_rank_00").mkdir(parents=True)
    (t / "iter_0000100" / "mp_rank_00" / "model_optim_rng.pt").write_bytes(b"\x80\x02")
    (t / "latest_checkpointed_iteration.txt").write_text("100")


def dcp(t, tensors):
    (t / ".metadata").write_bytes(b"\x80\x04")
    (t / "__0_0.distcp").write_bytes(b"")


def trt_engine(t, tensors):
    (t / "rank0.engine").write_bytes(b"engine")


# (name, how to build the folder from (tmp, tensors), what the message must say, the error type)
CASES = [
    ("missing rank", lambda tmp, ts: (vllm(tmp, ts) / "model-rank-2-part-0.safetensors").unlink(),
     "missing rank 2", errors.LayoutError),
    ("missing part", lambda tmp, ts: (vllm(tmp, ts, max_size=20_000) / "model-rank-1-part-1.safetensors").unlink(),
     "part numbers must run 0..k-1", errors.LayoutError),
    ("shards of different shapes", lambda tmp, ts: ragged_shard(vllm(tmp, ts), ts), "different shapes",
     errors.ShapeMismatchError),
    ("shards of different dtypes", lambda tmp, ts: mixed_dtypes(vllm(tmp, ts), ts), "different dtypes",
     errors.LayoutError),
    ("hidden size not the config's", lambda tmp, ts: edit_config(vllm(tmp, ts), hidden_size=128),
     "hidden_size is 128", errors.ShapeMismatchError),
    ("rows x tp not pad64(V)", lambda tmp, ts: edit_config(vllm(tmp, ts), vocab_size=1100),
     "pad64(vocab_size 1100) = 1152", errors.ShapeMismatchError),
    ("tp not dividing pad64(V)", lambda tmp, ts: vllm(tmp, ts, tp=3), "3 ranks, which do not divide",
     errors.ShapeMismatchError),
    ("padding rows not zero", lambda tmp, ts: last_rank_tail_nonzero(vllm(tmp, ts), ts), "Row 1023 of the gathered",
     errors.LayoutError),
    ("quantized sibling", lambda tmp, ts: quantized_sibling(vllm(tmp, ts), ts), "lm_head.weight_scale",
     errors.LayoutError),
    ("integer head", lambda tmp, ts: integer_head(vllm(tmp, ts), ts), "as int8: a quantized head",
     errors.LayoutError),
    ("untied config, one matrix", lambda tmp, ts: save_vllm_ranks(
        tmp / "t", CFG.hf_config(), {k: v for k, v in ts.items() if k != "lm_head.weight"}, 2),
     "tie_word_embeddings: false", errors.MissingTensorError),
    ("neither head nor embedding", lambda tmp, ts: strip_heads(vllm(tmp, ts, tp=2)),
     "hold neither lm_head.weight nor", errors.MissingTensorError),
    ("two saves in one folder", lambda tmp, ts: save_vllm_ranks(vllm(tmp, ts, tp=2), CFG.hf_config(), ts, 2, pp=2),
     "holds both model-", errors.LayoutError),
    ("draft vocab differs", lambda tmp, ts: save_vllm_ranks(
        tmp / "t", {**CFG.hf_config(), "vocab_size": 1024},
        {**ts, **{n: torch.cat([ts[n], torch.zeros(24, 64)]) for n in ("lm_head.weight", "model.embed_tokens.weight")}},
        2), "vocab_size is 1000 but the target", errors.ShapeMismatchError),
    ("trtllm without mapping", lambda tmp, ts: save_trtllm_ranks(tmp / "t", CFG.hf_config(), ts, 2)
     or edit_config(tmp / "t", mapping=None), "has no mapping with tp_size", errors.LayoutError),
    ("trtllm rank count", lambda tmp, ts: save_trtllm_ranks(tmp / "t", CFG.hf_config(), ts, 2)
     or edit_config(tmp / "t", mapping={"tp_size": 4, "pp_size": 1}), "needs exactly ranks 0..3", errors.LayoutError),
    ("trtllm rows not ceil(V/tp)", lambda tmp, ts: save_trtllm_ranks(tmp / "t", CFG.hf_config(), ts, 2)
     or edit_config(tmp / "t", vocab_size=990), "ceil(vocab_size 990 / tp 2) = 495", errors.ShapeMismatchError),
    ("megatron", lambda tmp, ts: megatron(vllm(tmp, ts), ts), "Megatron-LM per-rank checkpoint", errors.LayoutError),
    ("dcp", lambda tmp, ts: dcp(vllm(tmp, ts), ts), "PyTorch distributed checkpoint", errors.LayoutError),
    ("trt engine", lambda tmp, ts: trt_engine(vllm(tmp, ts), ts), "compiled TensorRT-LLM engine", errors.LayoutError),
]


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def assert_refused(result, match, out):
    assert result.exit_code == 1, result.output
    err = result.stderr
    assert err.startswith("error: ") and "Traceback" not in err and "\n\n" not in err.strip()
    assert match in " ".join(err.split()), err
    assert not out.exists() and not list(out.parent.glob(f".{out.name}.eagle-convert-*"))


@pytest.mark.parametrize("name,make,match,kind", CASES, ids=[c[0] for c in CASES])
def test_refused_by_name(folders, name, make, match, kind):
    import eagle_convert

    tmp, tensors = folders
    make(tmp, tensors)
    out = tmp / "out"
    with pytest.raises(kind) as info:
        eagle_convert.convert(str(tmp / "draft"), str(tmp / "t"), out, to="vllm-v0")
    assert info.value.hint
    assert_refused(cli("convert", tmp / "draft", "-t", tmp / "t", "-o", out, "--to", "vllm-v0"), match, out)


def test_megatron_and_dcp_paragraph_says_how_to_export(folders):
    tmp, tensors = folders
    megatron(vllm(tmp, tensors), tensors)
    result = cli("inspect", tmp / "t")
    text = " ".join(result.stderr.split())
    assert result.exit_code == 1 and "Hugging Face checkpoint" in text and "weights_only=True" in text


@pytest.mark.parametrize("pattern,match", [
    ("nothing-{rank}.safetensors", "matches no file"),
    ("model-{rank}-{shard}.safetensors", "has the field {shard}"),
    ("model-{part}.safetensors", "has no rank field"),
])
def test_bad_target_pattern(folders, pattern, match):
    tmp, tensors = folders
    vllm(tmp, tensors)
    out = tmp / "out"
    assert_refused(cli("convert", tmp / "draft", "-t", tmp / "t", "-o", out, "--target-pattern", pattern), match, out)


def test_exit_code_from_a_real_process(folders):
    tmp, tensors = folders
    (vllm(tmp, tensors) / "model-rank-0-part-0.safetensors").unlink()
    proc = subprocess.run([sys.executable, "-m", "eagle_convert", "convert", str(tmp / "draft"), "-t", str(tmp / "t"),
                           "-o", str(tmp / "out")], capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stderr.startswith("error: ") and "missing rank 0" in proc.stderr
    assert not (tmp / "out").exists()


def test_bench_refuses_a_per_rank_target(folders):
    tmp, tensors = folders
    vllm(tmp, tensors)
    result = cli("bench", "-t", tmp / "t", "-d", tmp / "draft", "--max-new-tokens", "2", "--no-baseline")
    assert result.exit_code == 1 and "saved per tensor-parallel rank" in " ".join(result.stderr.split())
