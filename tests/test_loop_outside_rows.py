"""The training loop's Python outside the iteration rows: measured once from a record
(``real.records.timing``), fitted once (``calibrate.fits.runs``), charged once a step by
the model (``simulator.engine.run.with_loop``). Closed forms on made-up records; no run."""
from __future__ import annotations

import dataclasses
import json

import pytest

from calibrate.fits.runs import collect, loop_per_step_s
from contracts import profile as profiles
from contracts import record
from contracts.cluster import calibrated_cluster
from contracts.workload import Workload
from real.records.timing import loop_s_per_step, window_parts
from simulator.engine import simulate
from simulator.model.config import SchemeConfig
from simulator.testing import make_profile

STEP_S, LOOP_S, SETUP_S, STEPS = 0.040, 0.0003, 0.007, 6


def _rows(rank: int, closing_s: float = 0.0) -> list[dict]:
    rows = [{"rank": rank, "epoch": 0, "iteration": i, "batch_size": 32, "compute_s": STEP_S,
             "comm_s": 0.0, "wait_s": 0.0, "bytes_sent": 0, "loss": 1.0} for i in range(STEPS)]
    if closing_s:      # an epoch's closing average: a row of iteration -1, inside epoch_s
        rows.append({**rows[0], "iteration": -1, "compute_s": 0.0, "comm_s": closing_s})
    return rows


def _timings(closing_s: float = 0.0) -> dict:
    epoch_s = STEPS * (STEP_S + LOOP_S) + closing_s
    return {"train_wall_s": epoch_s + SETUP_S, "epoch_s": [epoch_s]}


def test_a_window_splits_into_setup_loop_and_rows():
    parts = window_parts(_timings(0.002), _rows(0, 0.002))
    assert parts["setup_s"] == pytest.approx(SETUP_S)
    assert parts["loop_s"] == pytest.approx(STEPS * LOOP_S)
    assert parts["rows_s"] == pytest.approx(STEPS * STEP_S + 0.002)
    # the closing row is the epoch's, not the loop's; the loop is per step
    assert loop_s_per_step(_timings(0.002), _rows(0, 0.002)) == pytest.approx(LOOP_S)
    assert loop_s_per_step({"train_wall_s": 1.0}, _rows(0)) is None


def _write(runs, scheme: str, workers: int, cores: int = 4, disturbed: bool = False):
    rec = record.RunRecord(
        run_id=f"{scheme}-P{workers}{'-d' if disturbed else ''}", timings=_timings(),
        disturbed=disturbed,
        config={"algorithm": scheme, "model": "cnn", "batch_size": 32, "epochs": 1},
        environment={"workers": workers, "ranks": workers + (scheme == "ps_sync"),
                     "ranks_per_host": workers, "cores": cores, "threads_per_rank": 1},
        iterations=[r for rank in range(workers) for r in _rows(rank)])
    record.write(rec, runs)


def test_calibration_fits_the_loop_apart_from_the_step(tmp_path, monkeypatch):
    """The step samples are the rows' compute (no loop in them); the loop is the window's
    rest a step, from undisturbed runs whose rank 0 trains with a core a rank."""
    _write(tmp_path, "mpi_allreduce", 2)
    _write(tmp_path, "ps_sync", 2)                       # rank 0 is the server: no sample
    _write(tmp_path, "allreduce", 6)                     # 6 ranks on 4 cores: shared, none
    _write(tmp_path, "mpi_allreduce", 2, disturbed=True)  # compare leaves it out: none
    reads = []
    monkeypatch.setattr(record, "read_iterations",
                        lambda d, _f=record.read_iterations: reads.append(d) or _f(d))
    runs = collect(tmp_path)
    assert sorted(reads) == record.find_runs(tmp_path)   # each run's rows read once
    assert runs.loop_s == pytest.approx((LOOP_S,))
    assert loop_per_step_s(runs.loop_s) == pytest.approx(LOOP_S)
    assert loop_per_step_s(()) == 0.0
    assert set(runs.steps["step_s"]) == {STEP_S}


@pytest.mark.parametrize("scheme, workers", [("serial", 1), ("mpi_allreduce", 2), ("ddp", 2)])
def test_the_model_charges_the_loop_once_a_step(scheme, workers):
    """With a core a rank, identical steps and the loop added to each: the run is exactly
    one loop a step longer, whatever the scheme; the profile's default 0 changes nothing."""
    prof = make_profile(cores=4, model="cnn")
    work = Workload(model="cnn", batch_per_worker=32, dataset_samples=32 * workers * STEPS,
                    epochs=1, threads_per_worker=1)
    on = calibrated_cluster(4)
    base = simulate(SchemeConfig(scheme), workers, work, on, prof)
    looped = simulate(SchemeConfig(scheme), workers, work, on,
                      dataclasses.replace(prof, loop_s_per_step=LOOP_S))
    assert base.iterations_per_worker == STEPS
    assert looped.time_s - base.time_s == pytest.approx(STEPS * LOOP_S, rel=1e-9)


def test_a_profile_keeps_the_loop_and_an_old_one_reads_as_zero(tmp_path):
    prof = dataclasses.replace(make_profile(), loop_s_per_step=LOOP_S)
    profiles.save(prof, tmp_path / "p.json")
    assert profiles.load(tmp_path / "p.json").loop_s_per_step == LOOP_S
    old = json.loads((tmp_path / "p.json").read_text())
    del old["loop_s_per_step"]
    assert profiles.from_dict(old).loop_s_per_step == 0.0


def test_ddp_rows_are_no_step_samples(tmp_path):
    """ddp's compute rows hold its bucket all-reduces (the reducer waits for them inside
    backward), which the model charges as communication: the step fit takes none of them,
    so a ddp run's longer rows do not raise every scheme's step."""
    _write(tmp_path, "mpi_allreduce", 2)
    _write(tmp_path, "ddp", 2)
    runs = collect(tmp_path)
    assert set(runs.steps["source"]) == {"mpi_allreduce-P2"}
    assert runs.loop_s == pytest.approx((LOOP_S, LOOP_S))       # its loop still counts
    assert "ddp-P2" in runs.runs_seen
