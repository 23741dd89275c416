"""A target saved per rank, as a Hugging Face repo (our Hub-compatible test server): convert fetches each rank
file's safetensors header and the LM-head / embedding byte ranges, never a whole rank file, and splices the same
bytes as from the local folder (issue 15)."""

from __future__ import annotations

import json

import torch
from safetensors.torch import load_file
from support.hubserver import HubServer, use_in_process

import eagle_convert
from eagle_convert.testing.ranks import save_vllm_ranks
from eagle_convert.testing.tiny import TinyConfig, make_eagle1_head, make_target

CFG = TinyConfig(hidden_size=128, intermediate_size=1024, vocab_size=1000, num_hidden_layers=2)
BULK = ("model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight")  # 0.5 MB per rank file


def test_per_rank_repo_fetches_only_the_head_ranges(tmp_path, monkeypatch):
    tensors = make_target(tmp_path / "hf", CFG)
    make_eagle1_head(tmp_path / "draft", CFG, tensors, fc_bias=False)
    state = torch.load(tmp_path / "draft" / "pytorch_model.bin", weights_only=True)
    del state["embed_tokens.weight"]
    torch.save(state, tmp_path / "draft" / "pytorch_model.bin")
    ranks = tmp_path / "ranks"
    save_vllm_ranks(ranks, CFG.hf_config(), tensors, 4, bulk=BULK, max_size=300_000)
    with HubServer(tmp_path / "hub") as server:
        server.add_repo("org/ranks", {p.name: p for p in ranks.iterdir()})
        server.add_repo("org/draft", {p.name: p for p in (tmp_path / "draft").iterdir()})
        use_in_process(monkeypatch, server, tmp_path / "hf-home")

        plan = eagle_convert.convert("org/draft", "org/ranks", dry_run=True, to="vllm-v0").to_dict()
        to_fetch = plan["fetch"]["target"]["to_fetch"]
        assert sorted(i["what"] for i in to_fetch) == ["range of lm_head.weight"] * 4 + \
            ["range of model.embed_tokens.weight"] * 4
        assert {i["file"].split("-part-")[0] for i in to_fetch} == {f"model-rank-{r}" for r in range(4)}
        assert server.file_bytes("org/ranks") < 4 * 4096  # planning fetched headers only

        eagle_convert.convert("org/draft", "org/ranks", tmp_path / "remote", to="vllm-v0")
        eagle_convert.convert(str(tmp_path / "draft"), str(ranks), tmp_path / "local", to="vllm-v0")
        remote, local = (load_file(tmp_path / d / "model.safetensors") for d in ("remote", "local"))
        assert torch.equal(remote["lm_head.weight"], tensors["lm_head.weight"])
        assert torch.equal(remote["embed_tokens.weight"], tensors["model.embed_tokens.weight"])
        assert (tmp_path / "remote" / "model.safetensors").read_bytes() == \
            (tmp_path / "local" / "model.safetensors").read_bytes()

        head_bytes = 2 * 1024 * 128 * 4  # lm_head and embed_tokens, padded to 1024 rows, over all ranks
        fetched = server.file_bytes("org/ranks")
        assert head_bytes <= fetched <= head_bytes + 8 * 4096  # + the headers
        for r in range(4):  # of each rank's files, only the header and head ranges: never the bulk
            files = list(ranks.glob(f"model-rank-{r}-part-*.safetensors"))
            got = sum(server.file_bytes("org/ranks", p.name) for p in files)
            assert got < sum(p.stat().st_size for p in files) - 500_000
        prov = json.loads((tmp_path / "remote" / "eagle_convert.json").read_text())
        src = prov["tensors"]["lm_head.weight"]["sources"]
        assert [s["file"].startswith("hf://org/ranks@") for s in src] == [True] * 4
        assert all(s["revision"] == server.commit_sha("org/ranks") for s in src)

        server.reset_counts()
        eagle_convert.convert("org/draft", "org/ranks", tmp_path / "again", to="vllm-v0")
        assert server.file_bytes() == 0  # every range is cached by repo, commit, file and tensor
