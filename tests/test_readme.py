"""The README's layout table is generated from the registry: keep them in sync."""

from pathlib import Path

from eagle_convert.formats.registry import markdown_table


def test_readme_layout_table_matches_registry():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    start = readme.index("<!-- layouts-table")
    block = readme[readme.index("\n", start) + 1: readme.index("<!-- /layouts-table -->")].strip()
    assert block == markdown_table()
