"""``simulator.predict`` answers the user's question: P workers on hosts like the profile's,
said in plain words, one speedup baseline, and no flag that a file also sets goes unsaid.

Each case runs the command as a user does (``predict.main``) on a few iterations and reads
its table, its header and ``predictions.json``.
"""
from __future__ import annotations

import json
import re
import sys

import pytest

from simulator import predict
from contracts.profile import NetworkLink, load_default, save
from tests.refusal import refused

pytestmark = pytest.mark.timeout(120)

FAST = ["--iterations", "4", "--no-plot", "--jobs", "1"]


def predicted(tmp_path, capsys, *argv) -> tuple[str, dict]:
    code = predict.main([*argv, *FAST, "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out, json.loads((tmp_path / "predictions.json").read_text())


def hosts_of(doc, scheme) -> dict[int, int]:
    return {r["workers"]: r["hosts"] for r in doc["predictions"] if r["scheme"] == scheme}


def test_by_default_hosts_like_the_profiles_grow_with_p(tmp_path, capsys):
    cores = load_default().cores
    out, doc = predicted(tmp_path, capsys, "--workers", "1,2,3,16", "--schemes", "psgd,ps_sync")
    assert hosts_of(doc, "psgd") == {1: 1, 2: 1, 3: 2, 16: -(-16 // cores)}
    assert hosts_of(doc, "ps_sync") == {1: 1, 2: 2, 3: 2, 16: -(-17 // cores)}  # + the server
    head = out.splitlines()[:4]
    assert head[1].startswith("Machine: hosts like the profile's (profile embedded: ")
    assert f"{cores} ranks per host, hosts grow with P: 1 host at P = 1 to 8 at P = 16" in head[1]
    assert head[2].startswith("Network: assumed, not measured (the link of preset cpu-25gbe)")
    assert "25 us one-way" in head[2]
    assert head[3].startswith("Speedup: against the fastest single worker, ")


def test_one_host_is_the_profiles_machine_as_before(tmp_path, capsys):
    out, doc = predicted(tmp_path, capsys, "--workers", "4", "--hosts", "1", "--schemes",
                         "psgd,hogwild")
    assert set(hosts_of(doc, "psgd").values()) == {1} and hosts_of(doc, "hogwild")
    assert "Machine: the one host the profile was measured on" in out
    assert "at P = 4 its 2 cores run 4 ranks" in out and "Network: none" in out
    refused(predict.main, ["--hosts", "1", "--bandwidth", "1gbit", *FAST, "--out", tmp_path],
            "--bandwidth", capsys)


def test_a_measured_network_in_the_profile_links_the_hosts(tmp_path, capsys):
    prof = load_default()
    from dataclasses import replace
    save(replace(prof, network=NetworkLink(1.25e8, 50e-6, "calibrate.link, pair.toml")),
         tmp_path / "p.json")
    out, doc = predicted(tmp_path, capsys, "--profile", str(tmp_path / "p.json"), "--workers",
                         "4", "--schemes", "psgd")
    assert "Network: measured (calibrate.link, pair.toml): 1 Gbit/s" in out
    assert doc["meta"]["cluster"]["link"]["latency_s"] == 50e-6
    out, doc = predicted(tmp_path, capsys, "--workers", "4", "--schemes", "psgd",
                         "--latency", "1ms")
    assert "Network: yours (--latency), the rest assumed" in out
    assert doc["meta"]["cluster"]["link"]["latency_s"] == 1e-3


def test_one_baseline_for_every_speedup(tmp_path, capsys):
    out, doc = predicted(tmp_path, capsys, "--workers", "1,4,8", "--schemes",
                         "serial,psgd,mpi_allreduce")
    rows = doc["predictions"]
    base = min(r["epoch_s"] for r in rows if r["workers"] == 1)
    for r in rows:
        assert r["speedup"] == pytest.approx(base / r["epoch_s"])
        assert r["efficiency"] == pytest.approx(r["speedup"] / r["workers"])
    out, doc = predicted(tmp_path, capsys, "--workers", "8,16", "--schemes", "psgd,ddp",
                         "--baseline", "4")
    rows = doc["predictions"]
    assert {r["workers"] for r in rows} == {4, 8, 16}          # the baseline is shown too
    best4 = min(r["epoch_s"] for r in rows if r["workers"] == 4)
    for r in rows:
        assert r["speedup"] == pytest.approx(best4 / r["epoch_s"])
        assert r["efficiency"] == pytest.approx(r["speedup"] * 4 / r["workers"])
    assert "Speedup: against the fastest at P = 4 (--baseline)" in out
    assert "efficiency = speedup x 4 / P" in out


def test_the_summary_names_a_p_the_table_shows(tmp_path, capsys):
    out, doc = predicted(tmp_path, capsys, "--workers", "1-40", "--schemes", "psgd")
    fastest = min(doc["predictions"], key=lambda r: r["epoch_s"])["workers"]
    head = next(line for line in out.splitlines() if line.startswith("scheme"))
    shown = [int(c.removeprefix("P=")) for c in head.split()[1:]]
    assert fastest in shown and len(shown) <= 9
    assert re.search(rf"^fastest: psgd at P = {fastest}, ", out, re.M)


def test_the_epoch_and_the_whole_run_are_said(tmp_path, capsys):
    code = predict.main(["--workers", "2", "--schemes", "psgd", "--epochs", "3",
                         "--dataset-size", "6400", "--no-plot", "--jobs", "1",
                         "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    assert "an epoch is 6,400 samples, the run 3 epochs" in out
    assert "time for 3 epochs by workers P" in out
    assert re.search(r"per epoch, [0-9.]+ (ms|s) for 3 epochs", out)


WORKLOAD = ('[model]\nname = "m"\ntensor_params = [3000000, 1000000]\n[measured]\n'
            'device = "cpu"\nbatch_size = 32\nstep = "30ms"\n')
CLUSTER = ('[cluster]\nhosts = 4\ncores_per_host = 8\n'
           '[link]\nbandwidth = "10gbit"\nlatency = "20us"\n')


@pytest.fixture
def files(tmp_path):
    (tmp_path / "w.toml").write_text(WORKLOAD)
    (tmp_path / "c.toml").write_text(CLUSTER)
    return tmp_path


def test_a_workload_files_batch_is_the_default_and_a_flag_over_it_is_said(files, capsys):
    w = str(files / "w.toml")
    out, doc = predicted(files, capsys, "--workload", w, "--workers", "2", "--schemes", "psgd")
    assert doc["meta"]["workload"]["batch_per_worker"] == 32 and "Flags over files" not in out
    out, doc = predicted(files, capsys, "--workload", w, "--workers", "2", "--schemes", "psgd",
                         "--batch-size", "64")
    assert doc["meta"]["workload"]["batch_per_worker"] == 64
    assert f"Flags over files: --batch-size 64 (workload file {w}: 32" in out
    refused(predict.main, ["--workload", w, "--model", "cnn", *FAST, "--out", files],
            "--model cnn and --workload", capsys)


@pytest.mark.parametrize("flags,said,check", [
    (["--hosts", "2"], "--hosts 2 (cluster file C: 4)", lambda m: m["cluster"]["hosts"] == 2),
    (["--ranks-per-host", "2"], "--ranks-per-host 2: hosts grow with P (cluster file C: hosts "
     "= 4)", lambda m: m["cluster"]["hosts"] == 4 and m["hosts"]["grows"]),
    (["--ranks-per-host", "2", "+ranks_per_host = 4"], "--ranks-per-host 2: hosts grow with P "
     "(cluster file C: hosts = 4, ranks_per_host = 4)",
     lambda m: m["hosts"]["ranks_per_host"] == 2 and m["hosts"]["grows"]),
    (["--bandwidth", "1gbit"], "--bandwidth 1 Gbit/s (cluster file C: 10 Gbit/s)",
     lambda m: m["cluster"]["link"]["bandwidth_bytes_per_s"] == 1.25e8),
    (["--latency", "1ms"], "--latency 1 ms (cluster file C: 20 us)",
     lambda m: m["cluster"]["link"]["latency_s"] == 1e-3),
    (["--cores-per-host", "2"], "--cores-per-host 2 (cluster file C: 8)",
     lambda m: m["cluster"]["cores_per_host"] == 2),
    (["--placement", "packed"], "--placement packed (cluster file C: round_robin)",
     lambda m: m["cluster"]["placement"] == "packed"),
])
def test_a_flag_over_a_cluster_files_value_wins_and_is_said(files, capsys, flags, said, check):
    c = str(files / "c.toml")
    flags = list(flags)
    if flags[-1].startswith("+"):           # a line the file has too
        (files / "c.toml").write_text(CLUSTER.replace("[link]", flags.pop()[1:] + "\n[link]"))
    out, doc = predicted(files, capsys, "--cluster", c, "--workers", "8", "--schemes",
                         "mpi_allreduce", *flags)
    assert "Flags over files: " + said.replace("C", c) in out
    assert check(doc["meta"])


def test_a_cluster_files_own_values_are_the_default(files, capsys):
    out, doc = predicted(files, capsys, "--cluster", str(files / "c.toml"), "--workers", "8",
                         "--schemes", "mpi_allreduce")
    m = doc["meta"]
    assert m["cluster"]["hosts"] == 4 and not m["hosts"]["grows"] and not m["overrides"]
    assert m["cluster"]["link"]["bandwidth_bytes_per_s"] == 1.25e9
    assert "Machine: hosts of cluster file" in out and ": 4 hosts, whatever P" in out
    assert f"Network: cluster file {files / 'c.toml'}: 10 Gbit/s" in out


def test_a_cluster_file_without_hosts_grows_with_p(files, capsys):
    (files / "g.toml").write_text(CLUSTER.replace("hosts = 4\n", ""))
    out, doc = predicted(files, capsys, "--cluster", str(files / "g.toml"), "--workers",
                         "1,8,9,32", "--schemes", "mpi_allreduce")
    assert hosts_of(doc, "mpi_allreduce") == {1: 1, 8: 1, 9: 2, 32: 4}
    (files / "n.toml").write_text("[cluster]\ncores_per_host = 8\n")
    refused(predict.main, ["--cluster", files / "n.toml", *FAST, "--out", files], "no [link]",
            capsys)
    out, doc = predicted(files, capsys, "--cluster", str(files / "n.toml"), "--hosts", "1",
                         "--workers", "4", "--schemes", "psgd")
    assert doc["meta"]["cluster"]["hosts"] == 1


def test_time_to_accuracy_says_its_training_runs_first_and_dry_run_lists_them(tmp_path, capsys,
                                                                            monkeypatch):
    """``simulator.predict --target-accuracy`` (the old path) hands its command line to
    ``pipelines.predict``, which says first what it will train, and names itself as the
    user typed it in its error lines."""
    monkeypatch.delitem(sys.modules, "pipelines.predict", raising=False)   # a fresh program
    code = predict.main(["--workers", "2", "--schemes", "serial,psgd,allreduce", "--epochs",
                         "3", "--target-accuracy", "0.8", "--dry-run", "--no-plot", "--jobs",
                         "1", "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    # serial's training serves allreduce at P = 1 (the same updates); psgd trains its own
    assert re.search(r"time to 0.8: 4 training runs of the real model \(1 more points retime "
                     r"one of them\), each about a single worker's run and the start of torch \([0-9.]+ s\): "
                     r"about ", err)
    listed = re.findall(r"^\s+\d+\. (\w+) at P = (\d)", out, re.M)
    assert listed == [("serial", "1"), ("psgd", "1"), ("psgd", "2"), ("allreduce", "2")]
    assert not (tmp_path / "accuracy").exists()                  # nothing trained
    assert (tmp_path / "predictions.json").is_file()
    refused(predict.main, ["--dry-run", *FAST, "--out", tmp_path], "--dry-run", capsys)
    line = refused(predict.main, ["--target-accuracy", "0.8", "--dry-run", "--workers", "2",
                                  "--stragglers", "9", *FAST, "--out", tmp_path],
                   "--stragglers", capsys)                       # the pipeline's refusal,
    assert line.startswith("python -m simulator.predict: error: ")   # named as typed


def test_a_prediction_resolves_once_and_the_engine_predicts_its_points(tmp_path, capsys,
                                                                        monkeypatch):
    """``question.resolve`` reads the cluster once and decides every point before any
    engine runs: serial at P = 1 alone, hogwild only where its ranks fit on one host, the
    parameter server one more rank; each point's cluster is laid out once, there
    (``placement.layout``), and the engine lays out none again; the rows are those points,
    in order, on their hosts."""
    from simulator import describe, question
    calls = []
    monkeypatch.setattr(describe, "resolve_cluster",
                        lambda *a, _f=describe.resolve_cluster: calls.append(1) or _f(*a))
    argv = ["--workers", "1,2,8", "--schemes", "serial,hogwild,ps_sync", "--baseline", "2"]
    q = question.resolve(predict.build_parser().parse_args([*argv, *FAST]))
    cores = load_default().cores
    hosts = lambda ranks: -(-ranks // cores)                      # noqa: E731
    assert [(pt.scheme.name, pt.workers, pt.cluster.hosts) for pt in q.sweep.points] == (
        [("serial", 1, 1)] + [("hogwild", p, 1) for p in (1, 2, 8) if hosts(p) == 1]
        + [("ps_sync", p, hosts(p + 1)) for p in (1, 2, 8)])
    calls.clear()
    from simulator.engine import run, sweep
    laid = []
    monkeypatch.setattr(sweep, "layout", lambda *a, _f=sweep.layout: laid.append(a[2]) or _f(*a))
    monkeypatch.setattr(run, "layout", lambda *a: pytest.fail("the engine laid out a point"))
    _, doc = predicted(tmp_path, capsys, *argv)
    assert calls == [1]
    assert laid == [pt.workers for pt in q.sweep.points]
    assert [(r["scheme"], r["workers"], r["hosts"]) for r in doc["predictions"]] == [
        (pt.scheme.name, pt.workers, pt.cluster.hosts) for pt in q.sweep.points]


def test_a_replay_resolves_its_points_as_a_prediction_does():
    """``pipelines.replay`` resolves through ``question`` as ``predict`` does: the same
    profile on the hardware, the same workload, predict's scheme configurations (its
    defaults where the replay has no flag), and predict's points at the P it asks
    (hogwild left out where its ranks take two hosts; the replay used to fail there, after
    training the points before it)."""
    from pipelines import replay
    from simulator import question
    flags = ["--workers", "2,3", "--schemes", "serial,hogwild,ps_sync", "--batch-size", "32"]
    job = replay.resolve(replay.build_parser().parse_args(flags))
    q = question.resolve(predict.build_parser().parse_args(flags))
    assert job.points == tuple(pt for pt in q.sweep.points if pt.workers in (2, 3))
    fits = [p for p in (2, 3) if -(-p // load_default().cores) == 1]
    assert [(pt.scheme.name, pt.workers) for pt in job.points] == (
        [("hogwild", p) for p in fits] + [("ps_sync", 2), ("ps_sync", 3)])
    assert (job.workload, job.profile) == (q.sweep.workload, q.sweep.profile)


def test_a_replay_refuses_the_sweep_predict_refuses(tmp_path, capsys):
    """The seeds multiply a replay's simulations: what one seed would finish, three may not."""
    from pipelines import replay
    flags = ["--workers", "64-64", "--schemes", "ps_async", "--epochs", "40000"]
    assert replay.resolve(replay.build_parser().parse_args(flags)).points
    refused(replay.main, [*flags, "--seeds", "1-3", "--out", tmp_path], "ask for fewer", capsys)
    assert not (tmp_path / "schedules").exists()
