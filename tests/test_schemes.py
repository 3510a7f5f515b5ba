"""Every distributed scheme at P = 2 on a small synthetic subset: it trains and records.

One module-scoped fixture runs each scheme once (linear model: no dropout, so
runs with the same seed are deterministic and comparable); the tests read the
records.  Rank-based schemes run under mpirun (the parameter server with one
extra rank; allreduce under torchrun, its other launcher), hogwild as ``--workers 2``.
"""
from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from real import schemes
from real.launch import train
from real.training.data import load_dataset
from real.training.replay import replay
from contracts import record
from contracts.cluster import calibrated_cluster
from contracts.profile import load_default
from contracts.workload import Workload
from simulator.engine.schedule import simulate_schedule
from simulator.measured_schedule import measured
from tests.conftest import BIN, mpi, py, run_cmd
from tests.refusal import refused

P = 2
GLOBAL_BATCH = 64
FLAGS = ["--dataset", "synthetic", "--model", "linear", "--train-size", "256",
         "--test-size", "128", "--global-batch", str(GLOBAL_BATCH), "--epochs", "3",
         "--lr", "0.5", "--average-every", "2", "--timeout", "60"]
DISTRIBUTED = [s for s in schemes.SCHEMES if s != "serial"]
SYNCHRONOUS = ("gather_scatter", "allreduce", "ddp", "mpi_allreduce", "ps_sync")
# Each scheme's one run also carries what the tests of a launcher or a flag read, rather than
# launching again for them: allreduce under torchrun, mpi_allreduce with MPICH's ring chosen.
TORCHRUN = ("allreduce",)
SCHEME_FLAGS = {"mpi_allreduce": ["--mpi-allreduce", "ring"]}


def launch(alg: str, out: Path, *extra: str, torchrun: bool = False):
    argv = ["real.train", "--algorithm", alg, "--run-id", alg, "--out", str(out), *FLAGS, *extra]
    if torchrun:
        return run_cmd([str(BIN / "torchrun"), "--nproc-per-node", str(P), "-m", *argv])
    if alg in schemes.RANK_BASED:
        return mpi(schemes.ranks_for(alg, P), *argv)
    if alg == "hogwild":
        return py(*argv, "--workers", str(P))
    return py(*argv)


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """scheme -> (record, iterations, the command's stderr) of one run each, plus serial at
    the same global batch."""
    out = tmp_path_factory.mktemp("schemes")
    done = {}
    for alg in ("serial", *DISTRIBUTED):
        r = launch(alg, out, *SCHEME_FLAGS.get(alg, []), torchrun=alg in TORCHRUN)
        assert r.returncode == 0, f"{alg}:\n{r.stderr[-3000:]}"
        done[alg] = record.read(out / alg), record.read_iterations(out / alg), r.stderr
    return done


@pytest.fixture(scope="module")
def runs(launched):
    """scheme -> (record, iterations) of its one run."""
    return {alg: (rec, it) for alg, (rec, it, _) in launched.items()}


def worker_rows(alg, it):
    first = schemes.first_worker_rank(alg)
    return it[(it["rank"] >= first) & (it["batch_size"] > 0)]


@pytest.mark.slow
@pytest.mark.parametrize("alg", DISTRIBUTED)
def test_scheme_trains_and_records(runs, alg):
    rec, it = runs[alg]
    assert rec["status"] == "completed" and rec["failure"] is None
    assert rec["environment"]["workers"] == P
    assert rec["environment"]["ranks"] == (1 if alg == "hogwild" else schemes.ranks_for(alg, P))
    steps = worker_rows(alg, it)
    assert sorted(steps["rank"].unique()) == list(range(schemes.first_worker_rank(alg),
                                                        schemes.first_worker_rank(alg) + P))
    assert (it["compute_s"] >= 0).all() and (it["comm_s"] >= 0).all() and (it["wait_s"] >= 0).all()
    # 3 epochs of 256 samples: 12 global batches of 64 (32 per worker)
    assert steps.groupby("rank").size().tolist() == [12, 12]
    loss = steps.sort_values(["iteration", "rank"])["loss"].to_numpy()
    assert loss[-6:].mean() < 0.5 * loss[:6].mean(), "loss did not fall"
    assert rec["results"]["test_accuracy"] > 0.5
    assert rec["results"]["final_loss"] is not None and rec["results"]["loss_curve"]
    if alg != "hogwild":
        assert all(b > 0 for b in rec["comm"]["bytes_sent_per_rank"]), rec["comm"]
    assert len(rec["resources"]["cpu_util_percent_per_rank"]) == rec["environment"]["ranks"]


@pytest.mark.slow
def test_synchronous_schemes_match_serial_at_the_same_global_batch(runs):
    _, serial = runs["serial"]
    expected = serial["loss"].to_numpy()
    assert len(expected) == 12 and serial["batch_size"].eq(GLOBAL_BATCH).all()
    for alg in SYNCHRONOUS:
        steps = worker_rows(alg, runs[alg][1])
        assert steps["batch_size"].eq(GLOBAL_BATCH // P).all()
        # equal slices: the global batch's loss is the mean of the workers' losses
        got = steps.groupby("iteration")["loss"].mean().to_numpy()
        np.testing.assert_allclose(got, expected, atol=1e-5, err_msg=alg)
    gs, ar = (worker_rows(a, runs[a][1]).sort_values(["iteration", "rank"])["loss"].to_numpy()
              for a in ("gather_scatter", "allreduce"))
    np.testing.assert_allclose(gs, ar, atol=1e-5)
    for alg in SYNCHRONOUS:
        assert runs[alg][0]["extra"]["final_weights_identical"] is True, alg


@pytest.mark.slow
def test_parameter_server_staleness_and_update_time(runs):
    for alg in ("ps_sync", "ps_async"):
        rec, it = runs[alg]
        extra = rec["extra"]
        hist = {int(k): v for k, v in extra["staleness_histogram"].items()}
        assert sum(hist.values()) == len(worker_rows(alg, it)) == 24, alg
        assert extra["server_updates"] == (12 if alg == "ps_sync" else 24)
        assert len(extra["server_update_s"]) == extra["server_updates"]
        assert extra["server_update_median_s"] > 0
        assert (it[it["rank"] == 0]["batch_size"] == 0).all()      # the server does not train
    assert set(runs["ps_sync"][0]["extra"]["staleness_histogram"]) == {"0"}
    assert runs["ps_async"][0]["extra"]["staleness_max"] >= 0
    # ps_async's server says where each turn went, and its rows' communication holds it
    rec, it = runs["ps_async"]
    order, server = rec["extra"]["push_order"], it[(it["rank"] == 0) & (it["iteration"] >= 0)]
    parts = [order[k] for k in ("header_s", "vector_s", "answer_s")]
    assert all(len(x) == 24 and min(x) >= 0 for x in parts)
    assert sum(map(sum, parts)) <= server["comm_s"].sum() + 1e-3


@pytest.mark.slow
def test_the_replay_of_the_measured_push_order_trains_what_the_ps_async_run_trained(runs):
    """The server records the order it applied the pushes in; replayed in one process that
    order gives the run's losses and accuracy: where the order is known the replay is
    exact, so a missed prediction of ps_async is the predicted order's."""
    rec, it = runs["ps_async"]
    order = rec["extra"]["push_order"]
    assert len(order["worker"]) == rec["extra"]["server_updates"] == 24
    assert Counter(order["worker"]) == {0: 12, 1: 12} and order["t_s"] == sorted(order["t_s"])
    assert Counter(a - r for a, r in enumerate(order["read"])) == {
        int(k): v for k, v in rec["extra"]["staleness_histogram"].items()}
    wl = Workload(model="linear", batch_per_worker=GLOBAL_BATCH // P, dataset_samples=256,
                  epochs=3)
    like = simulate_schedule("ps_async", P, wl, "synthetic", cluster=calibrated_cluster(load_default().cores), train_size=256)[1]
    sched = measured(rec, like, "ps_async")
    data = load_dataset("synthetic", train_size=256, test_size=128, seed=1)
    got = replay(sched, data, argparse.Namespace(seed=1, lr=0.5, momentum=0.0, lr_decay=0.0))
    steps = worker_rows("ps_async", it).set_index(["rank", "iteration"])["loss"]
    done: Counter = Counter()
    real_losses = []
    for w in order["worker"]:                        # worker w's k-th push: its step k
        real_losses.append(steps[(w + 1, done[w])])
        done[w] += 1
    np.testing.assert_allclose(got["update_losses"], real_losses, atol=1e-5)
    assert got["points"][-1]["test_accuracy"] == pytest.approx(
        rec["results"]["test_accuracy"], abs=1e-9)


@pytest.mark.slow
def test_hogwild_records_processes_and_update_rate(runs):
    rec, _ = runs["hogwild"]
    assert rec["extra"]["hogwild_processes"] == P
    assert rec["extra"]["updates_per_s"] > 0
    assert rec["extra"]["steps_per_process"] == [12, 12]
    assert rec["environment"]["threads_per_rank"] >= 1


@pytest.mark.slow
def test_the_progress_bar_counts_workers_as_the_record_does(launched):
    """Issue 40, item 7: ps_sync under mpirun -n 3 is P = 2 (a server and two workers), on the
    bar as in the record."""
    rec, _, stderr = launched["ps_sync"]
    assert rec["environment"]["ranks"] == 3 and rec["environment"]["workers"] == 2
    assert "ps_sync P=2" in stderr and "P=3" not in stderr


@pytest.mark.slow
def test_async_avg_mixes_into_the_holder(runs):
    extra = runs["async_avg"][0]["extra"]
    # every 2 of 12 steps, on both workers, plus each worker's last weights
    assert extra["async_avg_mixes"] == 2 * 6 + 2


@pytest.mark.slow
def test_mpi_allreduce_algorithm_is_selectable_and_recorded(runs):
    rec, _ = runs["mpi_allreduce"]                 # run with --mpi-allreduce ring
    assert rec["extra"]["mpi_allreduce_algorithm"] == "ring"
    assert rec["extra"]["mpi_cvars"]["MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM"] == "ring"


@pytest.mark.slow
def test_allreduce_under_torchrun(runs):
    rec, _ = runs["allreduce"]                     # launched by torchrun
    assert rec["status"] == "completed" and rec["environment"]["launcher"] == "torchrun"
    assert rec["environment"]["workers"] == P


def test_mpi_only_scheme_outside_mpirun_says_to_use_it(tmp_path, capsys):
    refused(train.main, ["--algorithm", "ps_sync", "--out", tmp_path], "mpirun -n", capsys)


def test_global_batch_must_divide(tmp_path, capsys):
    refused(train.main, ["--algorithm", "hogwild", "--workers", "3", "--global-batch", "64",
                         "--dataset", "synthetic", "--train-size", "64", "--out", tmp_path],
            "not a multiple", capsys)


@pytest.mark.slow
@pytest.mark.parametrize("alg", SYNCHRONOUS)
def test_vgg11_cifar_total_batch_256(tmp_path, alg):
    """Seed 002's setting, one iteration: VGG-11, (synthetic) CIFAR-10, total batch 256."""
    argv = ["real.train", "--algorithm", alg, "--model", "vgg11", "--dataset",
            "synthetic-cifar10", "--train-size", "256", "--test-size", "64",
            "--global-batch", "256", "--out", str(tmp_path), "--run-id", "v"]
    r = mpi(schemes.ranks_for(alg, P), *argv)
    assert r.returncode == 0, r.stderr[-3000:]
    rec, it = record.read(tmp_path / "v"), record.read_iterations(tmp_path / "v")
    steps = worker_rows(alg, it)
    assert rec["status"] == "completed" and len(steps) == P
    assert steps["batch_size"].eq(128).all()


# ------------------------------------------------------------------ phantom compute

def linear_workload(path: Path) -> Path:
    """The linear model's tensors as a workload file (gradient-ready order: the model's
    ``parameters()`` reversed; ``param_index`` its own order), each layer 1 ms + 2 ms."""
    from real.training.models import build_model
    params = list(build_model("linear", (1, 28, 28), 10).named_parameters())
    tensors = ", ".join(f'{{ name = "{n}", params = {p.numel()}, param_index = {i} }}'
                        for i, (n, p) in reversed(list(enumerate(params))))
    path.write_text('[model]\nname = "linear"\n[measured]\ndevice = "cpu"\nbatch_size = 32\n'
                    'step = "3.5ms"\nupdate = "0.5ms"\n[[layers]]\nname = "fc"\n'
                    f'forward = "1ms"\nbackward = "2ms"\ntensors = [{tensors}]\n')
    return path


@pytest.fixture(scope="module")
def phantom_runs(tmp_path_factory):
    """scheme -> record of a phantom run with the real runs' flags and the linear model's
    tensors."""
    out = tmp_path_factory.mktemp("phantom")
    workload = linear_workload(out / "linear.toml")
    done = {}
    for alg in schemes.RANK_BASED:
        r = launch(alg, out, *SCHEME_FLAGS.get(alg, []), "--compute", "phantom",
                   "--workload", str(workload))
        assert r.returncode == 0, f"{alg}:\n{r.stderr[-3000:]}"
        done[alg] = record.read(out / alg), record.read_iterations(out / alg)
    return done


@pytest.mark.slow
@pytest.mark.parametrize("alg", schemes.RANK_BASED)
def test_a_phantom_run_sends_what_the_real_run_sends(runs, phantom_runs, alg):
    from real.records import wire
    (real, real_it), (phantom, it) = runs[alg], phantom_runs[alg]
    assert phantom["comm"]["bytes_sent_per_rank"] == real["comm"]["bytes_sent_per_rank"]
    assert worker_rows(alg, it).groupby("rank").size().tolist() == \
        worker_rows(alg, real_it).groupby("rank").size().tolist()
    steps = worker_rows(alg, it).groupby("rank").size().tolist()
    tensors = [(7840, "float32"), (10, "float32")]
    assert wire.record_bytes(alg, tensors, steps, 2) == phantom["comm"]["bytes_sent_per_rank"]


@pytest.mark.slow
@pytest.mark.parametrize("alg", schemes.RANK_BASED)
def test_a_phantom_record_says_what_it_is_and_measures_no_accuracy(phantom_runs, alg):
    rec, it = phantom_runs[alg]
    c = rec["compute"]
    assert c["mode"] == "phantom" and c["time_scale"] == 1.0
    assert len(c["workload"]["sha256"]) == 64 and c["workload"]["params"] == 7850
    assert c["phantom_step_s"] == pytest.approx(3.5e-3)
    assert rec["results"]["test_accuracy"] is None and "curve" not in rec["results"]
    assert rec["results"]["accuracy"].startswith("not measured")
    assert rec["results"]["train_samples"] == 256
    sleeps = rec["testbed"]["checks"]["sleep_lateness"]["per_rank"]
    assert len(sleeps) == P and all(s["sleeps"] > 0 for s in sleeps)
    # the workers' compute: at least the sleeps asked for
    assert worker_rows(alg, it)["compute_s"].min() >= 0.0


@pytest.mark.slow
def test_phantom_ddp_launches_its_first_bucket_before_backward_ends(tmp_path):
    """Two ranks, three layers of 1.2 MB: the first bucket's all_reduce starts while the
    other two layers' backward (20 ms each) still sleep."""
    big = 300_000
    layers = "".join(f'[[layers]]\nname = "l{i}"\nforward = "1ms"\nbackward = "20ms"\n'
                     f'tensors = [{{ name = "l{i}.w", params = {big} }}]\n' for i in range(3))
    w = tmp_path / "big.toml"
    w.write_text('[model]\nname = "big"\n[measured]\ndevice = "cpu"\nbatch_size = 32\n'
                 f'step = "70ms"\n{layers}')
    r = mpi(2, "real.train", "--schemes", "ddp", "--compute", "phantom", "--workload", str(w),
            "--dataset", "synthetic", "--train-size", "256", "--batch-size", "32",
            "--out", str(tmp_path), "--run-id", "ddp")
    assert r.returncode == 0, r.stderr[-3000:]
    rec = record.read(tmp_path / "ddp")
    assert rec["extra"]["ddp_first_bucket_lead_s"] > 0.02
    assert rec["comm"]["bytes_sent_per_rank"] == [4 * 3 * big * 4] * 2     # 4 steps
