"""What the emulated-cluster tests share: whether a cluster can be built here, the
environment a rank started in a namespace needs, the clean-up around each test, and a timed
MPI send/receive across two hosts."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from real import cluster as rc
from real.cluster.netns import list_namespaces

REPO_ROOT = Path(__file__).resolve().parents[1]
CAN_BUILD = bool(os.geteuid() == 0 and shutil.which("ip") and shutil.which("tc"))
needs_root = pytest.mark.skipif(not CAN_BUILD, reason="needs root and iproute2 (ip, tc)")
ROOT_TESTS = [pytest.mark.root, pytest.mark.slow, needs_root]


def env() -> dict:
    """This environment, with the project importable and the venv's mpirun first on PATH."""
    bin_dir = str(Path(sys.executable).parent)
    return os.environ | {"PYTHONPATH": str(REPO_ROOT),
                         "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}


def namespaces_cleaned(prefix: str):
    """An autouse fixture: no namespace of ``prefix`` before or after each test."""
    @pytest.fixture(autouse=True)
    def clean():
        rc.down(prefix)
        yield
        rc.down(prefix)
        assert not list_namespaces(prefix)
    return clean


# 4 MiB from rank 0 to rank 1 and a 1-byte reply; the median of three timed rounds.
SENDRECV = """
import time, numpy as np
from mpi4py import MPI
comm, n = MPI.COMM_WORLD, 4 << 20
buf = np.ones(n, dtype=np.uint8)
times = []
for _ in range(4):                        # the first round sets up the connection
    comm.Barrier()
    t = time.perf_counter()
    if comm.rank == 0:
        comm.Send(buf, dest=1); comm.Recv(buf[:1], source=1)
    else:
        comm.Recv(buf, source=0); comm.Send(buf[:1], dest=0)
    times.append(time.perf_counter() - t)
if comm.rank == 0:
    print("SENDRECV_S", sorted(times[1:])[1], flush=True)
assert comm.rank == 0 or buf[-1] == 1
"""
