"""The test hub speaks what the real huggingface_hub client expects: each test runs the client in a subprocess with
HF_ENDPOINT / HF_HOME / HF_HUB_OFFLINE set (read at import), then asserts on what the server counted."""

from __future__ import annotations

import json
import struct

import pytest
from support.hubserver import HubServer, run_json, run_python

CONFIG = b'{"hidden_size": 64}'
HEADER = json.dumps({"w": {"dtype": "F32", "shape": [256], "data_offsets": [0, 1024]}}).encode()
WEIGHTS = struct.pack("<Q", len(HEADER)) + HEADER + bytes(range(256)) * 4
README = b"# a model card that nobody should download\n" * 20


@pytest.fixture
def hub(tmp_path):
    with HubServer(tmp_path / "hub") as server:
        server.add_repo("org/model", {"config.json": CONFIG, "model.safetensors": WEIGHTS, "README.md": README,
                                      "extra/notes.txt": b"notes"})
        yield server


def test_hf_hub_download_then_cache(hub, tmp_path):
    home = tmp_path / "hf"
    code = """
import json
from huggingface_hub import hf_hub_download
print(json.dumps(open(hf_hub_download("org/model", "config.json"), "rb").read().decode()))
"""
    assert run_json(hub, code, hf_home=home) == CONFIG.decode()
    head, get = hub.requests()
    assert (head.method, head.status, head.sent) == ("HEAD", 200, 0)
    assert (get.method, get.status, get.sent) == ("GET", 200, len(CONFIG))
    assert (home / "hub" / "models--org--model" / "refs" / "main").read_text() == hub.commit_sha("org/model")

    hub.reset_counts()  # revision "main" again: one HEAD, no body
    assert run_json(hub, code, hf_home=home) == CONFIG.decode()
    assert [(h.method, h.sent) for h in hub.requests()] == [("HEAD", 0)]

    hub.reset_counts()  # pinned to the commit sha: no request at all
    sha = hub.commit_sha("org/model")
    pinned = f"""
import json
from huggingface_hub import hf_hub_download
print(json.dumps(open(hf_hub_download("org/model", "config.json", revision="{sha}"), "rb").read().decode()))
"""
    assert run_json(hub, pinned, hf_home=home) == CONFIG.decode()
    assert hub.requests() == []


def test_snapshot_download_allow_patterns(hub, tmp_path):
    code = """
import json, os
from huggingface_hub import snapshot_download
p = snapshot_download("org/model", allow_patterns=["*.json", "*.safetensors"])
print(json.dumps(sorted(os.listdir(p))))
"""
    assert run_json(hub, code, hf_home=tmp_path / "hf") == ["config.json", "model.safetensors"]
    assert [h.kind for h in hub.requests() if h.kind != "resolve"] == ["info", "tree"]
    assert hub.requests("tree")[0].target.endswith("?recursive=true&expand=false")
    assert hub.bytes_by_file() == {("org/model", "config.json"): len(CONFIG),
                                   ("org/model", "model.safetensors"): len(WEIGHTS)}


def test_hffilesystem_reads_exactly_the_bytes_asked(hub, tmp_path):
    code = """
import json
from huggingface_hub import HfFileSystem
with HfFileSystem().open("org/model/model.safetensors", "rb", cache_type="none") as f:
    f.seek(8)
    a = f.read(50)
    f.seek(8 + 50 + 100)
    b = f.read(7)
print(json.dumps([a.hex(), b.hex()]))
"""
    a, b = run_json(hub, code, hf_home=tmp_path / "hf")
    assert bytes.fromhex(a) == WEIGHTS[8:58] and bytes.fromhex(b) == WEIGHTS[158:165]
    ranged = hub.requests("resolve")
    assert [(h.range, h.status, h.sent) for h in ranged] == [("bytes=8-57", 206, 50), ("bytes=158-164", 206, 7)]
    # opening costs one repo info and one listing of the parent folder, nothing else
    assert [h.kind for h in hub.requests() if h.kind != "resolve"] == ["info", "tree"]
    assert hub.total_bytes == 57 + hub.api_bytes()


def test_get_safetensors_metadata_and_first_100kb(hub, tmp_path):
    code = """
import json
from huggingface_hub import get_safetensors_metadata
m = get_safetensors_metadata("org/model")
t = m.files_metadata["model.safetensors"].tensors["w"]
print(json.dumps([t.dtype, t.shape, list(t.data_offsets)]))
"""
    assert run_json(hub, code, hf_home=tmp_path / "hf") == ["F32", [256], [0, 1024]]
    get = [h for h in hub.requests("resolve") if h.method == "GET"]
    assert [(h.range, h.sent) for h in get] == [("bytes=0-100000", len(WEIGHTS))]  # the whole (small) file


def test_offline_mode_uses_cache_and_makes_no_request(hub, tmp_path):
    home = tmp_path / "hf"
    fetch = """
import json
from huggingface_hub import hf_hub_download
print(json.dumps(open(hf_hub_download("org/model", "config.json"), "rb").read().decode()))
"""
    proc = run_python(hub, fetch, hf_home=home, offline=True)
    assert proc.returncode != 0 and "LocalEntryNotFoundError" in proc.stderr
    assert hub.requests() == []
    run_json(hub, fetch, hf_home=home)
    hub.reset_counts()
    assert run_json(hub, fetch, hf_home=home, offline=True) == CONFIG.decode()
    assert hub.requests() == []


ERRORS = """
import json
from huggingface_hub import hf_hub_download, HfApi
from huggingface_hub.errors import (GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError,
                                    RemoteEntryNotFoundError)
def kind(fn):
    try:
        fn()
        return "ok"
    except (GatedRepoError, RevisionNotFoundError, RemoteEntryNotFoundError, RepositoryNotFoundError) as e:
        return type(e).__name__ + ":" + str(e.response.status_code)
print(json.dumps({
    "gated_info": kind(lambda: HfApi().model_info("org/gated")),
    "gated_file": kind(lambda: hf_hub_download("org/gated", "config.json")),
    "no_repo": kind(lambda: hf_hub_download("org/nope", "config.json")),
    "no_repo_info": kind(lambda: HfApi().model_info("org/nope")),
    "no_rev": kind(lambda: hf_hub_download("org/model", "config.json", revision="v9")),
    "no_rev_info": kind(lambda: HfApi().model_info("org/model", revision="v9")),
    "no_file": kind(lambda: hf_hub_download("org/model", "missing.json")),
    "private": kind(lambda: HfApi().model_info("org/secret")),
}))
"""


def test_error_types(hub, tmp_path):
    hub.add_repo("org/gated", {"config.json": CONFIG})
    hub.gate("org/gated", tokens={"hf_good"})
    hub.add_repo("org/secret", {"config.json": CONFIG})
    hub.make_private("org/secret", tokens={"hf_good"})
    got = run_json(hub, ERRORS, hf_home=tmp_path / "hf")
    assert got == {"gated_info": "ok", "gated_file": "GatedRepoError:401", "no_repo": "RepositoryNotFoundError:404",
                   "no_repo_info": "RepositoryNotFoundError:404", "no_rev": "RevisionNotFoundError:404",
                   "no_rev_info": "RevisionNotFoundError:404", "no_file": "RemoteEntryNotFoundError:404",
                   "private": "RepositoryNotFoundError:401"}
    wrong = run_json(hub, ERRORS, hf_home=tmp_path / "hf2", token="hf_bad")
    assert wrong["gated_file"] == "GatedRepoError:403"
    good = run_json(hub, ERRORS, hf_home=tmp_path / "hf3", token="hf_good")
    assert good["gated_file"] == "ok" and good["private"] == "ok"
    auth = [h for h in hub.requests("resolve", "org/gated") if h.status == 200]
    assert auth  # the token travelled as `Authorization: Bearer`


def test_revisions_and_commit_shas(hub, tmp_path):
    v1 = hub.add_repo("org/model", {"config.json": b'{"hidden_size": 32}'}, ref="v1")
    main = hub.commit_sha("org/model")
    assert v1 != main
    code = f"""
import json
from huggingface_hub import HfApi, hf_hub_download
api = HfApi()
print(json.dumps([api.model_info("org/model", revision="v1").sha, api.model_info("org/model", revision="{v1}").sha,
                  open(hf_hub_download("org/model", "config.json", revision="v1")).read()]))
"""
    assert run_json(hub, code, hf_home=tmp_path / "hf") == [v1, v1, '{"hidden_size": 32}']
    assert {h.target.split("?")[0] for h in hub.requests("resolve")} == {"/org/model/resolve/v1/config.json"}


def test_drop_mid_transfer_restarts_small_files_from_zero(hub, tmp_path):
    hub.drop("org/model", "model.safetensors", after=300)
    code = """
import json
from huggingface_hub import hf_hub_download
print(json.dumps(open(hf_hub_download("org/model", "model.safetensors"), "rb").read().hex()))
"""
    assert bytes.fromhex(run_json(hub, code, hf_home=tmp_path / "hf", no_sleep=True)) == WEIGHTS
    # http_get reads 10 MB chunks: a cut inside the first chunk keeps nothing, so the retry starts again from byte 0
    gets = [h for h in hub.requests("resolve") if h.method == "GET"]
    assert [(h.range, h.sent) for h in gets] == [(None, 300), (None, len(WEIGHTS))]
    assert hub.file_bytes("org/model", "model.safetensors") == 300 + len(WEIGHTS)


def test_lying_size_fails_the_client_check(hub, tmp_path):
    hub.lie_size("org/model", "model.safetensors", len(WEIGHTS) + 10)
    code = """
from huggingface_hub import hf_hub_download
hf_hub_download("org/model", "model.safetensors")
"""
    proc = run_python(hub, code, hf_home=tmp_path / "hf")
    assert proc.returncode != 0 and "Consistency check failed" in proc.stderr
    assert not list((tmp_path / "hf" / "hub" / "models--org--model" / "blobs").glob("*"))  # no partial blob


def test_server_ranges_and_unknown_routes(hub):
    import urllib.request
    from urllib.error import HTTPError

    def get(path, rng=None):
        req = urllib.request.Request(hub.url + path, headers={"Range": rng} if rng else {})
        try:
            with urllib.request.urlopen(req) as r:
                return r.status, r.headers.get("Content-Range"), r.read()
        except HTTPError as e:
            return e.code, e.headers.get("Content-Range"), e.headers.get("X-Error-Code")

    url = "/org/model/resolve/main/model.safetensors"
    assert get(url, "bytes=-4") == (206, f"bytes {len(WEIGHTS) - 4}-{len(WEIGHTS) - 1}/{len(WEIGHTS)}", WEIGHTS[-4:])
    assert get(url, "bytes=10-") == (206, f"bytes 10-{len(WEIGHTS) - 1}/{len(WEIGHTS)}", WEIGHTS[10:])
    assert get(url, f"bytes={len(WEIGHTS)}-")[:2] == (416, f"bytes */{len(WEIGHTS)}")
    assert get("/api/agent-harnesses")[0] == 404
    assert get("/org/model/resolve/main/nope.bin") == (404, None, "EntryNotFound")
    hub.disable_ranges("org/model")
    assert get(url, "bytes=0-9") == (200, None, WEIGHTS)
    assert [h.kind for h in hub.requests()].count("other") == 1
