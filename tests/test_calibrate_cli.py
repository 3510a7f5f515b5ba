"""calibrate's commands: fits from probe tables and run records, bad input, a real quick run."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calibrate import __main__ as cal_main
from calibrate.fits import fit
from calibrate.probes import probe
from contracts import profile as prof
from contracts import record

REPO = Path(__file__).resolve().parents[1]
META = {"host": "h", "cores": 2, "created_utc": "2026-01-01T00:00:00+00:00",
        "load_avg_1min": 0.0, "versions": {"torch": "2.13.0"}}


def synthetic_workdir(d: Path, rng) -> None:
    """Probe tables as calibrate.probe writes them, from known costs."""
    steps = [{"model": "cnn", "threads": t, "batch": b, "rep": r, "forward_s": 0.0,
              "backward_s": 0.6 * s, "update_s": 0.0, "step_s": s}
             for t in (1, 2) for b in (16, 32, 64) for r in range(5)
             for s in [(1e-3 + 1e-4 * b / t) * (1 + 0.01 * rng.standard_normal())]]
    pd.DataFrame(steps).to_csv(d / "compute_steps.csv", index=False)
    pd.DataFrame([{"model": "cnn", "threads": 2, "batch": 64, "rep": 0, "eval_s": 64e-5,
                   "eval_s_per_sample": 1e-5}]).to_csv(d / "compute_eval.csv", index=False)
    (d / "models.json").write_text(json.dumps({"cnn": {"param_count": 100,
                                                        "layer_param_counts": [60, 40]}}))
    pd.DataFrame([{"params": p, "adds": 3, "rep": r, "update_s": 1e-6 + 1e-10 * p,
                   "sum_s": 3 * 2.5e-11 * 4 * p} for p in (1e3, 1e5, 1e7) for r in range(3)]
                 ).to_csv(d / "server.csv", index=False)
    pd.DataFrame([{"model": "cnn", "params": 100, "rep": r, "update_s": s}
                  for r, s in enumerate((5e-4, 6e-4, 9e-4))]
                 ).to_csv(d / "server_update.csv", index=False)
    pd.DataFrame([{"k": k, "proc": 0, "rep": r, "step_s": max(1, k / 2)}
                  for k in (1, 2, 3, 4) for r in range(3)]).to_csv(d / "sharing.csv", index=False)
    for workers in (2, 4):
        rows = [{"workers": workers, "rank": rank, "algorithm": alg, "backend": be, "op": op,
                 "bytes": n, "rep": r, "time_s": (2e-6 * workers + 1e-10 * n) * (1 + 0.1 * rank)}
                for be, op, alg in (("mpi", "allreduce", "auto"), ("mpi", "sendrecv", "-"),
                                    ("gloo", "sendrecv", "-"))
                for n in 4 * 4 ** np.arange(8) for r in range(3) for rank in range(workers)]
        pd.DataFrame(rows).to_csv(d / f"comm_P{workers}_auto.csv", index=False)
        (d / f"comm_P{workers}_auto.json").write_text(json.dumps(
            {**META, "workers": workers, "algorithm": "auto", "oversubscribed": workers > 2,
             "mpi_library": "MPICH Version: 5.0.2", "command": f"mpirun -n {workers} ..."}))
    for part in ("compute", "sharing", "server"):
        (d / f"{part}_meta.json").write_text(json.dumps({**META, "command": f"probe {part}"}))


def write_run(runs: Path, run_id: str, workers: int, threads: int, batch: int, step_s: float):
    env = {"host": "h", "cores": 2, "ranks": workers, "ranks_per_host": workers,
           "threads_per_rank": threads}
    iters = [{"rank": r, "epoch": 0, "iteration": i, "batch_size": batch, "compute_s": step_s,
              "comm_s": 0.0, "wait_s": 0.0, "bytes_sent": 0} for r in range(workers)
             for i in range(20)]
    record.write(record.RunRecord(run_id=run_id, config={"model": "cnn", "batch_size": batch},
                                  environment=env, iterations=iters,
                                  timings={"train_wall_s": 20 * step_s}), runs)


def test_fit_from_probes_and_runs_with_max_workers(tmp_path):
    rng = np.random.default_rng(0)
    synthetic_workdir(tmp_path, rng)
    runs = tmp_path / "runs"
    write_run(runs, "serial-P1", 1, 2, 128, 1e-3 + 1e-4 * 128 / 2)     # a clean T=2 step sample
    write_run(runs, "psgd-P2", 2, 1, 128, 1e-3 + 1e-4 * 128)
    write_run(runs, "psgd-P4", 4, 1, 32, 2 * (1e-3 + 1e-4 * 32))        # 4 on 2 cores: sharing
    result = fit.build(tmp_path, runs, max_workers=2)
    p = result.profile
    assert set(p.provenance.runs_seen) == {"serial-P1", "psgd-P2"}
    assert set(p.provenance.workers_seen) == {1, 2}
    assert {c.workers for c in p.collectives} == {2}
    assert max(p.sharing_slowdown) == 2
    step = p.model("cnn").step_fit(2)
    assert step.batches == (16, 32, 64, 128)
    assert step.step_s_per_sample == pytest.approx(0.5e-4, rel=0.05)
    assert p.transport("mpi").alpha_s == pytest.approx(4e-6 * 1.1, rel=0.01)
    assert p.transport("mpi").gamma_s_per_byte == pytest.approx(2.5e-11, rel=1e-3)
    assert p.server.update_s_per_param == pytest.approx(1e-10, rel=1e-3)
    assert p.model("cnn").server_update_s == 6e-4      # the real server's update: its median
    full = fit.build(tmp_path, runs).profile
    assert set(full.provenance.workers_seen) == {1, 2, 3, 4}
    assert full.sharing_slowdown[4] == pytest.approx(2.0)
    fit.write_outputs(result, tmp_path, tmp_path / "p.json", plot=False)
    assert prof.load(tmp_path / "p.json") == p


def test_sharing_slowdown_is_against_the_compute_fit(tmp_path):
    """A noisy k = 1 window must not skew every slowdown: the reference is the thread-1 fit."""
    synthetic_workdir(tmp_path, np.random.default_rng(0))
    alone = fit.build(tmp_path).profile.model("cnn").step_fit(1).step_s(64)
    pd.DataFrame([{"k": k, "proc": 0, "rep": r, "step_s": alone * f}
                  for k, f in ((1, 1.3), (2, 1.0), (4, 2.0)) for r in range(3)]
                 ).to_csv(tmp_path / "sharing.csv", index=False)
    (tmp_path / "sharing_meta.json").write_text(json.dumps(
        {**META, "command": "probe sharing", "sharing_model": "cnn", "sharing_batch": 64}))
    slow = fit.build(tmp_path).profile.sharing_slowdown
    assert slow == pytest.approx({1: 1.0, 2: 1.0, 4: 2.0})


def one_line_error(capsys, code):
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err and "Traceback" not in err
    return err


def test_not_a_run_record_is_refused(tmp_path, capsys):
    synthetic_workdir(tmp_path, np.random.default_rng(0))
    (tmp_path / "runs" / "r1").mkdir(parents=True)
    (tmp_path / "runs" / "r1" / "record.json").write_text("{}")
    err = one_line_error(capsys, fit.main(["--workdir", str(tmp_path), "--runs",
                                           str(tmp_path / "runs"), "--out", str(tmp_path / "p.json")]))
    assert "lacks field" in err
    assert not (tmp_path / "p.json").exists()
    err = one_line_error(capsys, fit.main(["--workdir", str(tmp_path), "--runs", str(tmp_path),
                                           "--out", str(tmp_path / "p.json"), "--no-plot",
                                           "--max-workers", "0"]))
    assert "--max-workers" in err


@pytest.mark.parametrize("argv, says", [
    (["--workers", "2,9"], "--workers: 9"),
    (["--sizes", str(2**50)], "--sizes"),
    (["--models", "resnet"], "resnet"),
    (["--threads", "64"], "--threads: 64"),
    (["--batches", "16,x"], "--batches"),
])
def test_impossible_plans_are_refused_before_anything_runs(tmp_path, capsys, argv, says):
    work = tmp_path / "w"
    code = cal_main.main(["--quick", "--workdir", str(work), "--out", str(tmp_path / "p.json")]
                         + argv)
    assert says in one_line_error(capsys, code)
    assert not work.exists() and not (tmp_path / "p.json").exists()


def test_probe_comm_outside_mpirun_is_refused(tmp_path, capsys, monkeypatch):
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    one_line_error(capsys, probe.main(["--part", "comm", "--workdir", str(tmp_path)]))


def test_fit_without_probes_says_run_probe_first(tmp_path, capsys):
    err = one_line_error(capsys, fit.main(["--workdir", str(tmp_path), "--out",
                                           str(tmp_path / "p.json")]))
    assert "calibrate.probe" in err


@pytest.mark.slow
def test_quick_calibration_under_mpirun_gives_a_loadable_profile(tmp_path):
    """The documented command, shrunk: cnn at batch 16/32, two processes sharing the cores
    (k = 2 alone: the slowdown's reference is the thread-1 step fit), tiny messages,
    mpirun -n 2."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    out, work = tmp_path / "profile.json", tmp_path / "work"
    cmd = [sys.executable, "-m", "calibrate", "--quick", "--models", "cnn", "--batches", "16,32",
           "--threads", "1", "--sharing", "2", "--server-params", "1000,100000",
           "--sizes", "4,256,16384,262144", "--workers", "2", "--algorithms", "auto,ring",
           "--repeats", "3", "--workdir", str(work), "--out", str(out),
           "--quiet-wait", "0", "--force",      # a shared test machine: quality is not the point
           "--repeat-noisy", "0"]   # nor measuring again (test_calibrate_quality checks the repeats)
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    p = prof.load(out)
    assert p.model("cnn").step_fit(1).batches == (16, 32)
    assert p.model("cnn").server_update_s > p.server.update_s(p.model("cnn").param_count)
    assert {t.backend for t in p.transports} == {"mpi", "gloo"}
    assert {(c.backend, c.algorithm) for c in p.collectives if c.op == "allreduce"} == {
        ("mpi", "auto"), ("mpi", "ring"), ("gloo", "-")}
    assert p.provenance.workers_seen == (1, 2) and p.sharing_slowdown[2] > 0
    assert any(c.startswith("mpirun -n 2") for c in p.provenance.commands)
    assert (work / "fits.png").stat().st_size > 0
    raw = pd.read_csv(work / "comm_P2_ring.csv")
    assert set(raw["algorithm"]) == {"ring"} and len(raw) == 2 * 4 * 3
    meta = json.loads((work / "comm_P2_ring.json").read_text())
    assert meta["algorithm_env_per_rank"] == ["ring", "ring"]
