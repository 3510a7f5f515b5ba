"""Every link of the README, docs/ and the evidence pages of docs/results/ leads
somewhere: the file exists, and a `#section` names a heading of it.

The reports (docs/validation.md, docs/accuracy.md) are rewritten as results
come in, and other docs and the README point into their sections; a heading
renamed without its links fails here. Anchors are GitHub's: the heading in
lower case, punctuation other than hyphens and underscores dropped, spaces as
hyphens, a repeated heading numbered -1, -2, ...
"""
from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import ROOT

LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"#{1,6} (.*)")


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a markdown file (fenced code left out)."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    in_fence = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_fence = not in_fence
        match = None if in_fence else HEADING.fullmatch(line)
        if match:
            slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def broken_links(doc: Path, root: Path = ROOT) -> list[str]:
    """The links of one markdown file whose file or section does not exist (named from root)."""
    broken = []
    for target in LINK.findall(doc.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path) if path else doc
        if not dest.exists():
            broken.append(f"{doc.relative_to(root)}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{doc.relative_to(root)}: {target} (no such section)")
    return broken


def test_links_of_readme_and_docs_resolve():
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
            *sorted((ROOT / "docs" / "results").glob("*.md"))]
    broken = [line for doc in docs for line in broken_links(doc)]
    assert not broken, "\n".join(broken)


def test_a_renamed_section_is_caught(tmp_path):
    (tmp_path / "report.md").write_text("# Report\n\n## Current result\n\n## Ruled out\n")
    doc = tmp_path / "readme.md"
    doc.write_text("[r](report.md#current-result) [old](report.md#tried-and-not-kept) "
                   "[gone](missing.md)\n")
    assert broken_links(doc, tmp_path) == [
        "readme.md: report.md#tried-and-not-kept (no such section)",
        "readme.md: missing.md (no such file)"]
