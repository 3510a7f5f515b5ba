"""Real runs and the link calibration across the emulated cluster (root only, ~60 s).

Everything uses its own prefix, ``psgdruns``, so clusters of other tests or of
a user are left alone; a fixture removes whatever carries that prefix before
and after each test, whether the test passed or not.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import tomllib

from real import cluster as rc
from real.cluster.netns import list_namespaces
from simulator.contracts import record
from tests.cluster_helpers import REPO_ROOT, ROOT_TESTS, SENDRECV, env, namespaces_cleaned

PREFIX = "psgdruns"
SUBNET = "10.78.0.0/24"
pytestmark = ROOT_TESTS
clean = namespaces_cleaned(PREFIX)


def test_two_host_allreduce_writes_a_record_naming_the_cluster(tmp_path):
    with rc.emulated_cluster(2, "500mbit", prefix=PREFIX, subnet=SUBNET) as c:
        py = [sys.executable, "-m", "real.train", "--algorithm", "allreduce", "--run-id", "ar",
              "--out", str(tmp_path), "--model", "mlp", "--dataset", "synthetic",
              "--train-size", "256", "--test-size", "64", "--batch-size", "32", "--threads", "1"]
        extra = rc.mpi_env(c) | {"MASTER_ADDR": c.addresses[0], "GLOO_SOCKET_IFNAME": c.interface,
                                 "PSGD_CLUSTER": json.dumps(c.to_json())}
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


def test_link_calibration_finds_the_shaped_rate(tmp_path):
    out = tmp_path / "link.toml"
    with rc.emulated_cluster(2, "200mbit", prefix=PREFIX, subnet=SUBNET):
        done = subprocess.run([sys.executable, "-m", "calibrate.link", "--prefix", PREFIX,
                               "--out", str(out), "--no-gloo", "--repeats", "3"],
                              env=env(), cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    from simulator.contracts.cluster import load_cluster, load_link_calibration
    c = load_cluster(out)
    assert c.hosts == 2 and c.shared_cores
    assert c.link.bandwidth_bytes_per_s * 8 == pytest.approx(200e6, rel=0.15)
    assert 0 < c.link.latency_s < 2e-3
    cal = load_link_calibration(out)
    assert cal.shaped_bits_per_s == 200e6 and 0.85 < cal.payload_efficiency <= 1.1
    assert "mpi_beta_s_per_byte" in tomllib.loads(out.read_text())["fit"]


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




def test_a_link_calibrated_at_one_rate_predicts_a_transfer_at_another(tmp_path):
    """calibrate.link at 100 Mbit/s; a 4 MiB message and a 1-byte reply at 40 Mbit/s take
    what its latency and payload share say: t = 2 latency + (n + 1) / (share x 40 Mbit/s)."""
    toml = tmp_path / "link.toml"
    with rc.emulated_cluster(2, "100mbit", prefix=PREFIX, subnet=SUBNET):
        done = subprocess.run([sys.executable, "-m", "calibrate.link", "--prefix", PREFIX,
                               "--out", str(toml), "--no-gloo", "--repeats", "3"],
                              env=env(), cwd=REPO_ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    from simulator.contracts.cluster import load_link_calibration
    cal = load_link_calibration(toml)
    script = tmp_path / "sendrecv.py"
    script.write_text(SENDRECV)
    with rc.emulated_cluster(2, "40mbit", prefix=PREFIX, subnet=SUBNET) as c:
        proc = subprocess.run(rc.mpirun_command(c, 2, [sys.executable, str(script)]),
                              env=env() | rc.mpi_env(c), capture_output=True, text=True,
                              timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    measured = float(proc.stdout.split("SENDRECV_S")[1].split()[0])
    rate = cal.payload_efficiency * 40e6 / 8
    predicted = 2 * cal.latency_s + ((4 << 20) + 1) / rate
    assert measured == pytest.approx(predicted, rel=0.10)
