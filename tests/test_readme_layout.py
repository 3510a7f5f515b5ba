"""The README's layout table matches the tree.

Every folder the table names exists, and every tracked top-level folder and every package
inside a stage has its row; each module, function or class a row names in backticks is
there, in one of the row's folders. Read from the files, nothing run.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def table() -> list[tuple[list[str], str]]:
    """(folders, what) of each row of the README's "## Layout" table."""
    text = (ROOT / "README.md").read_text().split("## Layout", 1)[1].split("\n## ", 1)[0]
    rows = [ln.split("|")[1:-1] for ln in text.splitlines() if ln.startswith("| `")]
    return [(re.findall(r"`([\w/]+/)`", cells[0]), cells[-1]) for cells in rows]


def tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    return out.splitlines()


def test_every_folder_named_exists_and_every_top_folder_has_its_row():
    named = {f for folders, _ in table() for f in folders}
    assert named and all((ROOT / f).is_dir() for f in named), sorted(
        f for f in named if not (ROOT / f).is_dir())
    top = {p.split("/")[0] + "/" for p in tracked() if "/" in p and not p.startswith(".")}
    assert top <= named, f"folders without a row: {sorted(top - named)}"


def test_every_package_of_a_stage_is_named_in_its_row():
    """A folder of modules (``real/launch/``, ``simulator/model/comm/``) appears in its row
    as ``launch/`` or ``comm/``, or has a row of its own."""
    folders = [f for row, _ in table() for f in row]
    missing = []
    for row, what in packages_rows():
        for folder in row:
            for init in sorted((ROOT / folder).rglob("*/__init__.py")):
                path = init.parent.relative_to(ROOT).as_posix() + "/"
                own = max((f for f in folders if path.startswith(f)), key=len)
                if own == folder and f"`{init.parent.name}/`" not in what:
                    missing.append(path)
    assert not missing, f"packages the layout table does not name: {missing}"


def packages_rows() -> list[tuple[list[str], str]]:
    """The rows of the project's packages (not tests, benchmarks, docs)."""
    return [(row, what) for row, what in table()
            if all((ROOT / f / "__init__.py").exists() for f in row)
            and not any(f in ("tests/", "benchmarks/") for f in row)]


def defined_names(folder: Path) -> set[str]:
    """Module and package names under ``folder`` (also as ``sub/module``), and the
    functions and classes they define at the top."""
    names = set()
    for path in folder.rglob("*.py"):
        rel = path.relative_to(folder).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        names.update(parts)
        names.update("/".join(parts[i:]) for i in range(len(parts)))
        names.update(re.findall(r"^(?:def|class) (\w+)", path.read_text(), re.M))
    return names


def test_every_name_in_a_row_is_in_its_folders():
    stale = []
    for row, what in packages_rows():
        known = {f.strip("/") for f in row}.union(*(defined_names(ROOT / f) for f in row))
        for name in re.findall(r"`([A-Za-z_][\w/]*)`", what):
            if name.rstrip("/") not in known:
                stale.append(f"{' '.join(row)}: {name}")
    assert not stale, f"names in the layout table that the tree lacks: {stale}"
