"""Honest measurements: a run disturbed by other processes is marked, reported, retried, left out."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import contextmanager

import pandas as pd
import pytest

from real.records import load, results
from real.launch import sweep
from real.launch.sweep import build_parser
from real.launch.sweep_launch import thread_note, threads_for
from contracts import record
from tests.conftest import py
from tests.refusal import refused


def rank(run_s, wait_s, busy_cores, machine="m1", cores=2, threads=1, wall_s=10.0):
    return {"host": "h", "machine": machine, "cores": cores, "threads": threads, "wall_s": wall_s,
            "run_s": run_s, "wait_s": wait_s, "cpu_percent": 100 * run_s / wall_s,
            "busy_cores": busy_cores, "load_before": [0.1, 0.1, 0.1], "load_max": 1.0,
            "load_end": [1.0, 0.5, 0.2]}


def test_a_run_alone_is_not_disturbed():
    disturbed, info = load.assess([rank(9.5, 0.2, 0.97), rank(9.4, 0.3, 0.97)])
    m = info["machines"][0]
    assert not disturbed and m["others_cores"] == 0 and m["served"] > 0.95


def test_a_run_whose_cpu_went_to_others_is_disturbed():
    # two single-thread ranks asked for 2 cores and got 1: other processes used the other
    disturbed, info = load.assess([rank(5.0, 5.0, 2.0), rank(5.0, 5.0, 2.0)])
    m = info["machines"][0]
    assert disturbed and m["served"] == 0.5 and m["expected_served"] == 1.0
    assert m["others_cores"] == pytest.approx(1.0)
    assert "50% of the CPU" in load.summary(info)


def test_a_run_that_oversubscribes_itself_is_not_disturbed():
    # four ranks on two cores: each runs half the time, nobody else is there
    ranks = [rank(5.0, 5.0, 2.0) for _ in range(4)]
    disturbed, info = load.assess(ranks)
    m = info["machines"][0]
    assert not disturbed and m["expected_served"] == 0.5 and m["others_cores"] == 0


def test_machines_are_judged_apart():
    disturbed, info = load.assess([rank(9.8, 0.1, 1.0, "a"), rank(4.0, 6.0, 2.0, "b")])
    assert disturbed and [m["disturbed"] for m in info["machines"]] == [False, True]


@contextmanager
def cpu_hogs(n: int):
    # each in a session of its own, as other users' jobs are: with the kernel's autogroup
    # scheduling, hogs in the test's own session would only compete with each other
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
             for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


@pytest.mark.slow
def test_a_cpu_hog_beside_a_run_marks_it_disturbed(tiny, tmp_path):
    with cpu_hogs(os.cpu_count() or 1):
        r = py("real.train", "--algorithm", "serial", "--threads", str(os.cpu_count() or 1), *tiny)
    assert r.returncode == 0, r.stderr
    rec = record.read(record.find_runs(tmp_path / "runs")[0])
    assert rec["disturbed"] is True and record.is_disturbed(rec)
    m = rec["load"]["machines"][0]
    assert m["served"] < load.DISTURBED_SHARE * m["expected_served"]
    assert m["others_cores"] >= 0.5
    assert rec["load"]["per_rank"][0]["threads"] == (os.cpu_count() or 1)
    assert "disturbed: the ranks got" in r.stderr


@pytest.mark.slow
def test_every_ranks_window_spans_the_whole_run(tiny, tmp_path):
    """Nine ranks on this machine's cores: the first to finish waits for the others inside
    its own window (a barrier before the meters stop), so no rank's polling counts as
    another process in the windows of the ranks still training."""
    from tests.conftest import mpi
    r = mpi(9, "real.train", "--algorithm", "ps_async", "--model", "mlp", "--threads", "1",
            *tiny)
    assert r.returncode == 0, r.stderr[-2000:]
    rec = record.read(record.find_runs(tmp_path / "runs")[0])
    span = rec["timings"]["train_wall_s"]
    windows = [row["window_s"] for row in rec["load"]["per_rank"]]
    assert len(windows) == 9 and min(windows) >= span - 0.05, (windows, span)


@pytest.mark.slow
def test_the_sweep_retries_disturbed_points_and_marks_them(tmp_path):
    out = tmp_path / "sweep"
    # 2 x cores - 1 hogs: with the run's one thread, each runnable thread gets half a core,
    # so each run (the retry too) gets about 50% of the CPU it asks for: clearly below the
    # bar (85%) on any number of cores
    with cpu_hogs(2 * (os.cpu_count() or 1) - 1):
        r = py("real.sweep", "--algorithm", "serial", "--workers", "1", "--dataset", "synthetic",
               "--train-size", "2048", "--batch-size", "8", "--test-size", "64", "--out",
               str(out), "--threads", "1", "--retry-disturbed", "1", "--quiet-wait", "1")
        # (256 steps, over a second a run beside the hogs: the verdict reads the ranks'
        # schedstat and /proc/stat at the window's two ends, the 0.5 s samples only add
        # child processes and the load's peak)
    assert r.returncode == 0, r.stderr
    assert "serial-P1-r0: ok but DISTURBED" in r.stderr and "retry 1 of 1" in r.stderr
    assert "disturbed: serial-P1-r0: the ranks got" in r.stderr
    assert " *" in r.stdout and "every run of this point was disturbed" in r.stdout
    df = pd.read_csv(out / "results.csv")
    assert bool(df["disturbed"].iloc[0]) and df["others_cores"].iloc[0] > 0
    assert json.loads((out / "serial-P1-r0" / "record.json").read_text())["config"]["threads"] == 1


def summary_of(times, disturbed):
    df = pd.DataFrame({"algorithm": "psgd", "workers": [p for p, _ in times],
                       "status": "completed", "train_wall_s": [t for _, t in times],
                       "final_loss": 0.5, "test_accuracy": 0.9, "cpu_util_percent": 100.0,
                       "peak_rss_mb": 1.0, "disturbed": disturbed})
    return results.summarize(df)


def test_points_use_their_undisturbed_runs_and_say_so():
    s = summary_of([(1, 10.0), (1, 30.0), (2, 6.0)], [False, True, False])
    p1 = s[s["workers"] == 1].iloc[0]
    assert p1.time_s == 10.0 and p1.runs == 1 and p1.disturbed_runs == 1 and not p1.disturbed
    assert "1 disturbed run(s) left out" in results.format_table(s)


def test_an_efficiency_above_one_always_comes_with_a_warning():
    s = summary_of([(1, 70.9), (2, 4.2)], [True, False])
    text = results.format_table(s)
    assert "8.44" in text and "WARNING: efficiency 8.44 > 1" in text
    assert "the P = 1 run was slowed (it was disturbed" in text
    assert "70.90 *" in text
    clean = results.format_table(summary_of([(1, 10.0), (2, 6.0)], [False, False]))
    assert "WARNING" not in clean and "*" not in clean


def test_every_point_runs_the_threads_of_the_largest_by_default():
    """Issue 40, item 5: P = 1 runs the threads per rank of the other points (cores // the
    most ranks a point puts on this host), unless asked otherwise."""
    args = build_parser().parse_args(["--algorithm", "psgd", "--workers", "1,2,4"])
    todo = [("psgd", 1, 0), ("psgd", 2, 0), ("psgd", 4, 0)]
    assert [threads_for(args, "psgd", p, todo, cores=8) for p in (1, 2, 4)] == [2, 2, 2]
    assert thread_note(args, todo, cores=8) is None
    ps = [("ps_sync", 1, 0), ("ps_sync", 3, 0)]              # 4 ranks: 3 workers + server
    assert threads_for(args, "ps_sync", 1, ps, cores=8) == 2
    own = build_parser().parse_args(["--workers", "1,2", "--threads", "per-point"])
    assert "P=1: 8, P=2: 4" in thread_note(own, [("psgd", 1, 0), ("psgd", 2, 0)], cores=8)
    fixed = build_parser().parse_args(["--workers", "1,2", "--threads", "1"])
    assert threads_for(fixed, "psgd", 1, todo, cores=8) == 1
    assert thread_note(fixed, [("psgd", 1, 0), ("psgd", 2, 0)], cores=8) is None
    remote = build_parser().parse_args(["--workers", "1,2", "--hostfile", "h"])
    assert threads_for(remote, "psgd", 1, todo, cores=8) is None   # the hosts' own cores


@pytest.mark.parametrize("argv, env, says", [
    (["--hostfile", "HOSTS"], {}, "line 2: unknown host 'no-such-node.invalid'"),
    (["--workers", "1-4"], {"SLURM_JOB_ID": "9", "SLURM_NTASKS": "2"},
     "the Slurm allocation has 2 task(s) but psgd at P = 3 needs 3 ranks"),
    (["--launcher", "srun", "--hostfile", "HOSTS"], {}, "--launcher srun places ranks itself"),
])
def test_sweep_refuses_bad_placements_in_one_line(tmp_path, capsys, monkeypatch, argv, env,
                                                   says):
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost:2\nno-such-node.invalid:2\n")
    argv = [str(hosts) if a == "HOSTS" else a for a in argv]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    refused(sweep.main, [*argv, "--out", tmp_path / "runs"], says, capsys)
    assert not (tmp_path / "runs").exists()


def test_a_sweep_gives_p1_the_threads_of_its_other_points(capsys):
    """What the sweep runs (--dry-run prints each point's command): every point, P = 1
    included, with the same --threads."""
    assert sweep.main(["--schemes", "psgd", "--workers", "1-3", "--dataset", "synthetic",
                       "--train-size", "512", "--dry-run"]) == 0
    commands = capsys.readouterr().out.strip().splitlines()
    threads = {cmd.split("--threads ")[1].split()[0] for cmd in commands}
    assert len(commands) == 3 and len(threads) == 1, commands
    assert sweep.main(["--schemes", "psgd", "--workers", "1-2", "--dataset", "synthetic",
                       "--train-size", "512", "--dry-run", "--", "--threads", "2"]) == 0
    for cmd in capsys.readouterr().out.strip().splitlines():       # given after --: those
        assert cmd.count("--threads") == 1 and "--threads 2" in cmd
