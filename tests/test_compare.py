"""simulator.compare: records written here, predicted with a known profile, then a wrong one."""
from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from simulator import compare
from contracts import profile as profiles
from contracts import record
from contracts.cluster import calibrated_cluster
from contracts.workload import Workload
from simulator.engine import simulate
from simulator.model.config import SchemeConfig
from simulator.testing import make_profile
from tests.conftest import py

CORES = 4


def true_profile():
    p = make_profile(cores=CORES, model="cnn")
    prov = dataclasses.replace(p.provenance, workers_seen=(1, 2))
    return dataclasses.replace(p, provenance=prov)


def write_records(runs, prof, offsets=(0.02, -0.03)):
    """Records as real.train writes them, with times 2-3% off what ``prof`` predicts."""
    for p in (1, 2, 3, 4):
        w = Workload(model="cnn", batch_per_worker=32, dataset_samples=4096, epochs=1,
                     threads_per_worker=1)
        truth = simulate(SchemeConfig("psgd"), p, w, calibrated_cluster(CORES), prof).epoch_s
        for rep, off in enumerate(offsets):
            rec = record.RunRecord(
                run_id=f"psgd-P{p}-r{rep}",
                config={"algorithm": "psgd", "model": "cnn", "batch_size": 32, "epochs": 1,
                        "average_every": 0, "repeat": rep},
                environment={"workers": p, "ranks": p, "cores": CORES, "threads_per_rank": 1},
                timings={"train_wall_s": truth * (1 + off), "epoch_s": [truth * (1 + off)]},
                results={"train_samples": 4096, "test_accuracy": 0.5, "final_loss": 1.0},
                comm={"bytes_sent_per_rank": [0] * p}, resources={})
            record.write(rec, runs)


def test_right_profile_small_errors_wrong_profile_large(tmp_path):
    prof = true_profile()
    write_records(tmp_path, prof)
    df = compare.compare(tmp_path, prof)
    assert list(df["workers"]) == [1, 2, 3, 4] and (df["runs"] == 2).all()
    assert df["rel_error"].abs().max() < 0.03
    assert list(df["held_out"]) == [False, False, True, True]
    summary = compare.error_summary(df)
    assert summary.iloc[0]["held_out_points"] == 2
    wrong = dataclasses.replace(prof, models=tuple(
        dataclasses.replace(m, steps=tuple(dataclasses.replace(
            s, step_intercept_s=10 * s.step_intercept_s, step_s_per_sample=10 * s.step_s_per_sample)
            for s in m.steps)) for m in prof.models))
    bad = compare.compare(tmp_path, wrong)
    assert (bad["rel_error"] > 2.0).all(), bad["rel_error"]


def test_cli_table_and_figures(tmp_path):
    prof = true_profile()
    runs = tmp_path / "runs"
    write_records(runs, prof)
    profiles.save(prof, tmp_path / "profile.json")
    r = py("simulator.compare", str(runs), "--profile", str(tmp_path / "profile.json"),
           "--out", str(tmp_path / "cmp"))
    assert r.returncode == 0, r.stderr
    assert "psgd" in r.stdout and "held-out median" in r.stdout
    table = pd.read_csv(tmp_path / "cmp" / "compare.csv")
    assert len(table) == 4
    png = tmp_path / "cmp" / "compare-psgd.png"
    assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 10_000


@pytest.mark.parametrize("args, says", [
    (["/no/such/dir"], "does not exist"),
])
def test_cli_bad_input(args, says):
    r = py("simulator.compare", *args)
    assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr


def test_cli_corrupt_profile(tmp_path):
    write_records(tmp_path / "runs", true_profile())
    (tmp_path / "p.json").write_text("{not json")
    r = py("simulator.compare", str(tmp_path / "runs"), "--profile", str(tmp_path / "p.json"))
    assert r.returncode == 2 and "not valid JSON" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_validate_reuses_runs_and_profile_and_says_so(tmp_path):
    """``validate --skip-sweep --skip-calibrate`` compares what OUT holds; the report names
    the commands that made the reused runs and profile (from their logs)."""
    prof = true_profile()
    write_records(tmp_path / "runs", prof)
    profiles.save(prof, tmp_path / "profile.json")
    (tmp_path / "sweep.log").write_text("$ python -m real.sweep --out runs-as-made\nok\n")
    r = py("pipelines.validate", "--workers", "1-4", "--out", str(tmp_path),
           "--skip-sweep", "--skip-calibrate")
    assert r.returncode == 0, r.stderr
    report = (tmp_path / "report.md").read_text()
    assert "python -m real.sweep --out runs-as-made   # reused, not run again" in report
    assert "python -m calibrate --out" in report and "(log missing)" in report
    assert "simulator.compare" in report and "compare-psgd.png" in report
    assert "held out" in report


def test_compare_predicts_from_workload_files(tmp_path):
    """The profile's model as a workload file gives the same predictions as the profile;
    a workload file of another speed moves them; the column says which was used."""
    from contracts.workload import save_workload, workload_of_cost
    prof = true_profile()
    runs = tmp_path / "runs"
    write_records(runs, prof)
    base = compare.compare(runs, prof)
    assert set(base["workload"]) == {"the profile's model"}
    cost = prof.model("cnn")
    same = save_workload(workload_of_cost(cost), tmp_path / "cnn.toml")
    again = compare.compare(runs, prof, workloads=[str(same)])
    assert set(again["workload"]) == {str(same)}
    assert list(again["predicted_s"]) == pytest.approx(list(base["predicted_s"]), rel=1e-9)
    slow = dataclasses.replace(cost, steps=tuple(dataclasses.replace(
        s, step_intercept_s=2 * s.step_intercept_s, step_s_per_sample=2 * s.step_s_per_sample)
        for s in cost.steps))
    folder = tmp_path / "files"
    save_workload(workload_of_cost(slow), folder / "cnn.toml")
    slower = compare.compare(runs, prof, workloads=[str(folder)])
    assert (slower["predicted_s"] > 1.5 * base["predicted_s"]).all()


def test_a_run_that_says_its_warm_up_leaves_out_that_many_steps(tmp_path):
    """``--warmup-steps 4``: four iterations of 1 s, then six of 0.1 s, in 4.6 s of
    training: 1.0 s an epoch of ten steady iterations (a single step left out: 4.0 s)."""
    def rec(warmup):
        return {"timings": {"train_wall_s": 4.6}, "_folder": tmp_path,
                "config": {"warmup_steps": warmup}}
    _iterations(tmp_path, 1.0, 0.1, 10, warm=4)
    assert compare.steady_epoch_s(rec(4), "allreduce", 1) == pytest.approx(1.0)
    assert compare.steady_epoch_s(rec(None), "allreduce", 1) == pytest.approx(3.6 * 10 / 9)
    _iterations(tmp_path, 1.0, 0.1, 5, warm=4)       # fewer than K + 2: the whole time
    assert compare.steady_epoch_s(rec(4), "allreduce", 1) == pytest.approx(4.6)


def test_a_long_warm_up_is_replaced_by_later_steps_not_scaled(tmp_path):
    """K > 1: the slowest worker's first K iterations are replaced by its mean later one
    of the same place in the averaging period. Time outside the iterations (0.1 s here)
    counts once, not scaled up with the steps: four warm-up iterations of 1 s, then
    0.1 s, in 4.7 s of training: 4.7 - 4 + 4 x 0.1 = 1.1 s (scaled: 0.7 x 10 / 6)."""
    def rec(algorithm="allreduce", every=0):
        return {"timings": {"train_wall_s": 4.7}, "_folder": tmp_path,
                "config": {"warmup_steps": 4, "average_every": every, "algorithm": algorithm}}
    _iterations(tmp_path, 1.0, 0.1, 10, warm=4)
    assert compare.steady_epoch_s(rec(), "allreduce", 1) == pytest.approx(1.1)


def test_the_measured_parts_leave_a_long_warm_up_out_as_the_epoch_does(tmp_path):
    """Four warm-up steps of 1 s then six of 0.1 s (half computing, a quarter each
    communicating and waiting): with ``--warmup-steps 4`` the parts a worker spends an
    epoch are the later steps' scaled to all ten (0.5 / 0.25 / 0.25 s); a record that does
    not say its warm-up keeps every step (2.3 / 1.15 / 1.15 s)."""
    _iterations(tmp_path, 1.0, 0.1, 10, warm=4)
    said = {"_folder": tmp_path, "config": {"warmup_steps": 4}}
    parts = compare.measured_breakdown([said], "allreduce", 1)
    assert [parts[f"measured_{k}_s"] for k in ("compute", "comm", "wait")] == \
        pytest.approx([0.5, 0.25, 0.25])
    parts = compare.measured_breakdown([{"_folder": tmp_path}], "allreduce", 1)
    assert parts["measured_compute_s"] == pytest.approx(2.3)


def test_a_warm_up_keeps_the_share_of_an_average_every_few_steps(tmp_path):
    """async_avg averaging every 3rd step (0.4 s, the others 0.1 s): four warm-up
    iterations of 1 s (steps 0-3), then steps 4-9 (0.1, 0.4, 0.1, 0.1, 0.4, 0.1: step 5
    and 8 average) in 5.2 s: the warm-up's steps are replaced by their place in the
    period, steps 0 and 3 by 0.1, 1 by 0.1, 2 by 0.4: 5.2 - 4 + 0.7 = 1.9 s. A later window
    without a whole period falls back to K = 1's scaling."""
    rows = ["rank,epoch,iteration,batch_size,compute_s,comm_s,wait_s,bytes_sent,loss"]
    for r in range(2):
        for i in range(10):
            t = 1.0 if i < 4 else (0.4 if i % 3 == 2 else 0.1)
            rows.append(f"{r},0,{i},32,{t / 2},{t / 4},{t / 4},0,1.0")
    (tmp_path / record.ITER_FILE).write_text("\n".join(rows) + "\n")
    rec = {"timings": {"train_wall_s": 5.2}, "_folder": tmp_path,
           "config": {"warmup_steps": 4, "average_every": 3, "algorithm": "async_avg"}}
    assert compare.averaging_period(rec, "async_avg") == 3
    assert compare.averaging_period(rec, "allreduce") == 1
    assert compare.steady_epoch_s(rec, "async_avg", 1) == pytest.approx(1.9)
    rec["config"]["average_every"] = 10            # 6 later steps: no whole period of 10
    assert compare.steady_epoch_s(rec, "async_avg", 1) == pytest.approx((5.2 - 1.0) * 10 / 9)


def _iterations(folder, first_s, rest_s, n, ranks=2, warm=1):
    rows = ["rank,epoch,iteration,batch_size,compute_s,comm_s,wait_s,bytes_sent,loss"]
    for r in range(ranks):
        for i in range(n):
            t = first_s if i < warm else rest_s
            rows.append(f"{r},0,{i},32,{t / 2},{t / 4},{t / 4},0,1.0")
    (folder / record.ITER_FILE).write_text("\n".join(rows) + "\n")


def test_warm_up_is_left_out_of_the_measured_time(tmp_path):
    """A first iteration of 1 s and nine of 0.1 s in 1.9 s of training: 1.0 s an epoch of
    ten steady iterations. Fewer than 3 iterations a worker: the whole time."""
    def rec():                       # (a record's iterations are read once: a new record each time)
        return {"timings": {"train_wall_s": 1.9}, "_folder": tmp_path}
    _iterations(tmp_path, 1.0, 0.1, 10)
    assert compare.steady_epoch_s(rec(), "mpi_allreduce", 1) == pytest.approx(1.0)
    assert compare.steady_epoch_s(rec(), "mpi_allreduce", 2) == pytest.approx(0.5)
    _iterations(tmp_path, 1.0, 0.1, 2)
    assert compare.steady_epoch_s(rec(), "mpi_allreduce", 1) == pytest.approx(1.9)
    (tmp_path / record.ITER_FILE).unlink()
    assert compare.steady_epoch_s(rec(), "mpi_allreduce", 1) == pytest.approx(1.9)
