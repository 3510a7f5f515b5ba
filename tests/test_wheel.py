"""The wheel holds every package and data file of the project (``pip install .``, not only
``pip install -e .``, gives working ``contracts``, ``cli``, ``simulator``, ``real``,
``calibrate`` and ``pipelines``).

The tree is copied to a folder of its own first (no ``build/`` left over from an earlier
build can add what the tree lacks), built with the environment's setuptools, and the
wheel's file list is checked against the tree's. ``.ci/run`` builds such a wheel, lets pip
resolve every dependency it declares, and runs ``python -m simulator.predict`` in a fresh
environment holding the wheel and the simulator's libraries only (no torch or MPI).
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# every package
STAGES = ("contracts", "cli", "libraries", "report", "real", "calibrate", "simulator", "pipelines")
pytestmark = pytest.mark.timeout(300)


def tree_files() -> set[str]:
    """Every file of the three stages a user needs: sources and data, no caches."""
    return {str(p.relative_to(ROOT)) for stage in STAGES for p in (ROOT / stage).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


def test_the_wheel_holds_every_package_and_data_file(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for stage in STAGES:
        shutil.copytree(ROOT / stage, src / stage,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                           "--no-build-isolation", "-w", str(tmp_path / "dist"), str(src)],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    wheel, = (tmp_path / "dist").glob("psgd_sim-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = sorted(tree_files() - names)
    assert not missing, f"not in the wheel: {missing}"
    assert "simulator/data/default_profile.json" in names
    assert any(n.startswith("simulator/data/presets/") for n in names)


def test_every_package_of_the_tree_is_checked():
    """A new top-level package (a folder with ``__init__.py``) is added to ``STAGES`` above."""
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests", "benchmarks"}
    assert packages == set(STAGES)
