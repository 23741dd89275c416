"""The golden sets travel with the repository: every listed set is in tests/golden with all of its files, and a
missing file is an error that names it (never a skip)."""

from __future__ import annotations

import shutil

import pytest
from support.golden_sets import (
    ALL_GOLDEN_SETS,
    DFLASH_GOLDEN_SETS,
    GOLDEN,
    GOLDEN_SETS,
    GoldenDataMissing,
    check_all_golden_sets,
    check_golden_set,
    required_files,
)


def test_golden_sets_live_inside_the_repository():
    repo = GOLDEN.parents[1]
    assert GOLDEN == repo / "tests" / "golden"
    assert (repo / "pyproject.toml").is_file() and (GOLDEN / "README.md").is_file()


@pytest.mark.parametrize("name", ALL_GOLDEN_SETS)
def test_every_listed_set_has_all_its_files(name):
    files = required_files(GOLDEN / name)
    # manifest, inputs, expected, tree, draft config + weights, and at least config + weights + tokenizer of the target
    assert len(files) >= 9
    assert all(path.is_file() and path.stat().st_size > 0 for path in files), [str(p) for p in files if not p.is_file()]
    assert check_golden_set(GOLDEN / name) == GOLDEN / name


def test_the_set_lists_match_the_folders():
    assert set(GOLDEN_SETS) < set(ALL_GOLDEN_SETS)
    assert sorted(p.name for p in GOLDEN.iterdir() if p.is_dir()) == sorted(ALL_GOLDEN_SETS + DFLASH_GOLDEN_SETS)


@pytest.mark.parametrize("missing", ["tree.safetensors", "draft/pytorch_model.bin", "target/tokenizer.json",
                                     "target/model-00002-of-00003.safetensors", "manifest.json"])
def test_a_missing_file_is_an_error_naming_it(tmp_path, missing):
    # negative control for the checks above: the same set with one file removed must not pass
    copy = tmp_path / "eagle1-llama3"
    shutil.copytree(GOLDEN / "eagle1-llama3", copy)
    assert check_golden_set(copy) == copy
    (copy / missing).unlink()
    with pytest.raises(GoldenDataMissing, match=f"golden data file missing: .*{missing}"):
        check_golden_set(copy)


def test_a_missing_set_fails_the_whole_check(tmp_path):
    for name in ALL_GOLDEN_SETS[:-1]:
        shutil.copytree(GOLDEN / name, tmp_path / name)
    with pytest.raises(GoldenDataMissing, match=ALL_GOLDEN_SETS[-1]):
        check_all_golden_sets(tmp_path)
