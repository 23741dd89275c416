"""Every local link in README.md and docs/ resolves (file, and heading when the link names one), and nothing the
project ships points at the team's shared folder outside the repository (its docs and golden sets now live here)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", flags=re.M | re.S)


def local_links(markdown: str) -> list[str]:
    """Targets of markdown links outside code blocks, without web links."""
    text = FENCE.sub("", markdown)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def anchor_of(heading: str) -> str:
    """GitHub's id for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    return {anchor_of(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in local_links(path.read_text()):
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no such heading)")
    return broken


@pytest.mark.parametrize("path", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_every_local_link_resolves(path):
    assert broken_links(path) == []


def test_the_docs_pages_exist_and_the_readme_links_them():
    readme_links = set(local_links((ROOT / "README.md").read_text()))
    for page in ("convert", "layouts", "targets", "bench", "trees", "engines", "ci", "development"):
        assert f"docs/{page}.md" in readme_links
    for note in ("tree-drafting", "tp-ranks", "formats", "vllm-cpu", "sglang-cpu"):
        assert (ROOT / "docs" / "design" / f"{note}.md").is_file()


def test_the_link_checker_catches_a_broken_link(tmp_path):
    # negative control: a missing file, a missing heading, while links inside code blocks and web links are ignored
    (tmp_path / "there.md").write_text("# A heading: with `code`\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](there.md#a-heading-with-code) [gone](missing.md) [bad](there.md#nope) "
                    "[web](https://example.com/x.md)\n```\n[in code](nowhere.md)\n```\n")
    assert broken_links(page) == ["missing.md (no such file)", "there.md#nope (no such heading)"]


def shipped_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "Makefile"]
    for folder in ("docs", "tests", "scripts"):
        files += [p for p in (ROOT / folder).rglob("*") if p.is_file() and p.suffix in {".md", ".py", ".sh", ".txt"}]
    return files


# the parent folder's shared docs and golden sets, however cited; built from parts so this file does not match
OUTSIDE = re.compile(r"\.\./" + "shared|" + r"(?<![\w/])" + "shared/(docs|golden)")


def test_nothing_points_at_the_shared_folder_outside_the_repository():
    offenders = [str(p.relative_to(ROOT)) for p in shipped_files() if OUTSIDE.search(p.read_text(errors="replace"))]
    assert offenders == []


def test_the_outside_pattern_matches_what_it_must():
    # negative control: the spellings the code used to cite, and none of the innocent uses of the word
    for cited in ("see ../" "shared" "/docs/x.md", "in ../" "shared" "/golden", "(shared" "/docs/tp-ranks.md 1.8)"):
        assert OUTSIDE.search(cited), cited
    for innocent in ("a shared machine", "docs/design/tp-ranks.md", "tests/golden", "torch.from_file(shared=False)"):
        assert not OUTSIDE.search(innocent), innocent
