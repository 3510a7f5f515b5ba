"""The testbed's checks on the emulated cluster (root only, ~30 s): a run given too little
CPU is marked testbed-bound, a record keeps every shaper's figures, and the shapers' queue
settings reach tc. Prefix ``psgdtb``, subnet 10.93.0.0/24, removed before and after each test.
"""
from __future__ import annotations

import subprocess
import sys

from real import cluster as rc
from real.cluster import netns
from contracts import record
from tests.cluster_helpers import REPO_ROOT, ROOT_TESTS, env, namespaces_cleaned

PREFIX = "psgdtb"
SUBNET = "10.93.0.0/24"
pytestmark = ROOT_TESTS
clean = namespaces_cleaned(PREFIX)
SPIN = "import os\nos.sched_setaffinity(0, {0})\nwhile True:\n    pass\n"


def train(c, out, run_id: str, pin: list[str]) -> subprocess.CompletedProcess:
    py = [sys.executable, "-m", "real.train", "--schemes", "allreduce", "--run-id", run_id,
          "--out", str(out), "--model", "mlp", "--dataset", "synthetic", "--train-size", "1024",
          "--test-size", "64", "--batch-size", "32", "--threads", "1"]
    extra = rc.rank_env(c, c.to_json())
    return subprocess.run(pin + rc.mpirun_command(c, 2, py), env=env() | extra, cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=180)


def test_a_run_with_a_busy_loop_pinned_beside_it_is_testbed_bound(tmp_path):
    """Every rank and a busy loop on CPU 0: the ranks wait for the core, and the record
    says so; it also keeps what every shaper sent and what each rank sent over TCP."""
    with rc.emulated_cluster(2, "200mbit", prefix=PREFIX, subnet=SUBNET) as c:
        spin = subprocess.Popen([sys.executable, "-c", SPIN])
        try:
            done = train(c, tmp_path, "busy", ["taskset", "-c", "0"])
        finally:
            spin.kill()
            spin.wait()
    assert done.returncode == 0, done.stderr[-2000:]
    rec = record.read(tmp_path / "busy")
    assert rec["testbed_bound"] is True
    assert rec["testbed"]["reasons"][0].startswith("cpu: rank "), rec["testbed"]["reasons"]
    cpu = rec["testbed"]["checks"]["cpu"]
    assert cpu["verdict"] == "fail" and cpu["machines"][0]["cores"] == 1
    assert "testbed-bound: cpu:" in done.stderr
    links = rec["testbed"]["checks"]["links"]["shapers"]
    assert [s["name"] for s in links] == ["h0->switch", "switch->h0", "h1->switch", "switch->h1"]
    assert all(s["bytes"] > 0 for s in links)
    sent = rec["testbed"]["checks"]["bytes"]["sent_bytes"]
    assert len(sent) == 2 and min(sent) > 0


def test_the_queue_settings_reach_tc():
    """A queue in bytes is tbf's limit at both ends of every link; a time its latency; a
    host queue in packets a pfifo behind the host's shaper."""
    def shown(ns, dev):
        return subprocess.run(["tc", "-raw", "-n", ns, "qdisc", "show", "dev", dev], capture_output=True,
                              text=True, check=True).stdout
    with rc.emulated_cluster(2, "20mbit", prefix=PREFIX, subnet=SUBNET,
                             queue_bytes=300_000) as c:
        host, port = shown(c.namespaces[1], c.interface), shown(c.bridge_namespace, "h1")
        assert rc.read_state(PREFIX).queue_bytes == 300_000
    assert "limit 300000b" in host and "limit 300000b" in port, (host, port)
    with rc.emulated_cluster(2, "20mbit", prefix=PREFIX, subnet=SUBNET, queue_s=0.005,
                             host_queue_packets=100) as c:
        host, port = shown(c.namespaces[0], c.interface), shown(c.bridge_namespace, "h0")
    assert "parent 1:1 limit 100p" in host and "lat 5ms" in port, (host, port)
    assert netns.shaper_command("ns", "dev", 1000, 2048, 0.005, 4096)[-2:] == ["limit", "4096"]


def test_real_cluster_up_takes_a_queue_in_bytes():
    done = subprocess.run([sys.executable, "-m", "real.cluster", "up", "--hosts", "2",
                           "--bandwidth", "50mbit", "--queue", "256kb", "--prefix", PREFIX,
                           "--subnet", SUBNET], capture_output=True, text=True, cwd=REPO_ROOT,
                          env=env(), timeout=60)
    assert done.returncode == 0, done.stderr
    assert "queue 262144 B" in done.stdout
    default = rc.lifecycle.up(2, "50mbit", prefix=PREFIX + "d", subnet="10.94.0.0/24")
    rc.down(PREFIX + "d")
    assert default.queue_bytes == netns.DEFAULT_QUEUE_BYTES == 1 << 20
    bad = subprocess.run([sys.executable, "-m", "real.cluster", "up", "--queue", "lots",
                          "--prefix", PREFIX], capture_output=True, text=True, cwd=REPO_ROOT,
                         env=env(), timeout=60)
    assert bad.returncode == 2 and "neither a time (5ms) nor a size" in bad.stderr
