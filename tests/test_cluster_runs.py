"""Real and phantom runs and the link calibration across the emulated cluster (root only, ~50 s).

Everything uses its own prefix, ``psgdruns``, so clusters of other tests or of
a user are left alone; a fixture removes whatever carries that prefix before
and after each test, whether the test passed or not.
"""
from __future__ import annotations

import subprocess
import sys

import pytest
import tomllib

from real import cluster as rc
from real.cluster.netns import list_namespaces
from contracts import record
from tests.cluster_helpers import REPO_ROOT, ROOT_TESTS, env, namespaces_cleaned

PREFIX = "psgdruns"
SUBNET = "10.78.0.0/24"
pytestmark = ROOT_TESTS
clean = namespaces_cleaned(PREFIX)


def test_two_host_allreduce_writes_a_record_naming_the_cluster(tmp_path):
    with rc.emulated_cluster(2, "500mbit", prefix=PREFIX, subnet=SUBNET) as c:
        py = [sys.executable, "-m", "real.train", "--algorithm", "allreduce", "--run-id", "ar",
              "--out", str(tmp_path), "--model", "mlp", "--dataset", "synthetic",
              "--train-size", "256", "--test-size", "64", "--batch-size", "32", "--threads", "1"]
        extra = rc.rank_env(c, c.to_json())
        done = subprocess.run(rc.mpirun_command(c, 2, py), env=env() | extra, cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    rec = record.read(tmp_path / "ar")
    assert rec["status"] == "completed"
    assert rec["timings"]["train_wall_s"] > 0 and rec["results"]["loss_curve"]
    emu = rec["environment"]["cluster"]
    assert emu["namespaces"] == [f"{PREFIX}-h0", f"{PREFIX}-h1"]
    assert emu["bandwidth_bits_per_s"] == 500_000_000
    assert rec["environment"]["workers"] == 2
    # the simulator reads it as two hosts with their own links on one pool of cores
    from simulator.compare import cluster_of
    sim = cluster_of(rec)
    assert (sim.hosts, sim.shared_cores, sim.link.bandwidth_bytes_per_s) == (2, True, 62.5e6)


# Two layers of 256 KiB of float32 gradients, slept 60 ms a step at batch 32
PHANTOM_WORKLOAD = """
schema_version = 1
[model]
name = "e2e"
[measured]
device = "cpu"
batch_size = 32
step = "60ms"
lines = [{ threads = 1, intercept = "12ms", per_sample = "1.5ms" }]
[[layers]]
name = "fc2"
forward = "5ms"
backward = "10ms"
tensors = [{ name = "fc2.weight", params = 65536, dtype = "float32" }]
[[layers]]
name = "fc1"
forward = "15ms"
backward = "29ms"
tensors = [{ name = "fc1.weight", params = 65536, dtype = "float32" }]
"""


def test_a_phantom_run_at_another_rate_is_predicted_within_5_percent(tmp_path):
    """End to end: calibrate.link at 200 Mbit/s finds the shaped rate; a two-host phantom
    mpi_allreduce run at 50 Mbit/s (12 steps, 60 ms of compute slept and 512 KiB reduced
    a step) takes, per epoch, what simulator.compare predicts from the calibrated link
    within 5% (measured here: -2% on a loaded machine, 2026-11-27)."""
    toml = tmp_path / "link.toml"
    with rc.emulated_cluster(2, "200mbit", prefix=PREFIX, subnet=SUBNET):
        done = subprocess.run([sys.executable, "-m", "calibrate.link", "--prefix", PREFIX,
                               "--out", str(toml), "--no-gloo", "--repeats", "3"],
                              env=env(), cwd=REPO_ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    from contracts.cluster import load_cluster, load_link_calibration
    c = load_cluster(toml)
    assert c.hosts == 2 and c.shared_cores
    assert c.link.bandwidth_bytes_per_s * 8 == pytest.approx(200e6, rel=0.15)
    assert 0 < c.link.latency_s < 2e-3
    cal = load_link_calibration(toml)
    assert cal.shaped_bits_per_s == 200e6 and 0.85 < cal.payload_efficiency <= 1.1
    assert "mpi_beta_s_per_byte" in tomllib.loads(toml.read_text())["fit"]

    work = tmp_path / "workloads" / "e2e.toml"
    work.parent.mkdir()
    work.write_text(PHANTOM_WORKLOAD)
    runs = tmp_path / "runs"
    with rc.emulated_cluster(2, "50mbit", prefix=PREFIX, subnet=SUBNET) as c:
        py = [sys.executable, "-m", "real.train", "--schemes", "mpi_allreduce", "--run-id",
              "e2e", "--out", str(runs), "--compute", "phantom", "--workload", str(work),
              "--dataset", "synthetic", "--train-size", str(12 * 32 * 2), "--test-size", "64",
              "--batch-size", "32", "--epochs", "1", "--threads", "1"]
        extra = rc.rank_env(c, c.to_json())
        done = subprocess.run(rc.mpirun_command(c, 2, py), env=env() | extra, cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    rec = record.read(runs / "e2e")
    assert not rec.get("testbed_bound"), rec["testbed"]["reasons"]
    from simulator.compare import compare
    from contracts import profile as profiles
    # a run disturbed by other work is kept: its time is the sleeps' and the network's
    row, = compare(runs, profiles.load_default(), link=cal, workloads=[work.parent],
                   include_disturbed=True, keep=("phantom",)).itertuples()
    assert (row.scheme, row.workers) == ("mpi_allreduce", 2)
    assert row.predicted_s == pytest.approx(row.measured_s, rel=0.05)


def test_link_calibration_without_a_cluster_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run([sys.executable, "-m", "calibrate.link", "--prefix", PREFIX,
                           "--out", str(tmp_path / "l.toml")],
                          env=env(), cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "no emulated cluster" in done.stderr
    assert not (tmp_path / "l.toml").exists()


def test_torn_down_after_a_failing_run(tmp_path):
    with pytest.raises(subprocess.CalledProcessError):
        with rc.emulated_cluster(2, "100mbit", prefix=PREFIX, subnet=SUBNET) as c:
            py = [sys.executable, "-m", "real.train", "--algorithm", "allreduce",
                  "--model", "no-such-model", "--dataset", "synthetic", "--out", str(tmp_path)]
            subprocess.run(rc.mpirun_command(c, 2, py), env=env() | rc.mpi_env(c), cwd=REPO_ROOT,
                           capture_output=True, timeout=120, check=True)
    assert not list_namespaces(PREFIX)
    assert rc.read_state(PREFIX) is None
