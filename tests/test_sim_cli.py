"""``python -m simulator.predict`` and ``simulator.bench``: outputs and bad input."""
from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from simulator import predict
from contracts.profile import save
from simulator.testing import make_profile

ROOT = Path(__file__).resolve().parents[1]


def run(argv, capsys):
    try:
        code = predict.main(argv)
    except SystemExit as e:                 # argparse's own errors
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def test_default_sweep_prints_every_scheme_and_writes_a_plot(tmp_path, capsys):
    code, out, err = run(["--workers", "4", "--out", str(tmp_path)], capsys)
    assert code == 0, err
    assert out.startswith("Predicted by the simulator: model cnn") and "profile embedded" in out
    for scheme in ("serial", "psgd", "hogwild", "ddp", "mpi_allreduce", "ps_async"):
        assert scheme in out
    assert (tmp_path / "speedup.png").stat().st_size > 1000
    rows = list(csv.DictReader(io.StringIO((tmp_path / "predictions.csv").read_text())))
    assert {r["workers"] for r in rows if r["scheme"] == "psgd"} == {"1", "2", "3", "4"}
    assert all(float(r["speedup"]) > 0 for r in rows)


def test_csv_json_trace_and_a_cluster_file(tmp_path, capsys):
    cluster = tmp_path / "c.toml"
    cluster.write_text('[cluster]\nhosts = 4\ncores_per_host = 2\n'
                       '[link]\nbandwidth = "1gbit"\nlatency = "50us"\n')
    trace = tmp_path / "t.json"
    code, out, err = run(["--workers", "3", "--schemes", "ps_async,mpi_allreduce", "--cluster",
                          str(cluster), "--format", "json", "--no-plot", "--out", str(tmp_path),
                          "--trace", str(trace), "--fidelity", "message", "--iterations", "5"],
                         capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["meta"]["cluster"]["hosts"] == 4
    async_rows = [r for r in doc["predictions"] if r["scheme"] == "ps_async"]
    assert async_rows[-1]["staleness"] and async_rows[-1]["mean_staleness"] > 0
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("ph") == "X" and e["cat"] == "compute" for e in events)


BAD = [
    (["--workers", "0"], "--workers"),
    (["--workers", "8-2"], "8-2"),
    (["--workers", "2^5..1"], "2^5..1"),
    (["--workers", "1,,4"], "1,,4"),
    (["--workers", "100000"], "100000"),
    (["--ranks-per-host", "0"], "ranks-per-host"),
    (["--schemes", "nope"], "nope"),
    (["--model", "resnet"], "resnet"),
    (["--schemes", "hogwild", "--hosts", "2"], "hogwild"),
    (["--bandwidth", "fast", "--hosts", "2"], "fast"),
    (["--latency=-5us", "--hosts", "2"], "-5us"),
    (["--workers", "many"], "many"),
    (["--hosts", "0"], "hosts"),
    (["--batch-size", "-1"], "--batch-size"),
    (["--profile", "/nonexistent/profile.json"], "/nonexistent/profile.json"),
]


@pytest.mark.parametrize("argv,named", BAD)
def test_bad_input_is_one_line_and_exit_code_2(argv, named, tmp_path, capsys):
    code, out, err = run(argv + ["--workers" if "--workers" not in argv else "--seed", "2",
                                 "--no-plot", "--out", str(tmp_path)], capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and named in err
    assert "Traceback" not in err


@pytest.mark.parametrize("body,named", [
    ("[cluster]\nhosts = 2\n[link]\nbandwidth = '1gbit'\nlatency = '1us'\n", "cores_per_host"),
    ("[cluster]\nhosts = 2\ncores_per_host = -4\n[link]\nbandwidth = '1gbit'\nlatency = '1us'\n",
     "cores_per_host"),
    ("[cluster]\nhosts = 2\ncores_per_host = 4\n[link]\nlatency = '1us'\n", "bandwidth"),
    ("[cluster]\nhosts = 2\ncores_per_host = 4\n[link]\nbandwidth = '-1gbit'\nlatency = '1us'\n",
     "-1gbit"),
    ("[cluster]\nhosts = 2\ncores_per_host = 4\n", "link"),
    ("not toml at all [", "cannot be read"),
])
def test_bad_cluster_files_are_named(body, named, tmp_path, capsys):
    path = tmp_path / "cluster.toml"
    path.write_text(body)
    code, _, err = run(["--workers", "2", "--cluster", str(path), "--no-plot",
                        "--out", str(tmp_path)], capsys)
    assert code == 2 and named in err and len(err.strip().splitlines()) == 1


def test_a_profile_file_from_code_is_used(tmp_path, capsys):
    save(make_profile(), tmp_path / "p.json")
    code, out, err = run(["--workers", "2", "--profile", str(tmp_path / "p.json"), "--model",
                          "toy", "--schemes", "psgd", "--no-plot", "--format", "csv",
                          "--out", str(tmp_path)], capsys)
    assert code == 0, err
    assert out.startswith("scheme,workers,hosts,epoch_s")


def test_command_line_as_a_user_runs_it(tmp_path):
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    ok = subprocess.run([sys.executable, "-m", "simulator.predict", "--workers", "2",
                         "--no-plot", "--out", str(tmp_path)], cwd=tmp_path, env=env,
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run([sys.executable, "-m", "simulator.predict", "--workers", "-3"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "-3" in bad.stderr


@pytest.mark.parametrize("text,counts", [
    ("4", [1, 2, 3, 4]), ("1,8,64,512", [1, 8, 64, 512]), ("3-5", [3, 4, 5]),
    ("2^0..4", [1, 2, 4, 8, 16]), ("1,4-5,2^3..4", [1, 4, 5, 8, 16]), ("3^1..2", [3, 9]),
])
def test_worker_lists_as_users_write_them(text, counts):
    from cli import worker_counts
    assert worker_counts(text) == counts


def test_the_table_shows_exactly_the_points_asked_and_marks_the_fastest(tmp_path, capsys):
    code, out, err = run(["--workers", "1,3,4", "--schemes", "psgd,allreduce", "--no-plot",
                          "--out", str(tmp_path)], capsys)
    assert code == 0, err
    head = next(line for line in out.splitlines() if line.startswith("scheme"))
    assert head.split()[1:] == ["P=1", "3", "4"]
    allreduce = next(line for line in out.splitlines() if line.startswith("allreduce"))
    psgd = next(line for line in out.splitlines() if line.startswith("psgd"))
    assert psgd.count("*") == 2 and "*" not in allreduce      # (P = 1: all tie, none marked)
    assert "fastest: psgd" in out
    rows = list(csv.DictReader(io.StringIO((tmp_path / "predictions.csv").read_text())))
    assert sorted({int(r["workers"]) for r in rows}) == [1, 3, 4]


def test_full_table_explains_its_columns(tmp_path, capsys):
    code, out, _ = run(["--workers", "2", "--schemes", "ps_async", "--full", "--no-plot",
                        "--out", str(tmp_path)], capsys)
    head = next(line for line in out.splitlines() if line.startswith("scheme"))
    assert code == 0 and head.split()[:6] == ["scheme", "P", "hosts", "epoch", "run", "speedup"]
    assert "compute" in head and "stale" in head and " ms " in out
    assert "eng " in predict.build_parser().format_help().replace("\n", " ")


def test_hosts_grow_with_p_when_ranks_per_host_is_given(tmp_path, capsys):
    code, out, err = run(["--workers", "1,4,8,9", "--ranks-per-host", "4", "--cores-per-host", "4",
                          "--schemes", "mpi_allreduce,ps_sync", "--no-plot", "--format", "csv",
                          "--out", str(tmp_path)], capsys)
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    hosts = {(r["scheme"], int(r["workers"])): int(r["hosts"]) for r in rows}
    assert [hosts["mpi_allreduce", p] for p in (1, 4, 8, 9)] == [1, 1, 2, 3]
    assert [hosts["ps_sync", p] for p in (1, 4, 8, 9)] == [1, 2, 3, 3]   # + the server rank


def test_help_shows_each_default_once_and_no_raw_lists():
    text = " ".join(predict.build_parser().format_help().split())   # (lines wrap)
    assert "(default: None)" not in text and "['all']" not in text
    assert text.count("(default: 16)") == 1


@pytest.mark.parametrize("module", ["real.launch.sweep", "pipelines.replay", "pipelines.validate",
                                    "pipelines.validate_accuracy", "pipelines.validate_cluster"])
def test_every_command_reads_worker_counts_alike(module):
    """One syntax for --workers: a lone N is P = 1..N, 'N-N' is P = N alone, powers too."""
    import importlib
    parser = importlib.import_module(module).build_parser()
    assert parser.parse_args(["--workers", "3"]).workers == [1, 2, 3]
    assert parser.parse_args(["--workers", "3-3"]).workers == [3]
    assert parser.parse_args(["--workers", "2^0..2"]).workers == [1, 2, 4]


def test_seeds_are_numbers_not_worker_counts():
    from cli import number_list, worker_counts, workers_flag
    assert number_list("3") == [3] and number_list("1-3") == [1, 2, 3]
    for counts in ([8], [2, 3, 4], [1, 8, 64]):
        assert worker_counts(workers_flag(counts)) == counts
