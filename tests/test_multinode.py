"""Multi-node launches on the emulated cluster's namespaces as hosts (root only, ~60 s).

torchrun with the c10d rendezvous, one agent per host; mpirun with a hostfile (through
real.sweep --cluster --prefix); a hostfile naming a host the cluster does not have;
calibrate.link with a relative --workdir. Run them under ``flock /tmp/netns.lock``.
Everything uses the prefix ``psgdmn`` and its own subnet, removed before and after
each test.
"""
from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from real import cluster as rc
from contracts import record
from tests.cluster_helpers import REPO_ROOT, ROOT_TESTS, env, namespaces_cleaned

PREFIX = "psgdmn"
SUBNET = "10.79.0.0/24"
pytestmark = ROOT_TESTS
TINY = ["--model", "mlp", "--dataset", "synthetic", "--train-size", "256", "--test-size", "64",
        "--batch-size", "32", "--threads", "1"]
clean = namespaces_cleaned(PREFIX)


def both_hosts(rec: dict) -> list[dict]:
    me = socket.gethostname()
    return [{"host": f"{me}/{PREFIX}-h0", "ranks": [0]}, {"host": f"{me}/{PREFIX}-h1", "ranks": [1]}]


def assert_complete(rec: dict, run_dir: Path) -> None:
    assert rec["status"] == "completed" and rec["timings"]["train_wall_s"] > 0
    assert rec["results"]["loss_curve"] and rec["extra"]["final_weights_identical"]
    it = record.read_iterations(run_dir)
    steps = it[it["batch_size"] > 0]
    assert sorted(steps["rank"].unique()) == [0, 1] and (steps["compute_s"] > 0).all()
    assert rec["disturbed"] in (True, False) and len(rec["load"]["per_rank"]) == 2


def test_torchrun_c10d_across_two_hosts_names_both(tmp_path):
    argv = ["-m", "real.train", "--algorithm", "allreduce", *TINY, "--out", str(tmp_path),
            "--run-id", "tr"]
    with rc.emulated_cluster(2, "500mbit", prefix=PREFIX, subnet=SUBNET) as c:
        e = env() | {"GLOO_SOCKET_IFNAME": c.interface}
        procs = [subprocess.Popen(rc.torchrun_c10d_command(c, h, 2, 1, argv, run_id="t"),
                                  env=e, cwd=REPO_ROOT, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True) for h in range(2)]
        outs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][-2000:] + outs[1][-2000:]
    rec = record.read(tmp_path / "tr")
    assert rec["environment"]["launcher"] == "torchrun"
    assert rec["environment"]["hosts"] == both_hosts(rec)
    assert rec["environment"]["ranks_per_host"] == 1
    assert_complete(rec, tmp_path / "tr")


def test_mpirun_hostfile_across_two_hosts_names_both(tmp_path):
    hosts = tmp_path / "hosts"
    with rc.emulated_cluster(2, "500mbit", prefix=PREFIX, subnet=SUBNET) as c:
        hosts.write_text(f"# one rank per host\n{c.addresses[0]}:1\n{c.addresses[1]}:1\n")
        done = subprocess.run([sys.executable, "-m", "real.sweep", "--cluster", "--prefix", PREFIX,
                               "--hostfile", str(hosts), "--algorithm", "psgd", "--workers", "2-2",
                               "--dataset", "synthetic", "--train-size", "256", "--test-size",
                               "64", "--out", str(tmp_path / "runs"), "--threads", "1",
                               "--model", "mlp"],
                              env=env(), cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    run = tmp_path / "runs" / "psgd-P2-r0"
    rec = record.read(run)
    assert rec["environment"]["launcher"] == "mpirun"
    assert rec["environment"]["hosts"] == both_hosts(rec)
    assert rec["environment"]["cluster"]["namespaces"] == [f"{PREFIX}-h0", f"{PREFIX}-h1"]
    assert_complete(rec, run)


def test_gloo_scheme_under_mpirun_hostfile_finds_rank_0_without_master_addr(tmp_path):
    """``mpirun -f hostfile -n 2 python -m real.train --algorithm allreduce`` as a user types
    it: no MASTER_ADDR; rank 0 advertises its address on the route to the other host."""
    hosts = tmp_path / "hosts"
    py = [sys.executable, "-m", "real.train", "--algorithm", "allreduce", *TINY,
          "--out", str(tmp_path), "--run-id", "hf"]
    with rc.emulated_cluster(2, "500mbit", prefix=PREFIX, subnet=SUBNET) as c:
        hosts.write_text(f"{c.addresses[0]}:1\n{c.addresses[1]}:1\n")
        e = {k: v for k, v in env().items() if k != "MASTER_ADDR"}
        done = subprocess.run(rc.mpirun_command(c, 2, py, hostfile=str(hosts)),
                              env=e | rc.mpi_env(c) | {"GLOO_SOCKET_IFNAME": c.interface},
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    rec = record.read(tmp_path / "hf")
    assert rec["environment"]["hosts"] == both_hosts(rec)
    assert_complete(rec, tmp_path / "hf")


def test_a_hostfile_naming_a_host_the_cluster_lacks_is_refused(tmp_path):
    hosts = tmp_path / "hosts"
    with rc.emulated_cluster(2, "100mbit", prefix=PREFIX, subnet=SUBNET) as c:
        hosts.write_text(f"{c.addresses[0]}\n10.79.0.99:1\n")
        done = subprocess.run([sys.executable, "-m", "real.sweep", "--cluster", "--prefix", PREFIX,
                               "--hostfile", str(hosts), "--workers", "2-2",
                               "--out", str(tmp_path / "runs")],
                              env=env(), cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "line 2: '10.79.0.99' is not a host of the emulated cluster 'psgdmn'" in done.stderr
    assert not (tmp_path / "runs").exists()


def test_link_calibration_with_a_relative_workdir(tmp_path):
    with rc.emulated_cluster(2, "500mbit", prefix=PREFIX, subnet=SUBNET):
        done = subprocess.run([sys.executable, "-m", "calibrate.link", "--prefix", PREFIX,
                               "--workdir", "raw", "--out", "link.toml", "--no-gloo",
                               "--repeats", "2"],
                              env=env(), cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "raw" / "link_pingpong.csv").is_file() and (tmp_path / "link.toml").is_file()
