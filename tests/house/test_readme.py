"""The docs stay true: the layout table in docs/layouts.md is generated from the registry, and the README's Python
API example runs as written."""

import re
from pathlib import Path

import pytest

from eagle_convert.layouts.registry import markdown_table

ROOT = Path(__file__).resolve().parents[2]


def test_readme_layout_table_matches_registry():
    readme = (ROOT / "docs" / "layouts.md").read_text()
    start = readme.index("<!-- layouts-table")
    block = readme[readme.index("\n", start) + 1: readme.index("<!-- /layouts-table -->")].strip()
    assert block == markdown_table()


def python_block_under(markdown: str, heading: str) -> str:
    """The first ```python block of the section titled `heading` (up to the next heading of any level)."""
    section = re.search(rf"^#+ {re.escape(heading)}\n(.*?)(?=^#+ |\Z)", markdown, flags=re.M | re.S)
    assert section, f"no section {heading!r}"
    block = re.search(r"^```python\n(.*?)^```", section.group(1), flags=re.M | re.S)
    assert block, f"no python block under {heading!r}"
    return block.group(1)


def test_readme_python_example_runs(tmp_path, monkeypatch, capsys):
    code = python_block_under((ROOT / "README.md").read_text(), "Python API")
    monkeypatch.chdir(tmp_path)  # the example writes its tiny pair and output under the working directory
    for run in ("first", "again"):  # a second run in the same folder works too (issue 29: it raised OutputPathError)
        exec(compile(code, "README.md (Python API)", "exec"), {"__name__": "readme_example"})
        out = capsys.readouterr().out
        assert "vllm serve" in out and '"method": "eagle"' in out, run
        assert "tau 4.0 gates passed: True lossless: True" in out, run
        assert (tmp_path / "eagle-example" / "out" / "eagle_convert.json").is_file()


def test_the_example_extractor_finds_only_that_section():
    # negative control for the extractor: a python block under another heading is not the example
    text = "# A\n```python\nx = 1\n```\n## Python API\ntext\n```python\ny = 2\n```\n## B\n```python\nz = 3\n```\n"
    assert python_block_under(text, "Python API") == "y = 2\n"
    with pytest.raises(AssertionError, match="no python block"):
        python_block_under("## Python API\nno code\n## B\n```python\nz = 3\n```\n", "Python API")
