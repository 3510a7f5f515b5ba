"""real.sweep checks every flag, and every flag after --, before its first point starts.

Each refusal is one line and exit code 2, within seconds, with nothing run and
nothing written; ``--dry-run`` shows what would run. A damaged record in the
sweep's folder is named when the results are collected, never half-loaded.
"""
from __future__ import annotations

import pytest

from real.launch import sweep
from real.records import results
from contracts import record
from tests.refusal import refused, refused_cli

pytestmark = pytest.mark.timeout(60)

SMALL = ["--dataset", "synthetic", "--model", "linear", "--train-size", "256",
         "--test-size", "64"]

BAD = [
    (["--workers", "0-2"], "--workers"),
    (["--workers", "x"], "--workers"),
    (["--workers", "5-1"], "--workers"),
    (["--workers", "1000"], "--workers"),
    (["--workers", ""], "--workers"),
    (["--repeats", "0"], "--repeats"),
    (["--repeats", "nan"], "--repeats"),
    (["--algorithm", "bogus"], "--algorithm"),
    (["--algorithm", ""], "--algorithm"),
    (["--model", "resnet"], "--model"),
    (["--dataset", "imagenet"], "--dataset"),
    (["--epochs", "0"], "--epochs"),
    (["--batch-size", "0"], "--batch-size"),
    (["--train-size", "0"], "--train-size"),
    (["--test-size", "-1"], "--test-size"),
    (["--timeout", "nan"], "--timeout"),
    (["--timeout", "inf"], "--timeout"),
    (["--timeout", "0"], "--timeout"),
    (["--ranks-per-host", "0"], "--ranks-per-host"),
    (["--train-size", "100000000", "--workers", "1-4"], "--train-size"),
    (["--", "--lr", "nan"], "--lr"),
    (["--", "--momentum", "2"], "--momentum"),
    (["--", "--bogus"], "--bogus"),
    (["--", "--run-id", "x"], "--run-id"),
    (["--", "--epochs", "3"], "--epochs"),
    (["--", "--out=elsewhere"], "--out"),
    (["--bogus"], "--bogus"),
]


@pytest.mark.parametrize("argv,named", BAD, ids=[" ".join(a)[:50] for a, _ in BAD])
def test_bad_flags(argv, named, tmp_path, capsys):
    flags, extra = (argv[:argv.index("--")], argv[argv.index("--"):]) if "--" in argv \
        else (argv, [])
    refused(sweep.main, SMALL + flags + ["--out", tmp_path / "o"] + extra, named, capsys)
    assert not (tmp_path / "o").exists()


def test_out_that_is_a_file(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    refused(sweep.main, SMALL + ["--out", tmp_path / "f"], "--out", capsys)
    refused(sweep.main, SMALL + ["--out", tmp_path / "f" / "o"], "--out", capsys)
    assert (tmp_path / "f").read_text() == "x"


def test_cluster_without_one_up(tmp_path, capsys, monkeypatch):
    from real.cluster import state
    monkeypatch.setattr(state, "STATE_DIR", tmp_path)     # no cluster's state file here
    refused(sweep.main, SMALL + ["--cluster", "--algorithm", "allreduce", "--out", tmp_path / "o"],
            "no emulated cluster", capsys)


def test_dry_run_prints_the_points_and_runs_nothing(tmp_path, capsys):
    code = sweep.main(SMALL + ["--algorithm", "serial,psgd", "--workers", "1,2", "--dry-run",
                               "--out", str(tmp_path / "o"), "--", "--lr", "0.1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = out.strip().splitlines()
    assert len(lines) == 3 and all("--lr 0.1" in ln for ln in lines)
    assert "mpirun" in lines[-1] and "-n 2" in lines[-1]
    assert not (tmp_path / "o").exists()


def test_as_a_user_types_it(tmp_path):
    refused_cli("real.sweep", SMALL + ["--model", "resnet", "--out", tmp_path / "o"], "resnet")


def _completed(runs, run_id="serial-P1-r0"):
    rec = record.RunRecord(run_id=run_id, config={"algorithm": "serial", "repeat": 0},
                           environment={"workers": 1, "cores": 2, "threads_per_rank": 1},
                           timings={"train_wall_s": 1.0, "epoch_s": [1.0]},
                           results={"final_loss": 0.1, "test_accuracy": 0.9},
                           comm={"bytes_sent_per_rank": [0]}, resources={},
                           iterations=[{"rank": 0, "epoch": 0, "iteration": i, "batch_size": 8,
                                        "compute_s": 0.01, "comm_s": 0.0, "wait_s": 0.0,
                                        "bytes_sent": 0, "loss": 0.5} for i in range(4)])
    return record.write(rec, runs)


@pytest.mark.parametrize("damage,named", [
    (lambda p: p.write_bytes(b"\x00\xff\xfe garbage"), "iterations.csv"),
    (lambda p: p.write_text(p.read_text()[:-12]), "line 5"),
    (lambda p: p.write_text(p.read_text().replace("0.01", "inf", 1)), "compute_s"),
    (lambda p: p.write_text(p.read_text().replace(",8,", ",eight,", 1)), "batch_size"),
    (lambda p: p.write_text("rank,epoch\n0,0\n"), "lacks column"),
])
def test_damaged_iterations_are_named_not_half_loaded(damage, named, tmp_path):
    good = _completed(tmp_path, "serial-P1-r1")
    bad = _completed(tmp_path, "serial-P1-r0")
    damage(bad / "iterations.csv")
    said = []
    df = results.collect(tmp_path, warn=lambda d, why: said.append((d, why)))
    assert list(df["run_id"]) == [good.name]
    assert len(said) == 1 and said[0][0] == bad and named in said[0][1]
    assert not sweep.is_completed(bad) and sweep.is_completed(good)
