"""The output folder never touches an input, judged by where the input files really are (symlinks followed)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from support.convert import flat, run_cli, tree_fingerprint


def hf_cache_layout(folder: Path, cache: Path, rev: str = "0123abcd") -> Path:
    """Move `folder`'s files into a Hugging Face-cache-style tree: blobs/<sha256> holds the bytes and
    snapshots/<rev>/<name> is a relative symlink to it. Returns the snapshot folder."""
    blobs, snapshot = cache / "blobs", cache / "snapshots" / rev
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for path in sorted(folder.iterdir()):
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
        path.rename(blobs / sha)
        (snapshot / path.name).symlink_to(Path("..") / ".." / "blobs" / sha)
    folder.rmdir()
    return snapshot


def links_and_bytes(cache: Path) -> tuple[dict, dict]:
    links = {str(p.relative_to(cache)): os.readlink(p) for p in sorted(cache.rglob("*")) if p.is_symlink()}
    return links, tree_fingerprint(cache)


@pytest.fixture
def cached_draft(pair, tmp_path):
    target, draft, _ = pair()
    cache = tmp_path / "hub" / "models--org--draft"
    return target, hf_cache_layout(draft, cache), cache


@pytest.mark.parametrize("where", ["blobs", "snapshot", "link to snapshot", "inside blobs", "cache"])
def test_force_never_replaces_the_real_files_of_a_symlinked_input(cached_draft, tmp_path, where):
    target, snapshot, cache = cached_draft
    if where == "link to snapshot":
        out = tmp_path / "link"
        out.symlink_to(snapshot, target_is_directory=True)
    else:
        out = {"blobs": cache / "blobs", "snapshot": snapshot, "inside blobs": cache / "blobs" / "converted",
               "cache": cache.parent}[where]
    before = links_and_bytes(cache)
    result = run_cli("convert", snapshot, "--target", target, "-o", out, "--force")
    assert result.returncode == 1, result.stderr
    message = flat(result.stderr)
    assert message.startswith("error: The output folder") and "overlaps the input" in message
    unwrapped = "".join(message.split())  # paragraph() may wrap a long path at a hyphen
    assert f"{snapshot}/" in unwrapped and f"(really{cache / 'blobs'}/" in unwrapped  # the input file, its home
    assert "Pick another -o folder" in message and "\n\n" not in result.stderr.strip()
    assert links_and_bytes(cache) == before
    assert not list(out.parent.glob(f".{out.name}.eagle-convert-*"))


def test_a_separate_output_beside_a_symlinked_input_is_fine(cached_draft, tmp_path):
    """Negative control: the check refuses overlaps, not symlinked inputs."""
    target, snapshot, cache = cached_draft
    before = links_and_bytes(cache)
    result = run_cli("convert", snapshot, "--target", target, "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "model.safetensors").is_file() and links_and_bytes(cache) == before


def test_a_repo_input_counts_as_its_cache_folders(tmp_path, monkeypatch):
    from huggingface_hub import constants

    from eagle_convert.io.hub.hub_source import HubSource
    from eagle_convert.io.hub.repos import RepoRef
    from eagle_convert.io.overlap import find_overlap

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    source = HubSource(RepoRef("org/draft", "main", "a" * 40, {"model.safetensors": 8}))
    repo = tmp_path / "hub" / "models--org--draft"
    for out in (repo / "blobs", repo / "snapshots" / ("a" * 40), tmp_path / "hub", repo / "blobs" / "x"):
        found = find_overlap(out, [("org/draft", source)])
        assert found is not None and found.input_label == "org/draft" and str(repo) in found.file, out
    assert find_overlap(tmp_path / "out", [("org/draft", source)]) is None
    assert find_overlap(tmp_path / "hub" / "models--org--other", [("org/draft", source)]) is None
