"""io/hub/ against the test hub: exact byte counts, caches, offline mode and every failure, in this process
(huggingface_hub pointed at the server by `use_in_process`), plus one subprocess run for the real environment."""

from __future__ import annotations

import io
import json
import struct
import sys

import pytest
import torch
from safetensors.torch import save
from support.hubserver import HubServer, run_json, use_in_process

from eagle_convert.checkpoint.open import is_repo_id, open_input
from eagle_convert.errors import LayoutError
from eagle_convert.io.hub.hub_errors import (
    GatedRepoError,
    HubNetworkError,
    OfflineCacheMissError,
    RemoteFileNotFoundError,
    RemoteSizeMismatchError,
    RepoNotFoundError,
    RevisionNotFoundError,
)
from eagle_convert.io.hub.hub_source import read_safetensors_header
from eagle_convert.io.hub.ranges import is_cached, read_range
from eagle_convert.io.hub.repos import cached_file, download, is_offline, resolve_repo
from eagle_convert.io.source import HEADER_LEN_KEY
from eagle_convert.testing.tiny import TinyConfig, make_target

V, D = 1000, 256  # each shard holds about 1 MB
SHARDS = ["model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"]


def target_files() -> tuple[dict[str, bytes], dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    t = {"model.embed_tokens.weight": torch.randn(V, D, generator=g),
         "model.layers.0.mlp.up_proj.weight": torch.randn(V, D, generator=g),
         "lm_head.weight": torch.randn(V, D, generator=g), "model.norm.weight": torch.ones(D)}
    groups = [["model.embed_tokens.weight"], ["model.layers.0.mlp.up_proj.weight"],
              ["model.norm.weight", "lm_head.weight"]]
    files = {shard: save({k: t[k] for k in names}) for shard, names in zip(SHARDS, groups)}
    weight_map = {k: shard for shard, names in zip(SHARDS, groups) for k in names}
    files["model.safetensors.index.json"] = json.dumps({"metadata": {}, "weight_map": weight_map}).encode()
    files["config.json"] = json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": D,
                                       "vocab_size": V}).encode()
    files["tokenizer_config.json"] = b"{}"
    files["README.md"] = b"x" * 50_000
    return files, t


def header_len(data: bytes) -> int:
    return struct.unpack("<Q", data[:8])[0]


def tensor_span(data: bytes, name: str) -> tuple[int, int]:
    n = header_len(data)
    begin, end = json.loads(data[8:8 + n])[name]["data_offsets"]
    return 8 + n + begin, end - begin


@pytest.fixture
def env(tmp_path, monkeypatch):
    files, tensors = target_files()
    with HubServer(tmp_path / "hub") as server:
        server.add_repo("org/target", files)
        use_in_process(monkeypatch, server, tmp_path / "hf")
        yield server, files, tensors, tmp_path / "hf"


def ranges_dir(home):
    return home / "eagle-convert" / "ranges" / "models--org--target"


def test_repo_ids_and_local_folders_win(tmp_path, monkeypatch):
    """The one parser production uses: strict Hub spelling, a local folder wins (and is never called a repo id),
    anything else is refused before any request (no server runs here: a request would fail differently)."""
    monkeypatch.chdir(tmp_path)
    assert is_repo_id("org/name") and is_repo_id("meta-llama/Llama-3.1-8B") and is_repo_id("a/" + "b" * 96)
    assert not any(map(is_repo_id, ["name", "a/b/c", "./a/b", "/abs/x", "org/na--me", "org/..x", "org/name.",
                                    "a/" + "b" * 97]))
    for typed in ("org/na--me", "org/..x", "org/name.", "missing"):
        with pytest.raises(LayoutError, match="neither a folder nor a Hugging Face repo id"):
            open_input(typed)
    make_target(tmp_path / "org" / "name", TinyConfig())
    ref = open_input("org/name")
    assert ref.local_dir.resolve() == tmp_path / "org" / "name" and ref.repo_id is None
    assert not any("repo id" in note for note in ref.notes)  # a folder that exists is never called a repo id


def test_resolve_is_one_info_request(env):
    server, files, _, _ = env
    ref = resolve_repo("org/target")
    assert (ref.revision, ref.commit_sha) == ("main", server.commit_sha("org/target"))
    assert ref.files == {k: len(v) for k, v in files.items()}
    assert [(h.kind, h.target) for h in server.requests()] == [
        ("info", "/api/models/org/target/revision/main?blobs=true")]
    assert server.file_bytes() == 0


def test_small_files_are_pinned_downloads(env):
    server, files, _, home = env
    ref = resolve_repo("org/target")
    path = download(ref, "config.json")
    assert path.read_bytes() == files["config.json"]
    assert path.parent == home / "hub" / "models--org--target" / "snapshots" / ref.commit_sha
    assert [(h.method, h.target, h.sent) for h in server.requests("resolve")] == [
        ("HEAD", f"/org/target/resolve/{ref.commit_sha}/config.json", 0),
        ("GET", f"/org/target/resolve/{ref.commit_sha}/config.json", len(files["config.json"]))]
    server.reset_counts()
    assert download(ref, "config.json") == path and server.requests() == []


def test_header_costs_8_plus_its_length_and_is_cached(env):
    server, files, _, _ = env
    ref = resolve_repo("org/target")
    server.reset_counts()
    shard = SHARDS[2]
    header, data_start = read_safetensors_header(ref, shard)
    n = header_len(files[shard])
    assert data_start == 8 + n and set(header) == {"lm_head.weight", "model.norm.weight"}
    assert [(h.range, h.status, h.sent) for h in server.requests()] == [
        ("bytes=0-7", 206, 8), (f"bytes=8-{7 + n}", 206, n)]
    assert server.total_bytes == 8 + n
    server.reset_counts()
    assert read_safetensors_header(ref, shard) == (header, data_start) and server.requests() == []


def test_tensor_costs_its_bytes_then_nothing_then_works_offline(env):
    server, files, tensors, home = env
    ref = resolve_repo("org/target")
    offset, nbytes = tensor_span(files[SHARDS[2]], "lm_head.weight")
    server.reset_counts()
    got = read_range(ref, SHARDS[2], offset, nbytes, key="lm_head.weight")
    assert bytes(got) == files[SHARDS[2]][offset:offset + nbytes]
    assert [(h.range, h.sent) for h in server.requests()] == [(f"bytes={offset}-{offset + nbytes - 1}", nbytes)]
    entry = ranges_dir(home) / ref.commit_sha / SHARDS[2] / "lm_head.weight"
    assert entry.stat().st_size == nbytes and is_cached(ref, SHARDS[2], nbytes, key="lm_head.weight")
    server.reset_counts()
    assert bytes(read_range(ref, SHARDS[2], offset, nbytes, key="lm_head.weight")) == bytes(got)
    offline = resolve_repo("org/target", offline=True)
    assert (offline.commit_sha, offline.files, offline.from_cache) == (ref.commit_sha, ref.files, True)
    assert bytes(read_range(offline, SHARDS[2], offset, nbytes, key="lm_head.weight")) == bytes(got)
    assert server.requests() == []


def test_checkpoint_over_a_repo_fetches_only_what_it_reads(env):
    from eagle_convert.checkpoint.read import read_tensor

    server, files, tensors, _ = env
    inp = open_input("org/target", role="target")
    assert inp.commit_sha == server.commit_sha("org/target") and inp.local_dir is None
    lm = read_tensor(inp.checkpoint, inp.checkpoint.ref("lm_head.weight"))
    assert torch.equal(lm, tensors["lm_head.weight"])
    n = header_len(files[SHARDS[2]])
    small = len(files["config.json"]) + len(files["model.safetensors.index.json"])
    assert server.bytes_by_file() == {("org/target", "config.json"): len(files["config.json"]),
                                      ("org/target", "model.safetensors.index.json"): small - len(files["config.json"]),
                                      ("org/target", SHARDS[2]): 8 + n + lm.numel() * 4}
    assert server.total_bytes < lm.numel() * 4 + 8 * 1024  # the LM head plus a few KB of JSON and headers
    assert inp.checkpoint.source.fetched == {"config.json": len(files["config.json"]),
                                             "model.safetensors.index.json": small - len(files["config.json"]),
                                             SHARDS[2]: 8 + n + lm.numel() * 4}
    server.reset_counts()  # second run: one repo-info request, no file bytes
    again = open_input("org/target", role="target")
    assert torch.equal(read_tensor(again.checkpoint, again.checkpoint.ref("lm_head.weight")), lm)
    assert [h.kind for h in server.requests()] == ["info"] and again.checkpoint.source.fetched == {}


def test_a_draft_downloads_whole_files(env):
    from eagle_convert.checkpoint.read import read_tensor

    server, files, tensors, _ = env
    inp = open_input("org/target", role="draft")
    norm = read_tensor(inp.checkpoint, inp.checkpoint.ref("model.norm.weight"))
    assert torch.equal(norm, tensors["model.norm.weight"])
    assert server.file_bytes("org/target", SHARDS[2]) == len(files[SHARDS[2]])
    assert server.file_bytes("org/target", "README.md") == 0


def test_offline_without_cache_names_what_is_missing(env, monkeypatch):
    server, files, _, home = env
    with pytest.raises(OfflineCacheMissError, match="org/target@main"):
        resolve_repo("org/target", offline=True)
    ref = resolve_repo("org/target")
    server.reset_counts()
    offline = resolve_repo("org/target", offline=True)
    offset, nbytes = tensor_span(files[SHARDS[1]], "model.layers.0.mlp.up_proj.weight")
    with pytest.raises(OfflineCacheMissError, match=SHARDS[1]) as err:
        read_range(offline, SHARDS[1], offset, nbytes, key="model.layers.0.mlp.up_proj.weight")
    assert "without --offline" in err.value.hint
    with pytest.raises(OfflineCacheMissError, match="config.json"):
        download(offline, "config.json")
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # HF_HUB_OFFLINE=1 alone is enough
    assert resolve_repo("org/target").offline and is_offline()
    assert server.requests() == [] and ref.commit_sha == offline.commit_sha


def test_environment_read_at_import_in_a_subprocess(env):
    """HF_HOME and HF_HUB_OFFLINE=1 as the CLI gets them: read by huggingface_hub at import, in a fresh process."""
    server, files, _, home = env
    offset, nbytes = tensor_span(files[SHARDS[2]], "lm_head.weight")
    ref = resolve_repo("org/target")
    read_range(ref, SHARDS[2], offset, nbytes, key="lm_head.weight")
    server.reset_counts()
    code = f"""
import json
from eagle_convert.io.hub.ranges import read_range
from eagle_convert.io.hub.repos import cache_root, resolve_repo
from eagle_convert.checkpoint.open import open_input
ref = resolve_repo("org/target")
print(json.dumps([ref.offline, ref.commit_sha, cache_root().as_posix(),
                  bytes(read_range(ref, "{SHARDS[2]}", {offset}, {nbytes}, key="lm_head.weight")).hex()]))
"""
    offline, sha, root, data = run_json(server, code, hf_home=home, offline=True)
    assert (offline, sha, root) == (True, ref.commit_sha, (home / "eagle-convert").as_posix())
    assert bytes.fromhex(data) == files[SHARDS[2]][offset:offset + nbytes]
    assert server.requests() == []


def test_unknown_repo_revision_and_file(env):
    server, _, _, _ = env
    with pytest.raises(RepoNotFoundError, match="org/nope") as err:
        resolve_repo("org/nope")
    assert "HF_TOKEN" in err.value.hint and isinstance(err.value, OSError)
    with pytest.raises(RevisionNotFoundError, match="'v9'"):
        resolve_repo("org/target", revision="v9")
    ref = resolve_repo("org/target")
    server.reset_counts()
    with pytest.raises(RemoteFileNotFoundError, match="tokenizer.json"):
        download(ref, "tokenizer.json")
    assert server.requests() == []


def test_gated_repo_needs_a_token(env):
    server, files, _, _ = env
    server.gate("org/target", tokens={"hf_good"})
    ref = resolve_repo("org/target")  # info is public
    with pytest.raises(GatedRepoError, match="gated") as err:
        download(ref, "config.json")
    assert "HF_TOKEN" in err.value.hint
    offset, nbytes = tensor_span(files[SHARDS[2]], "lm_head.weight")
    with pytest.raises(GatedRepoError):
        read_range(ref, SHARDS[2], offset, nbytes, key="lm_head.weight")
    with pytest.raises(GatedRepoError):
        read_range(resolve_repo("org/target", token="hf_bad"), SHARDS[2], offset, nbytes, key="lm_head.weight")
    good = resolve_repo("org/target", token="hf_good")
    assert bytes(read_range(good, SHARDS[2], offset, nbytes, key="lm_head.weight")) == \
        files[SHARDS[2]][offset:offset + nbytes]
    assert download(good, "config.json").read_bytes() == files["config.json"]


def test_a_dropped_transfer_resumes_where_it_stopped(env):
    server, files, _, _ = env
    ref = resolve_repo("org/target")
    offset, nbytes = tensor_span(files[SHARDS[2]], "lm_head.weight")
    server.drop("org/target", SHARDS[2], after=100_000)
    server.reset_counts()
    got = read_range(ref, SHARDS[2], offset, nbytes, key="lm_head.weight")
    assert bytes(got) == files[SHARDS[2]][offset:offset + nbytes]
    last = offset + nbytes - 1
    assert [(h.range, h.sent) for h in server.requests()] == [
        (f"bytes={offset}-{last}", 100_000), (f"bytes={offset + 100_000}-{last}", nbytes - 100_000)]
    assert server.file_bytes() == nbytes


def test_a_transfer_that_keeps_failing_leaves_nothing(env, monkeypatch):
    server, files, _, home = env
    monkeypatch.setenv("EAGLE_CONVERT_HUB_RETRIES", "2")
    ref = resolve_repo("org/target")
    offset, nbytes = tensor_span(files[SHARDS[2]], "lm_head.weight")
    server.drop("org/target", SHARDS[2], after=0, times=None)
    server.reset_counts()
    with pytest.raises(HubNetworkError, match="lm_head|model-00003") as err:
        read_range(ref, SHARDS[2], offset, nbytes, key="lm_head.weight")
    assert "Run again" in err.value.hint
    assert len(server.requests()) == 3  # the first try and 2 retries
    assert [p for p in ranges_dir(home).rglob("*") if p.is_file()] == []
    server.clear_faults()
    assert bytes(read_range(ref, SHARDS[2], offset, nbytes, key="lm_head.weight")) == \
        files[SHARDS[2]][offset:offset + nbytes]


def test_a_server_error_is_retried(env):
    server, files, _, _ = env
    ref = resolve_repo("org/target")
    server.fail("org/target", SHARDS[0], status=503, times=1)
    server.reset_counts()
    assert bytes(read_range(ref, SHARDS[0], 0, 8, key=HEADER_LEN_KEY)) == files[SHARDS[0]][:8]
    assert [h.status for h in server.requests()] == [503, 206]


def test_bytes_that_do_not_match_the_header_size(env):
    server, files, _, home = env
    shard = SHARDS[2]
    offset, nbytes = tensor_span(files[shard], "lm_head.weight")
    truncated = files[shard][:offset + nbytes // 2]
    server.add_repo("org/target", {shard: truncated})
    server.lie_size("org/target", shard, len(files[shard]))  # the listing still promises the full file
    ref = resolve_repo("org/target")
    assert ref.files[shard] == len(files[shard])
    with pytest.raises(RemoteSizeMismatchError, match="ended early") as err:
        read_range(ref, shard, offset, nbytes, key="lm_head.weight")
    assert "truncated" in err.value.hint
    with pytest.raises(RemoteSizeMismatchError, match="416"):
        read_range(ref, shard, len(truncated) + 10, 4, key="beyond")
    with pytest.raises(RemoteSizeMismatchError, match="bytes"):
        read_range(ref, shard, len(files[shard]) - 2, 4, key="past-the-listing")
    with pytest.raises(RemoteSizeMismatchError, match="size"):
        download(ref, shard)  # hf_hub_download's own check, through X-Linked-Size
    assert [p for p in ranges_dir(home).rglob("*") if p.is_file()] == []


def test_a_server_without_ranges_gets_the_whole_file(env):
    server, files, _, _ = env
    server.disable_ranges("org/target")
    ref = resolve_repo("org/target")
    offset, nbytes = tensor_span(files[SHARDS[1]], "model.layers.0.mlp.up_proj.weight")
    got = read_range(ref, SHARDS[1], offset, nbytes, key="model.layers.0.mlp.up_proj.weight")
    assert bytes(got) == files[SHARDS[1]][offset:offset + nbytes]
    assert cached_file(ref, SHARDS[1]).read_bytes() == files[SHARDS[1]]
    server.reset_counts()
    assert bytes(read_range(ref, SHARDS[1], 0, 8, key=HEADER_LEN_KEY)) == files[SHARDS[1]][:8]
    assert server.requests() == []  # served from the downloaded file


def test_an_unreachable_hub_falls_back_to_the_cached_listing(env):
    server, _, _, _ = env
    ref = resolve_repo("org/target")
    server.stop()
    again = resolve_repo("org/target")
    assert (again.commit_sha, again.from_cache, again.offline) == (ref.commit_sha, True, False)
    with pytest.raises(HubNetworkError, match="org/other"):
        resolve_repo("org/other")


def test_progress_bars_on_a_terminal_only(env, monkeypatch):
    server, files, _, _ = env

    class Tty(io.StringIO):
        def isatty(self):
            return True

    ref = resolve_repo("org/target")
    for quiet, tty in ((False, True), (True, True), (False, False)):
        err = Tty() if tty else io.StringIO()
        monkeypatch.setattr(sys, "stderr", err)
        read_range(ref, SHARDS[0], 0, 8, key=f"probe-{quiet}-{tty}", quiet=quiet)
        read_range(ref, SHARDS[0], 0, 8, key=f"probe-{quiet}-{tty}", quiet=quiet)  # cached: no bar
        assert (f"probe-{quiet}-{tty}" in err.getvalue()) == (tty and not quiet)
        assert err.getvalue().count(f"probe-{quiet}-{tty}") <= 2


def test_offline_also_reads_huggingface_hubs_own_cache(env):
    import shutil

    server, files, _, home = env
    from huggingface_hub import hf_hub_download

    ref = resolve_repo("org/target")
    hf_hub_download("org/target", "config.json")  # as `hf download org/target config.json` leaves it
    shutil.rmtree(home / "eagle-convert")
    offline = resolve_repo("org/target", offline=True)
    assert (offline.commit_sha, offline.files) == (ref.commit_sha, {"config.json": len(files["config.json"])})
    assert download(offline, "config.json").read_bytes() == files["config.json"]


def test_a_corrupt_header_on_the_hub_is_refused_before_any_tensor_byte(env):
    """The Hub path checks headers with the same function as local files: overlapping offsets are refused, after
    fetching the header alone."""
    from eagle_convert.errors import CorruptCheckpointError

    server, files, _, _ = env
    shard = SHARDS[2]
    n = header_len(files[shard])
    header = json.loads(files[shard][8:8 + n])
    header["model.norm.weight"]["data_offsets"] = [0, D * 4]  # inside lm_head.weight's bytes, or it inside these
    raw = json.dumps(header).encode()
    server.add_repo("org/target", {shard: struct.pack("<Q", len(raw)) + raw + files[shard][8 + n:]})
    inp = open_input("org/target", role="target")
    server.reset_counts()
    with pytest.raises(CorruptCheckpointError, match="overlaps") as err:
        inp.checkpoint.ref("lm_head.weight")
    assert f"hf://org/target@{inp.commit_sha[:12]}/{shard}" in err.value.message
    assert server.file_bytes("org/target", shard) == 8 + len(raw)  # the header, and no tensor byte
