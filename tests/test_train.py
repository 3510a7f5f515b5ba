"""real.train: serial and PSGD for real (PSGD under mpirun -n 2), records, bad input."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from contracts import record
from real.launch import train
from real.records import tcpstats
from tests.conftest import mpi, py
from tests.refusal import refused

FASHION = Path("/usr/share/datasets/fashion-mnist")


def one_record(runs: Path) -> tuple[dict, "object"]:
    dirs = record.find_runs(runs)
    assert len(dirs) == 1, dirs
    return record.read(dirs[0]), record.read_iterations(dirs[0])


def test_serial_trains_and_records(tiny, tmp_path):
    r = py("real.train", "--algorithm", "serial", "--epochs", "3", "--lr", "0.1", *tiny)
    assert r.returncode == 0, r.stderr
    rec, it = one_record(tmp_path / "runs")
    assert rec["status"] == "completed" and rec["schema_version"] == record.SCHEMA_VERSION
    for key in ("startup_s", "data_load_s", "train_wall_s", "eval_s"):
        assert rec["timings"][key] >= 0
    assert len(rec["timings"]["epoch_s"]) == 3
    assert rec["environment"]["threads_per_rank"] >= 1
    assert set(it.columns) >= set(record.ITER_COLUMNS)
    assert len(it) == 3 * 16 and (it["compute_s"] > 0).all()
    first, last = it["loss"].iloc[:16].mean(), it["loss"].iloc[-16:].mean()
    assert last < first, "loss did not fall"
    assert 0 <= rec["results"]["test_accuracy"] <= 1
    assert rec["results"]["loss_curve"][0][0] == 0
    assert rec["resources"]["peak_rss_bytes_per_rank"][0] > 0
    assert "iteration     0  loss" in r.stdout


@pytest.mark.slow
@pytest.mark.skipif(not FASHION.is_dir(), reason="apt-get install dataset-fashion-mnist")
def test_psgd_mpirun_two_ranks(tmp_path):
    r = mpi(2, "real.train", "--algorithm", "psgd", "--dataset", "fashion-mnist",
            "--train-size", "1024", "--test-size", "512", "--batch-size", "32",
            "--average-every", "8", "--out", str(tmp_path / "runs"))
    assert r.returncode == 0, r.stderr
    rec, it = one_record(tmp_path / "runs")
    assert rec["status"] == "completed"
    assert rec["environment"]["ranks"] == 2 and rec["environment"]["launcher"] == "mpirun"
    assert rec["extra"]["start_weights_identical"] is True
    assert rec["extra"]["final_weights_identical"] is True
    assert sorted(it["rank"].unique()) == [0, 1]
    steps = it[it["batch_size"] > 0]
    assert steps.groupby("rank").size().tolist() == [16, 16]       # 512 samples / 32 per rank
    averaging = it[(it["iteration"] + 1) % 8 == 0]
    assert (averaging["bytes_sent"] > 0).all()
    assert (it["wait_s"] >= 0).all() and (it["comm_s"] >= 0).all()
    assert rec["comm"]["bytes_sent_per_rank"][0] == rec["comm"]["bytes_sent_per_rank"][1] > 0
    tcp = rec["comm"]["tcp"]                   # one host: its namespace's counters, once
    assert [h["ranks"] for h in tcp] == [[0, 1]] and tcp[0]["timeouts"] >= 0
    assert tcp[0]["congestion_control"] == tcpstats.congestion_control()
    assert rec["results"]["data_source"].startswith(str(FASHION))
    assert len(rec["resources"]["cpu_util_percent_per_rank"]) == 2
    starts = rec["timings"]["rank_starts_s"]           # the uneven start, the first rank's 0
    assert len(starts) == 2 and min(starts) == 0.0
    assert max(starts) < rec["timings"]["train_wall_s"]
    assert rec["timings"]["rank_starts_at"] == "start barrier's exit"


@pytest.mark.parametrize("argv, says", [
    (["--algorithm", "nope"], "valid: serial"),
    (["--model", "resnet"], "invalid choice"),
    (["--dataset", "imagenet"], "invalid choice"),
    (["--epochs", "0"], "below 1"),
    (["--batch-size", "-3"], "below 1"),
    (["--data-dir", "/does/not/exist"], "does not exist"),
])
def test_bad_input_is_one_line_exit_2(argv, says, capsys):
    """In this process (``python -m real.train``'s own line: test_bad_train's
    test_as_a_user_types_it)."""
    refused(train.main, argv, says, capsys)


def test_missing_dataset_says_where_it_looked(tmp_path):
    r = py("real.train", "--dataset", "mnist", "--data-dir", str(tmp_path),
           env={"PSGD_DATA_CACHE": str(tmp_path / "cache")})
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert str(tmp_path) in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_record_write_is_atomic_and_replaces(tmp_path):
    rec = record.RunRecord(run_id="x", config={"a": 1}, environment={})
    record.write(rec, tmp_path)
    rec.config = {"a": 2}
    record.write(rec, tmp_path)
    assert json.loads((tmp_path / "x" / "record.json").read_text())["config"] == {"a": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["x"]


def test_help_gives_every_flag_a_meaning_and_each_default_once():
    from real.launch.train import build_parser
    parser = build_parser()
    text = parser.format_help()
    assert "(default: None)" not in text and "(default: False)" not in text
    assert all(a.help for a in parser._actions), "a flag without help"
