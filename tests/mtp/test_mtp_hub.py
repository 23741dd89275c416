"""convert --mtp with a repo id (issue 25), against the test Hub server: the MTP tensors' byte ranges and the MTP
shard's header are all that is fetched of the weights (no trunk shard byte), the output equals the local one, a
second run fetches nothing, and an MTP shard the index leaves out is found through the repo's file list."""

from __future__ import annotations

import json
import struct

import pytest
from support.hubserver import HubServer, use_in_process

from eagle_convert.api import extract_mtp
from eagle_convert.testing.mtp_targets import MtpFixture, build_mtp_target


def folder_files(folder):
    return {p.name: p for p in folder.iterdir() if p.is_file()}


def header_bytes(path) -> int:
    with open(path, "rb") as f:
        return 8 + struct.unpack("<Q", f.read(8))[0]


@pytest.fixture(scope="module")
def targets(tmp_path_factory):
    root = tmp_path_factory.mktemp("mtp-hub")
    return {"deepseek": build_mtp_target(root / "deepseek", MtpFixture("deepseek_v3", fp8=True)),
            "unindexed": build_mtp_target(root / "unindexed", MtpFixture("glm4_moe", index_mtp=False))}


@pytest.fixture
def hub(tmp_path, monkeypatch, targets):
    with HubServer(tmp_path / "hub") as server:
        for name, target in targets.items():
            server.add_repo(f"org/{name}", folder_files(target.path))
        use_in_process(monkeypatch, server, tmp_path / "hf")
        yield server


@pytest.mark.parametrize("name", ["deepseek", "unindexed"])
def test_only_the_mtp_tensors_and_their_shard_header_are_fetched(name, hub, targets, tmp_path):
    target = targets[name]
    local = extract_mtp(str(target.path), tmp_path / "local")
    remote = extract_mtp(f"org/{name}", tmp_path / "remote")
    for rel in ("model.safetensors", "config.json"):
        assert (tmp_path / "local" / rel).read_bytes() == (tmp_path / "remote" / rel).read_bytes()
    mtp_file = target.path / target.mtp_file
    tensor_bytes = local.to_dict()["bytes_to_read"]
    assert tensor_bytes == local.layers.nbytes  # the vllm layout reads every MTP tensor, once
    assert hub.file_bytes(f"org/{name}", target.mtp_file) == header_bytes(mtp_file) + tensor_bytes
    for trunk in target.trunk_files:
        assert hub.file_bytes(f"org/{name}", trunk) == 0  # not one byte of a trunk shard, header included
    prov = json.loads((tmp_path / "remote" / "eagle_convert.json").read_text())
    assert prov["inputs"]["target"]["commit_sha"] == hub.commit_sha(f"org/{name}")
    local_prov = json.loads((tmp_path / "local" / "eagle_convert.json").read_text())
    assert {n: e["sources"][0]["sha256"] for n, e in prov["tensors"].items()} == \
        {n: e["sources"][0]["sha256"] for n, e in local_prov["tensors"].items()}
    assert all(e["sources"][0]["file"].startswith(f"hf://org/{name}@") for e in prov["tensors"].values())
    if name == "unindexed":
        assert remote.layers.files() == ["mtp.safetensors"] and any("mtp.safetensors" in n for n in remote.notes)

    hub.reset_counts()
    extract_mtp(f"org/{name}", tmp_path / "again")
    assert hub.file_bytes() == 0  # cached ranges: a second run fetches no file bytes


def test_a_dry_run_says_what_will_be_fetched_and_fetches_no_tensor(hub, targets, tmp_path):
    from eagle_convert.api import MtpSettings

    target = targets["deepseek"]
    result = extract_mtp("org/deepseek", tmp_path / "out", MtpSettings(dry_run=True))
    assert not (tmp_path / "out").exists()
    fetch = result.fetch
    assert fetch["bytes_to_fetch"] == result.layers.nbytes and len(fetch["to_fetch"]) == len(target.mtp_names)
    assert {i["file"] for i in fetch["to_fetch"]} == {target.mtp_file}
    header = header_bytes(target.path / target.mtp_file)
    assert hub.file_bytes("org/deepseek", target.mtp_file) == header  # planning: the MTP shard's header, no tensor
    assert fetch["fetched_to_plan"][target.mtp_file] == header
    extract_mtp("org/deepseek", tmp_path / "out")
    again = extract_mtp("org/deepseek", tmp_path / "o2", MtpSettings(dry_run=True)).fetch
    assert again["bytes_to_fetch"] == 0 and all(i["cached"] for i in again["to_fetch"])
