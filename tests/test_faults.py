"""A rank that dies mid-run: the others stop within the timeout and the run is recorded as failed.

Faults are injected with ``PSGD_FAULT_RANK=r PSGD_FAULT_AT_ITER=i`` (rank r calls
``os._exit(1)`` at iteration i; see ``real.context.fault_hook``).  Under MPICH's
hydra a rank that exits abnormally makes mpirun kill every other rank at once,
so no rank is left to write a record: the sweep records the failure.  With
``mpirun -disable-auto-cleanup`` the survivors live on, and then rank 0's own
deadline (``--timeout``, MPI) or gloo's closed connection ends the run and
rank 0 writes the failed record itself.
"""
from __future__ import annotations

import sys
import time

import pandas as pd
import pytest

from real import record, sweep
from tests.conftest import MPIRUN, run_cmd


TIMEOUT_S = 10
FLAGS = ["--dataset", "synthetic", "--model", "linear", "--train-size", "512",
         "--test-size", "64", "--batch-size", "32", "--epochs", "2", "--average-every", "2",
         "--timeout", str(TIMEOUT_S)]
FAULT = {"PSGD_FAULT_RANK": "1", "PSGD_FAULT_AT_ITER": "3"}


def faulty_run(alg: str, out, *mpirun_flags: str):
    t0 = time.monotonic()
    r = run_cmd([MPIRUN, *mpirun_flags, "-n", "2", sys.executable, "-m", "real.train",
                 "--algorithm", alg, "--run-id", "x", "--out", str(out), *FLAGS],
                env=FAULT, timeout=120)
    return r, time.monotonic() - t0


@pytest.mark.slow
@pytest.mark.parametrize("alg", ["psgd", "allreduce"])
def test_dead_rank_ends_the_run_quickly(tmp_path, alg):
    r, took = faulty_run(alg, tmp_path)
    assert r.returncode != 0 and took < 60
    assert "rank 1: fault injected at iteration 3" in r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("alg, says", [("psgd", "PeerTimeout"),    # MPI deadline
                                       ("allreduce", "gloo")])     # closed connection
def test_survivor_records_the_failure(tmp_path, alg, says):
    r, took = faulty_run(alg, tmp_path, "-disable-auto-cleanup")
    assert r.returncode != 0 and took < 60, r.stderr[-2000:]
    rec = record.read(tmp_path / "x")
    assert rec["status"] == "failed" and rec["failure"]["rank"] == 0
    cause = rec["failure"]["cause"]
    assert says in cause and "a peer rank died or hung" in cause and cause.startswith("rank 0:")


@pytest.mark.slow
def test_sweep_records_a_dead_point_and_keeps_the_others(tmp_path, monkeypatch):
    for k, v in FAULT.items():          # only P = 2 has a rank 1 to kill
        monkeypatch.setenv(k, v)
    code = sweep.main(["--algorithm", "psgd", "--workers", "1,2", "--model", "linear",
                       "--dataset", "synthetic", "--train-size", "512", "--test-size", "64",
                       "--batch-size", "32", "--out", str(tmp_path), "--timeout", "120",
                       "--", "--timeout", str(TIMEOUT_S), "--average-every", "2"])
    assert code == 1                    # a failed point makes the sweep say so
    ok, dead = record.read(tmp_path / "psgd-P1-r0"), record.read(tmp_path / "psgd-P2-r0")
    assert ok["status"] == "completed"
    assert dead["status"] == "failed" and "exit code" in dead["failure"]["cause"]
    table = pd.read_csv(tmp_path / "results.csv")
    assert set(table["run_id"]) == {"psgd-P1-r0", "psgd-P2-r0"}
    assert set(table["status"]) == {"completed", "failed"}
