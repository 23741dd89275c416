"""Targets saved per tensor-parallel rank (issue 15): convert splices the LM head (and embedding) gathered from vLLM /
SGLang sharded_state, vLLM PP+TP and TensorRT-LLM rank files, bit-identical to the whole-model matrix, reading only
those byte ranges. Fixtures come from eagle_convert.testing.ranks, which writes the files the way the engines do."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
import torch
from safetensors.torch import load_file
from support.convert import tree_fingerprint

import eagle_convert
from eagle_convert.testing.ranks import save_trtllm_ranks, save_vllm_ranks
from eagle_convert.testing.tiny import TinyConfig, make_eagle1_head, make_eagle3_head, make_target

V_ODD = 1000  # not a multiple of 64: vLLM pads to 1024, TRT-LLM at TP=8 to 1000 (at TP=3 to 1002)


def build(tmp_path, *, vocab=V_ODD, tied=False, head_kind="eagle1", head_embed=False):
    """A whole HF target (the truth), and a head for it; `head_embed`: the head carries no embedding of its own,
    so the output's embed_tokens comes from the target too."""
    cfg = TinyConfig(vocab_size=vocab, tie_word_embeddings=tied, num_hidden_layers=2 if head_kind == "eagle1" else 8)
    tensors = make_target(tmp_path / "hf", cfg)
    if head_kind == "eagle1":
        make_eagle1_head(tmp_path / "draft", cfg, tensors, fc_bias=False)
        if not head_embed:
            state = torch.load(tmp_path / "draft" / "pytorch_model.bin", weights_only=True)
            state.pop("embed_tokens.weight", None)
            torch.save(state, tmp_path / "draft" / "pytorch_model.bin")
    else:
        make_eagle3_head(tmp_path / "draft", cfg, tensors)
    return cfg, tensors


def convert(tmp_path, target, to="vllm", **kw):
    out = tmp_path / f"out-{target.name}-{to}"
    result = eagle_convert.convert(str(tmp_path / "draft"), str(target), out, to=to, **kw)
    return result, load_file(out / "model.safetensors"), json.loads((out / "eagle_convert.json").read_text())


def whole(tensors, name):
    return tensors.get(name, tensors["model.embed_tokens.weight"])  # tied: the embedding is the LM head


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("vocab", [V_ODD, 1024])
def test_vllm_tp_gather_is_bit_exact(tmp_path, tp, tied, vocab):
    cfg, tensors = build(tmp_path, vocab=vocab, tied=tied)
    save_vllm_ranks(tmp_path / "ranks", cfg.hf_config(), tensors, tp)
    result, out, prov = convert(tmp_path, tmp_path / "ranks", to="vllm-v0")  # v0 splices lm_head and embed_tokens
    assert torch.equal(out["lm_head.weight"], whole(tensors, "lm_head.weight"))
    assert torch.equal(out["embed_tokens.weight"], tensors["model.embed_tokens.weight"])
    how = prov["tensors"]["lm_head.weight"]["how"]
    assert how == f"gather tp={tp} dim 0, rows [0, {vocab})"
    sources = prov["tensors"]["lm_head.weight"]["sources"]
    assert [s["file"].rsplit("/", 1)[-1] for s in sources] == [f"model-rank-{r}-part-0.safetensors" for r in range(tp)]
    rows = -(-vocab // 64) * 64 // tp
    for r, s in enumerate(sources):
        f = tmp_path / "ranks" / f"model-rank-{r}-part-0.safetensors"
        begin, end = s["range"]
        assert end - begin == rows * cfg.hidden_size * 4
        assert s["sha256"] == hashlib.sha256(f.read_bytes()[begin:end]).hexdigest()
    # Only the LM head's (and embedding's) ranges are read: never a whole rank file.
    assert result.plan.bytes_read()["target"] == (1 if tied else 2) * tp * rows * cfg.hidden_size * 4


def test_runtime_dtype_and_parts_and_stale_index(tmp_path):
    """bf16 rank files under a config that says float32, three parts per rank, the copied index: the rank files'
    dtype is the output's (auto), and the gather equals the original cast to bf16."""
    cfg, tensors = build(tmp_path, head_embed=False)
    save_vllm_ranks(tmp_path / "ranks", cfg.hf_config(), tensors, 2, dtype=torch.bfloat16, max_size=20_000)
    assert len(list((tmp_path / "ranks").glob("model-rank-0-part-*.safetensors"))) == 3
    result, out, prov = convert(tmp_path, tmp_path / "ranks", to="vllm-v0")
    assert result.plan.dtype_name == "bfloat16"
    assert torch.equal(out["lm_head.weight"], tensors["lm_head.weight"].to(torch.bfloat16))
    assert torch.equal(out["embed_tokens.weight"], tensors["model.embed_tokens.weight"].to(torch.bfloat16))
    notes = " ".join(result.target.notes)
    assert "index.json is ignored" in notes and "hold bfloat16" in notes
    # An explicit dtype casts the gathered matrix, and provenance says both steps.
    (tmp_path / "out-ranks-vllm-v0").rename(tmp_path / "bf16")
    _, out32, prov32 = convert(tmp_path, tmp_path / "ranks", to="vllm-v0", dtype="float32")
    assert torch.equal(out32["embed_tokens.weight"], tensors["model.embed_tokens.weight"].to(torch.bfloat16).float())
    assert prov32["tensors"]["embed_tokens.weight"]["how"] == "gather tp=2 dim 0, rows [0, 1000), then cast " \
                                                             "bfloat16 -> float32"


@pytest.mark.parametrize("tied", [False, True])
def test_vllm_pp2_tp2(tmp_path, tied):
    cfg, tensors = build(tmp_path, tied=tied)
    save_vllm_ranks(tmp_path / "ranks", cfg.hf_config(), tensors, 2, pp=2)
    _, out, prov = convert(tmp_path, tmp_path / "ranks", to="vllm-v0")
    assert torch.equal(out["lm_head.weight"], whole(tensors, "lm_head.weight"))
    assert torch.equal(out["embed_tokens.weight"], tensors["model.embed_tokens.weight"])
    lm_files = {s["file"].rsplit("/", 1)[-1] for s in prov["tensors"]["lm_head.weight"]["sources"]}
    emb_files = {s["file"].rsplit("/", 1)[-1] for s in prov["tensors"]["embed_tokens.weight"]["sources"]}
    assert lm_files == {"model-pp-1-tp-0-part-0.safetensors", "model-pp-1-tp-1-part-0.safetensors"}
    assert emb_files == {"model-pp-0-tp-0-part-0.safetensors", "model-pp-0-tp-1-part-0.safetensors"}
    assert prov["tensors"]["lm_head.weight"]["how"] == "gather tp=2 dim 0 (pp stage 1 of 2), rows [0, 1000)"


def test_gemma_style_embedding_only(tmp_path):
    cfg, tensors = build(tmp_path, tied=True)
    save_vllm_ranks(tmp_path / "ranks", cfg.hf_config(), tensors, 4, lm_head_module=False)
    _, out, _ = convert(tmp_path, tmp_path / "ranks", to="vllm-v0")
    assert torch.equal(out["lm_head.weight"], tensors["model.embed_tokens.weight"])
    assert torch.equal(out["embed_tokens.weight"], tensors["model.embed_tokens.weight"])


@pytest.mark.parametrize("embedding", ["replicated", "vocab", "vocab-chunk", "hidden"])
@pytest.mark.parametrize("tied", [False, True])
def test_trtllm_tp4(tmp_path, embedding, tied):
    cfg, tensors = build(tmp_path, vocab=1001, tied=tied)  # 1001 % 4 != 0: TRT-LLM pads to 1004
    save_trtllm_ranks(tmp_path / "ranks", cfg.hf_config(), tensors, 4, embedding=embedding)
    _, out, prov = convert(tmp_path, tmp_path / "ranks", to="vllm-v0")
    assert torch.equal(out["lm_head.weight"], whole(tensors, "lm_head.weight"))
    assert torch.equal(out["embed_tokens.weight"], tensors["model.embed_tokens.weight"])
    assert prov["tensors"]["lm_head.weight"]["how"] == "gather tp=4 dim 0, rows [0, 1001)"
    emb = prov["tensors"]["embed_tokens.weight"]
    assert emb["how"] == {"replicated": "copy", "hidden": "gather tp=4 dim 1, columns [0, 64)"}.get(
        embedding, "gather tp=4 dim 0, rows [0, 1001)")


def test_trtllm_tp8_pp2(tmp_path):
    cfg, tensors = build(tmp_path, vocab=1001)
    save_trtllm_ranks(tmp_path / "ranks", cfg.hf_config(), tensors, 8, pp=2, embedding="vocab")
    _, out, prov = convert(tmp_path, tmp_path / "ranks", to="vllm-v0")
    assert torch.equal(out["lm_head.weight"], tensors["lm_head.weight"])
    assert torch.equal(out["embed_tokens.weight"], tensors["model.embed_tokens.weight"])
    assert {s["file"].rsplit("/", 1)[-1] for s in prov["tensors"]["lm_head.weight"]["sources"]} == \
        {f"rank{i}.safetensors" for i in range(8, 16)}


def test_eagle3_against_ranks_and_custom_pattern(tmp_path):
    """An EAGLE-3 head takes no tensor from its target (engines share the target's embedding), only sizes and the
    checks; a custom --file-pattern save is found with --target-pattern (and without it, the folder is an ordinary
    checkpoint with no weights: refused)."""
    cfg, tensors = build(tmp_path, head_kind="eagle3")
    save_vllm_ranks(tmp_path / "ranks", cfg.hf_config(), tensors, 2)
    for r in range(2):
        (tmp_path / "ranks" / f"model-rank-{r}-part-0.safetensors").rename(tmp_path / "ranks" / f"w-{r}.safetensors")
    (tmp_path / "ranks" / "model.safetensors.index.json").unlink()
    with pytest.raises(eagle_convert.errors.LayoutError, match="has no weights"):
        convert(tmp_path, tmp_path / "ranks", to="speculators")
    result, out, _ = convert(tmp_path, tmp_path / "ranks", to="speculators", target_pattern="w-{rank}.safetensors")
    assert "tp=2" in result.target.notes[0]
    _, from_hf, _ = convert(tmp_path, tmp_path / "hf", to="speculators")
    assert out.keys() == from_hf.keys() and all(torch.equal(out[k], from_hf[k]) for k in out)


def test_inputs_untouched_and_same_bytes_as_whole_target(tmp_path):
    """The output converted against rank files is byte-identical to the one converted against the HF target."""
    cfg, tensors = build(tmp_path, head_embed=True)
    save_vllm_ranks(tmp_path / "ranks", cfg.hf_config(), tensors, 8)
    before = tree_fingerprint(tmp_path / "ranks")
    convert(tmp_path, tmp_path / "ranks", to="vllm-v0")
    convert(tmp_path, tmp_path / "hf", to="vllm-v0")
    a, b = tmp_path / "out-ranks-vllm-v0", tmp_path / "out-hf-vllm-v0"
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    assert tree_fingerprint(tmp_path / "ranks") == before


def test_dry_run_lists_byte_ranges_and_inspect_describes(tmp_path):
    from click.testing import CliRunner

    from eagle_convert.cli.main import main

    cfg, tensors = build(tmp_path)
    save_vllm_ranks(tmp_path / "ranks", cfg.hf_config(), tensors, 4)
    res = CliRunner().invoke(main, ["convert", str(tmp_path / "draft"), "-t", str(tmp_path / "ranks"), "--dry-run",
                                    "--to", "vllm-v0"])
    assert res.exit_code == 0, res.output
    rows = 1024 // 4
    ranges = re.findall(r"reads (model-rank-\d-part-0\.safetensors) bytes \[([\d,]+), ([\d,]+)\) \(lm_head\.weight\)",
                        res.output)
    assert [f for f, _, _ in ranges] == [f"model-rank-{r}-part-0.safetensors" for r in range(4)]
    assert all(int(b.replace(",", "")) - int(a.replace(",", "")) == rows * 64 * 4 for _, a, b in ranges)
    assert not (tmp_path / "out").exists()
    res = CliRunner().invoke(main, ["convert", str(tmp_path / "draft"), "-t", str(tmp_path / "ranks"), "--dry-run",
                                    "--json", "--to", "vllm-v0"])
    plan = json.loads(res.stdout)
    lm = next(t for t in plan["tensors"] if t["name"] == "lm_head.weight")
    assert [(r["file"], r["bytes"]) for r in lm["reads"]] == [
        (f"model-rank-{r}-part-0.safetensors", rows * 64 * 4) for r in range(4)]
    res = CliRunner().invoke(main, ["inspect", str(tmp_path / "ranks"), "--json"])
    assert res.exit_code == 0, res.output
    ranks = json.loads(res.stdout)["ranks"]
    assert (ranks["format"], ranks["tp"], ranks["pp"], ranks["padded_vocab"]) == ("vllm-sharded-state", 4, 1, 1024)
    assert [r["file"] for r in ranks["tensors"]["lm_head.weight"]["reads"]] == [
        f"model-rank-{r}-part-0.safetensors" for r in range(4)]
    human = CliRunner().invoke(main, ["inspect", str(tmp_path / "ranks")]).output
    assert "tp 4, pp 1" in human and "padded to 1024" in human


def test_fold_reads_the_gathered_embedding(tmp_path):
    """--fc-bias fold on a head without its own embedding folds into the target's: gathered from the ranks, the
    folded embedding is byte-identical to the one folded from the whole target."""
    cfg = TinyConfig(vocab_size=V_ODD)
    tensors = make_target(tmp_path / "hf", cfg)
    make_eagle1_head(tmp_path / "draft", cfg, tensors, fc_bias=True)
    state = torch.load(tmp_path / "draft" / "pytorch_model.bin", weights_only=True)
    del state["embed_tokens.weight"]
    torch.save(state, tmp_path / "draft" / "pytorch_model.bin")
    save_vllm_ranks(tmp_path / "ranks", cfg.hf_config(), tensors, 4)
    _, ranked, prov = convert(tmp_path, tmp_path / "ranks", fc_bias="fold")
    _, whole_, _ = convert(tmp_path, tmp_path / "hf", fc_bias="fold")
    assert torch.equal(ranked["embed_tokens.weight"], whole_["embed_tokens.weight"])
    assert prov["tensors"]["embed_tokens.weight"]["how"] == "fold_fc_bias"
    assert sum(s["name"] == "model.embed_tokens.weight" for s in prov["tensors"]["embed_tokens.weight"]["sources"]) == 4
