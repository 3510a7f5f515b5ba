"""Time to accuracy end to end: real runs record curves, sweeps report time to a target,
pipelines.replay and pipelines.predict predict it, the validation compares both."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from contracts import record
from pipelines.validate_accuracy import compare, format_table
from real.launch import sweep
from tests.conftest import mpi, py
from tests.refusal import refused

TINY = ["--dataset", "synthetic", "--model", "linear", "--train-size", "480",
        "--test-size", "160", "--batch-size", "32", "--timeout", "60"]


@pytest.mark.slow
def test_sweep_reports_time_to_target_or_not_reached(tmp_path, capsys):
    out = tmp_path / "sw"
    r = py("real.sweep", "--algorithm", "psgd", "--workers", "2-2", *TINY[:-2],
           "--target-accuracy", "0.999", "--max-epochs", "1", "--eval-every", "4",
           "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "not reached in 1 epoch" in r.stdout
    df = pd.read_csv(out / "time_to_target.csv")
    assert len(df) == 1 and df["time_to_target_s"].isna().all()
    curve = record.read(out / "psgd-P2-r0")["results"]["curve"]
    assert [p["step"] for p in curve[1:-1]] == [2, 4, 6, 8]      # --eval-every 4 at P = 1: 2
    assert (out / "accuracy-time.png").is_file()
    refused(sweep.main, ["--algorithm", "serial", "--max-epochs", "2", "--out", out],
            "--target-accuracy", capsys)


@pytest.mark.slow
def test_replay_predicts_time_to_target(tmp_path):
    args = ["pipelines.replay", "--schemes", "serial,allreduce,ps_async", "--workers", "1,2",
            "--model", "linear", "--dataset", "synthetic", "--train-size", "480",
            "--test-size", "160", "--batch-size", "32", "--eval-every", "4",
            "--out", str(tmp_path)]
    r = py(*args, "--target-accuracy", "0.5")
    assert r.returncode == 0, r.stderr[-2000:]
    lines = {tuple(ln.split()[:2]): ln for ln in r.stdout.splitlines()[2:]}
    assert set(lines) == {("serial", "1"), ("allreduce", "1"), ("allreduce", "2"),
                          ("ps_async", "1"), ("ps_async", "2")}
    assert all(ln.endswith(" s") for ln in lines.values())
    summary = pd.read_csv(tmp_path / "summary.csv")
    assert summary["time_to_target_s"].notna().all()
    curves = json.loads((tmp_path / "curves.json").read_text())
    # serial and allreduce at P = 1 train alike: one replay, two timings
    by = {(c["scheme"], c["workers"]): c["points"] for c in curves}
    assert [p["test_accuracy"] for p in by[("serial", 1)]] == \
        [p["test_accuracy"] for p in by[("allreduce", 1)]]
    r = py(*args, "--target-accuracy", "1.0")
    assert r.returncode == 0 and "not reached in 1 epoch" in r.stdout
    assert "Traceback" not in r.stderr


def test_replay_bad_target_is_one_line(tmp_path):
    r = py("pipelines.replay", "--target-accuracy", "1.5", "--out", str(tmp_path))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "accuracy in (0, 1]" in r.stderr


@pytest.mark.parametrize("main_of", ["pipelines.replay", "real.replay"])
@pytest.mark.parametrize("flag, value", [("--momentum", "-1"), ("--momentum", "nan"),
                                         ("--lr-decay", "1"), ("--lr", "inf")])
def test_replays_refuse_the_sgd_settings_real_train_refuses(tmp_path, capsys, main_of, flag,
                                                            value):
    import importlib

    from tests.refusal import refused
    main = importlib.import_module(main_of).main
    extra = ["--schedule", str(tmp_path / "s.jsonl")] if main_of == "real.replay" else []
    refused(main, [*extra, flag, value, "--out", tmp_path / "o"], flag, capsys)


@pytest.mark.slow
def test_predict_prints_time_to_accuracy_next_to_time_per_epoch(tmp_path):
    r = py("pipelines.predict", "--schemes", "psgd", "--workers", "2", "--model", "linear",
           "--dataset-size", "480", "--batch-size", "32", "--no-plot",
           "--target-accuracy", "0.999", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    tail = r.stdout.split("time to 0.999")[-1].splitlines()
    rows = [ln.split() for ln in tail if ln.startswith("psgd")]
    assert [row[1] for row in rows] == ["1", "2"]
    assert all(" ".join(row).endswith("not reached in 1 epoch") for row in rows)


def _row(scheme, p, seed, accs, times):
    return {"scheme": scheme, "workers": p, "seed": seed,
            "points": [{"step": i, "epoch": i, "train_s": t, "test_loss": 0.0,
                        "test_accuracy": a} for i, (t, a) in enumerate(zip(times, accs))]}


def test_validation_compares_final_accuracy_and_time_to_target():
    measured = [_row("psgd", 2, s, [0.1, 0.7, 0.9], [0, 10, 20]) for s in (1, 2)]
    measured += [_row("hogwild", 2, 1, [0.1, 0.75], [0, 10])]
    predicted = [_row("psgd", 2, s, [0.1, 0.7, 0.895], [0, 11, 22]) for s in (1, 2)]
    predicted += [_row("hogwild", 2, 1, [0.1, 0.805], [0, 12])]
    rows = {(r["scheme"], r["workers"]): r for r in compare(measured, predicted, 0.8)}
    psgd = rows[("psgd", 2)]
    assert psgd["final_accuracy_error_points"] == pytest.approx(-0.5)
    assert psgd["time_to_target_measured_s"] == pytest.approx(15.0)
    # predicted: 11 s + 11 s * (0.8 - 0.7) / (0.895 - 0.7), against 15 s measured
    assert psgd["time_to_target_error"] == pytest.approx((11 + 11 * 0.1 / 0.195 - 15) / 15)
    hog = rows[("hogwild", 2)]
    assert hog["time_to_target_measured_s"] is None and hog["time_to_target_error"] is None
    assert hog["time_to_target_predicted_s"] == pytest.approx(12 * 0.7 / 0.705)
    text = format_table(list(rows.values()), 0.8, 3)
    assert "not reached in 3 epochs" in text and "within 1 point: 1 of 2" in text
    assert "within 10%: 0 of 1" in text


@pytest.mark.slow
@pytest.mark.parametrize("alg", ["mpi_allreduce", "psgd"])
def test_replay_reproduces_a_real_run_with_dropout(tmp_path, alg):
    """The seed-000 network has dropout: each real worker draws its own masks, and so does
    the replay, so their test losses agree along the whole curve."""
    import argparse

    from real.training.data import load_dataset
    from real.training.replay import replay
    from contracts.workload import Workload
    from contracts.cluster import calibrated_cluster
    from contracts.profile import load_default
    from simulator.engine.schedule import simulate_schedule
    r = mpi(2, "real.train", "--algorithm", alg, "--run-id", "r", "--out", str(tmp_path),
            "--dataset", "synthetic", "--model", "cnn", "--train-size", "256", "--test-size",
            "128", "--batch-size", "32", "--epochs", "1", "--eval-every", "1", "--lr", "0.1")
    assert r.returncode == 0, r.stderr[-2000:]
    measured = record.read(tmp_path / "r")["results"]["curve"]
    wl = Workload(model="cnn", batch_per_worker=32, dataset_samples=256, epochs=1)
    _, sched = simulate_schedule(alg, 2, wl, "synthetic",
                                 calibrated_cluster(load_default().cores), train_size=256,
                                 eval_every=1)
    data = load_dataset("synthetic", train_size=256, test_size=128, seed=1)
    got = replay(sched, data, argparse.Namespace(seed=1, lr=0.1, momentum=0.0, lr_decay=0.0))
    assert [p["step"] for p in got["points"]] == [p["step"] for p in measured]
    for m, g in zip(measured, got["points"]):
        assert g["test_loss"] == pytest.approx(m["test_loss"], abs=1e-4)


@pytest.mark.slow
def test_replay_of_a_measured_push_order_reproduces_a_real_ps_async_run_with_dropout(tmp_path):
    """ps_async's order is the run's timing; its server records it, and the replay along it
    (each worker its own dropout masks, every gradient on the version it read) gives the
    run's test losses at every evaluation point."""
    import argparse

    from real.training.data import load_dataset
    from real.training.replay import replay
    from contracts.workload import Workload
    from contracts.cluster import calibrated_cluster
    from contracts.profile import load_default
    from simulator.engine.schedule import simulate_schedule
    from simulator.measured_schedule import measured as measured_schedule
    r = mpi(3, "real.train", "--algorithm", "ps_async", "--run-id", "r", "--out", str(tmp_path),
            "--dataset", "synthetic", "--model", "cnn", "--train-size", "256", "--test-size",
            "128", "--batch-size", "32", "--epochs", "1", "--eval-every", "1", "--lr", "0.1")
    assert r.returncode == 0, r.stderr[-2000:]
    rec = record.read(tmp_path / "r")
    curve = rec["results"]["curve"]
    wl = Workload(model="cnn", batch_per_worker=32, dataset_samples=256, epochs=1)
    _, like = simulate_schedule("ps_async", 2, wl, "synthetic",
                                calibrated_cluster(load_default().cores), train_size=256,
                                eval_every=1)
    sched = measured_schedule(rec, like, str(tmp_path / "r"))
    data = load_dataset("synthetic", train_size=256, test_size=128, seed=1)
    got = replay(sched, data, argparse.Namespace(seed=1, lr=0.1, momentum=0.0, lr_decay=0.0))
    assert [p["step"] for p in got["points"]] == [p["step"] for p in curve]
    for m, g in zip(curve, got["points"]):
        assert g["test_loss"] == pytest.approx(m["test_loss"], abs=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("alg,launch", [("psgd", 2), ("async_avg", 2), ("ps_sync", 3),
                                        ("ps_async", 3), ("hogwild", None)])
def test_a_run_records_its_curve_and_stops_once_its_target_is_reached(tmp_path, alg, launch):
    """Points every --eval-every iterations of the evaluating process (a server's: pushes) and
    at epoch ends, of the model a user would get; the stop travels each scheme's way: a
    broadcast at the epoch end (psgd), the holder's STOP reply (async_avg), the server's
    'done' (ps_sync, ps_async), a shared event (hogwild)."""
    argv = ["real.train", "--algorithm", alg, "--run-id", "r", "--out", str(tmp_path), *TINY,
            "--epochs", "8", "--average-every", "2", "--lr", "0.05", "--eval-every", "3",
            "--target-accuracy", "0.97"]
    r = mpi(launch, *argv) if launch else py(*argv, "--workers", "2")
    assert r.returncode == 0, r.stderr[-2000:]
    rec = record.read(tmp_path / "r")
    res = rec["results"]
    assert res["curve_model"] == {
        "psgd": "average of the workers' weights", "async_avg": "holder's mix",
        "ps_sync": "server's weights", "ps_async": "server's weights",
        "hogwild": "shared model"}[alg]
    scale = 2 if alg == "ps_async" else 1          # 8 iterations per worker and epoch
    steps = [p["step"] for p in res["curve"][1:-1]]
    expected = [s * scale for s in range(1, 65) if s % 3 == 0 or s % 8 == 0]
    assert steps == expected[:len(steps)], steps
    times = [p["train_s"] for p in res["curve"]]
    assert times[0] == 0.0 and times == sorted(times)
    assert res["curve"][-1]["test_accuracy"] == res["test_accuracy"]

    assert res["target_reached"] and res["time_to_target_s"] > 0
    assert res["epochs_trained"] < 8
    # hogwild's other process runs on while process 0 scores, and stops at its next step
    trained = len(rec["timings"]["epoch_s"])
    assert trained == res["epochs_trained"] if alg != "hogwild" else trained >= 1
    # it stopped at the first epoch end >= 0.97
    epoch_ends = [p for p in res["curve"][1:-1] if p["step"] % (8 * scale) == 0]
    assert epoch_ends[-1]["test_accuracy"] >= 0.97 and epoch_ends[-1] == res["curve"][-2]
    assert all(p["test_accuracy"] < 0.97 for p in epoch_ends[:-1])


def test_validation_runs_train_all_epochs():
    """The measured runs get no target (they would stop there); the replays report it."""
    from pathlib import Path

    from pipelines.validate_accuracy import build_parser, stage_commands
    stages = dict(stage_commands(build_parser().parse_args(["--seeds", "1-2"]), Path("o")))
    assert list(stages) == ["sweep-seed-1", "sweep-seed-2", "calibrate", "replay"]
    assert "--target-accuracy" not in stages["sweep-seed-1"]
    assert stages["sweep-seed-2"][-2:] == ["--seed", "2"]
    assert "--target-accuracy" in stages["replay"] and "1,2" in stages["replay"]


def test_validation_calibrates_on_its_own_runs_unless_given_a_profile(tmp_path):
    """The replays predict with a profile fitted from this sweep's runs of at most
    --calibrate-workers processes; --profile skips the calibration and is used as given."""
    from pathlib import Path

    from pipelines.validate_accuracy import build_parser, stage_commands
    stages = dict(stage_commands(build_parser().parse_args(["--calibrate-workers", "3"]),
                                 Path("o")))
    cal = stages["calibrate"]
    assert cal[cal.index("--runs") + 1] == str(Path("o") / "runs")
    assert cal[cal.index("--max-workers") + 1] == "3"
    replay = stages["replay"]
    assert replay[replay.index("--profile") + 1] == cal[cal.index("--out") + 1]
    given = tmp_path / "p.json"
    given.write_text("{}")
    stages = dict(stage_commands(build_parser().parse_args(["--profile", str(given)]), Path("o")))
    assert "calibrate" not in stages
    assert stages["replay"][stages["replay"].index("--profile") + 1] == str(given)


def test_validation_on_the_emulated_cluster_calibrates_its_link_and_predicts_on_it():
    """--cluster-rate: the link is calibrated first (on the cluster), every sweep runs with
    --cluster at one thread, the compute profile comes from probes alone (the cluster's
    runs are not the plain machine's), and the replay predicts on OUT/link.toml."""
    from pathlib import Path

    from pipelines.validate_accuracy import build_parser, on_cluster, stage_commands
    args = build_parser().parse_args(["--cluster-rate", "200mbit", "--workers", "8-8",
                                      "--seeds", "1-2"])
    stages = dict(stage_commands(args, Path("o")))
    assert list(stages) == ["link", "sweep-seed-1", "sweep-seed-2", "calibrate", "replay"]
    assert [n for n in stages if on_cluster(n)] == ["link", "sweep-seed-1", "sweep-seed-2"]
    assert "--cluster" in stages["sweep-seed-1"] and stages["sweep-seed-1"][-2:] == ["--threads", "1"]
    cal = stages["calibrate"]
    assert "--runs" not in cal and cal[cal.index("--threads") + 1] == "1"
    replay = stages["replay"]
    link = stages["link"][stages["link"].index("--out") + 1]
    assert replay[replay.index("--cluster") + 1] == link == str(Path("o") / "link.toml")
    assert replay[replay.index("--threads") + 1] == "1"
    assert replay[replay.index("--workers") + 1] == "8-8"       # P = 8 alone, not 1..8


@pytest.mark.parametrize("argv, says", [
    (["--cluster-rate", "fast"], "--cluster-rate"),
    (["--cluster-rate", "200mbit", "--skip-sweep", "--skip-calibrate", "--skip-replay"],
     "link.toml does not exist"),
])
def test_validation_cluster_rate_bad_input(tmp_path, capsys, argv, says):
    from pipelines.validate_accuracy import main
    assert main(argv + ["--out", str(tmp_path / "v")]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_validation_compares_training_time_of_the_last_points():
    """Besides accuracy and time to target: the training time of the curves' last points,
    mean over seeds, and its relative error (a scheme that reaches no target still has one)."""
    from pipelines.validate_accuracy import compare

    def run(seed, end_s):
        return {"scheme": "psgd", "workers": 8, "seed": seed, "points": [
            {"train_s": 0.0, "test_accuracy": 0.1}, {"train_s": end_s, "test_accuracy": 0.7}]}
    (row,) = compare([run(1, 10.0), run(2, 14.0)], [run(1, 18.0)], 0.8)
    assert row["training_measured_s"] == 12.0 and row["training_predicted_s"] == 18.0
    assert row["training_error"] == 0.5 and row["time_to_target_error"] is None


def test_summary_of_held_out_points():
    """With a calibration on P <= 2, the table adds the summary of P >= 3 alone."""
    rows = [{"scheme": "psgd", "workers": p, "seeds_measured": 1, "seeds_predicted": 1,
             "final_accuracy_measured": 0.8, "final_accuracy_predicted": 0.8,
             "final_accuracy_error_points": 0.0, "time_to_target_measured_s": 10.0,
             "time_to_target_predicted_s": 10.0 * (1 + err), "time_to_target_error": err,
             "target_reached_measured": 1, "target_reached_predicted": 1}
            for p, err in ((1, 0.5), (2, 0.5), (3, 0.1), (4, -0.3))]
    text = format_table(rows, 0.8, 3, held_out_above=2)
    assert "time to 0.8: median |error| 40.0%, mean signed +20.0%" in text
    assert "held out (P > 2), time to 0.8: median |error| 20.0%, mean signed -10.0%" in text


def test_replay_takes_predicts_cluster_flags_and_units(capsys):
    """The commands of docs/accuracy.md beyond P = 5: a described cluster, rates with units."""
    from pipelines import replay
    from contracts import profile as profiles
    from simulator.describe import resolve_cluster
    args = replay.build_parser().parse_args(
        ["--ranks-per-host", "4", "--cores-per-host", "4", "--bandwidth", "10gbit",
         "--latency", "20us"])
    assert args.bandwidth == pytest.approx(10e9 / 8) and args.latency == pytest.approx(20e-6)
    grows = resolve_cluster(args, profiles.load_default(), "embedded").cluster
    assert grows.at(64).hosts == 16
    assert grows.at(64).link.bandwidth_bytes_per_s == pytest.approx(1.25e9)
    with pytest.raises(SystemExit) as e:
        replay.build_parser().parse_args(["--bandwidth", "10"])
    assert e.value.code == 2 and "unit" in capsys.readouterr().err


def test_report_commands_read_as_typed_and_skipped_stages_show_what_ran(tmp_path):
    """The report's commands say `python -m` and OUT, not this machine's paths; a stage
    skipped this time shows the command that made its results (its log's first line)."""
    import sys

    from pipelines.validate_accuracy import report_commands
    out = tmp_path / "v"
    out.mkdir()
    ran = [sys.executable, "-m", "real.sweep", "--timeout", "900", "--out", str(out / "runs")]
    (out / "sweep-seed-1.log").write_text("$ " + " ".join(ran) + "\nlog\n")
    now = [sys.executable, "-m", "real.sweep", "--timeout", "3600", "--out", str(out / "runs")]
    replay = [sys.executable, "-m", "pipelines.replay", "--out", str(out / "predicted")]
    lines = report_commands([("sweep-seed-1", now), ("replay", replay)], {"sweep-seed-1"}, out)
    assert lines[0].startswith("python -m real.sweep --timeout 900 --out OUT/runs")
    assert "not run this time" in lines[0]
    assert lines[1] == "python -m pipelines.replay --out OUT/predicted"


def test_report_commands_replace_the_folder_only_where_it_is_a_path(tmp_path, monkeypatch):
    """An OUT named like a flag's word ("out") is replaced in paths, never inside flags."""
    from pipelines.validate_accuracy import report_commands
    monkeypatch.chdir(tmp_path)
    cmd = ["python", "-m", "pipelines.replay", "--out", "out/predicted", "--eval-every", "80"]
    (line,) = report_commands([("replay", cmd)], set(), Path("out"))
    assert line == "python -m pipelines.replay --out OUT/predicted --eval-every 80"


def test_the_replay_of_the_measured_push_order_stands_beside_run_and_prediction():
    """ps_async rows carry the mean final accuracy of the replays of the runs' own push
    orders (over the seeds that recorded one), and the table sets it beside both."""
    measured = [_row("ps_async", 5, s, [0.1, acc], [0, 10]) for s, acc in ((1, 0.78), (2, 0.76))]
    predicted = [_row("ps_async", 5, s, [0.1, 0.75], [0, 9]) for s in (1, 2)]
    ordered = [_row("ps_async", 5, 1, [0.1, 0.781], [0, 10])]
    measured += [_row("psgd", 2, 1, [0.1, 0.8], [0, 10])]
    predicted += [_row("psgd", 2, 1, [0.1, 0.8], [0, 10])]
    rows = {(r["scheme"], r["workers"]): r for r in compare(measured, predicted, 0.7, ordered)}
    ps = rows[("ps_async", 5)]
    assert ps["final_accuracy_measured_order"] == pytest.approx(0.781)
    assert ps["seeds_measured_order"] == 1 and ps["seeds_measured"] == 2
    assert rows[("psgd", 2)]["final_accuracy_measured_order"] is None
    text = format_table(list(rows.values()), 0.7, 3)
    line = text.splitlines()[-1]
    assert line.split() == ["ps_async", "5", "0.7700", "0.7810", "+1.10", "0.7500", "-2.00",
                            "1/2"]
    assert "measured push order" in text.splitlines()[-3] and "psgd" not in text.splitlines()[-1]
    assert "measured push order" not in format_table([rows[("psgd", 2)]], 0.7, 3)


def test_a_replay_made_with_other_torch_threads_is_not_taken_for_one_asked_with_these():
    """The replay of a measured order runs with the run's own threads, so that it repeats
    the run's floats; one made with another count is made again, not reused."""
    from pipelines.accuracy import ReplaySettings, _same_settings
    recorded = {"seed": 2, "lr": 0.05, "momentum": 0.0, "lr_decay": 0.0, "test_size": None,
                "threads": 2}
    assert _same_settings(recorded, ReplaySettings(seed=2, threads=2))
    assert not _same_settings(recorded, ReplaySettings(seed=2, threads=1))
    assert _same_settings(recorded, ReplaySettings(seed=2))          # no count asked: any
    assert not _same_settings(recorded, ReplaySettings(seed=3, threads=2))


def test_the_report_lists_each_measured_order_with_its_staleness_beside_the_predicted():
    from pipelines.validate_accuracy import order_run_lines, staleness
    assert staleness([3, 3, 1, 5], 4) == (3.0, pytest.approx(2 ** 0.5), 0.5)
    ordered = [_row("ps_async", 4, 2, [0.1, 0.83], [0, 10])
               | {"run_accuracy": 0.8301, "staleness_run": (2.96, 0.85, 0.56),
                  "staleness_predicted": (2.98, 0.92, 0.53)}]
    predicted = [_row("ps_async", 4, 2, [0.1, 0.8359], [0, 9]),
                 _row("ps_async", 4, 1, [0.1, 0.5], [0, 9])]
    line = order_run_lines(ordered, predicted)[-1].split()
    assert line == ["4", "2", "0.8301", "0.8300", "0.8359", "2.96", "0.85", "0.56", "2.98",
                    "0.92", "0.53"]
    assert order_run_lines([], predicted) == []
