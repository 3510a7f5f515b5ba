"""Shared helpers: run a project command as a user would, in a subprocess."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

# The same examples on every run (CI included): a property test either fails every time or never.
settings.register_profile("deterministic", derandomize=True, print_blob=True)
settings.load_profile("deterministic")

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MPIRUN = str(BIN / "mpirun")


def run_cmd(args: list[str], timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PATH=f"{BIN}:{os.environ.get('PATH', '')}")
    env.update(kw.pop("env", {}))
    return subprocess.run(args, cwd=kw.pop("cwd", ROOT), env=env, capture_output=True,
                          text=True, timeout=timeout, **kw)


def py(*args: str, **kw) -> subprocess.CompletedProcess:
    return run_cmd([sys.executable, "-m", *args], **kw)


def mpi(n: int, *args: str, **kw) -> subprocess.CompletedProcess:
    return run_cmd([MPIRUN, "-n", str(n), sys.executable, "-m", *args], **kw)


@pytest.fixture
def tiny(tmp_path):
    """Flags for a small, quick training run on synthetic data, writing into tmp_path."""
    return ["--dataset", "synthetic", "--train-size", "512", "--test-size", "256",
            "--batch-size", "32", "--out", str(tmp_path / "runs")]
