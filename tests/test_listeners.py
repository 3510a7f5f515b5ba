"""Nothing a local run starts listens beyond loopback (docs/security.md says what does).

While a local gloo run trains, every listening socket of its processes is
looked at (they carry a tag in their environment): the torch.distributed
store, gloo's pairs, MPICH's (UCX) sockets must all be on 127.0.0.1 or ::1.
Under mpirun the one exception is hydra's own control port, which MPICH binds
to every interface and offers no setting for; it belongs to mpirun and its
proxy (the launcher wrapper of each rank inherits it), never to a training
process, and the test checks exactly that.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from tests.conftest import MPIRUN, ROOT

LOOPBACK = ("127.0.0.1", "::1")
RUN = ["--dataset", "synthetic", "--model", "linear", "--train-size", "3000", "--test-size",
       "64", "--batch-size", "4", "--epochs", "1", "--timeout", "120"]


def _tagged(tag: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("PSGD_TEST_TAG") == tag:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _listeners(procs) -> dict[tuple, set[str]]:
    """(address, port) of every listening TCP socket -> the names of the processes holding it
    (a training process is named ``rank``)."""
    held: dict[tuple, set[str]] = {}
    for p in procs:
        try:
            name = "rank" if p.environ().get("PSGD_SUPERVISED") == "1" else p.name()
            for c in p.net_connections(kind="tcp"):
                if c.status == psutil.CONN_LISTEN:
                    held.setdefault((c.laddr.ip, c.laddr.port), set()).add(name)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return held


def _watch(cmd: list[str], tag: str, out) -> dict[tuple, set[str]]:
    """Listeners of a run held at its fifth iteration (rank 0 hangs there, by the test-only
    fault hook, with the store and gloo up), looked at three times, then the run stopped."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), PSGD_TEST_TAG=tag, PSGD_FAULT_RANK="0",
               PSGD_FAULT_AT_ITER="5", PSGD_FAULT_SIGNAL="hang",
               PATH=f"{os.path.dirname(sys.executable)}:{os.environ.get('PATH', '')}")
    proc = subprocess.Popen(cmd + ["--out", str(out), "--progress-file", str(out / "p")],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    seen: dict[tuple, set[str]] = {}
    deadline = time.monotonic() + 120
    try:
        while not (out / "p").exists():       # training: the store and gloo are up
            assert proc.poll() is None and time.monotonic() < deadline, "the run never trained"
            time.sleep(0.1)
        for _ in range(3):
            for key, names in _listeners(_tagged(tag)).items():
                seen.setdefault(key, set()).update(names)
            time.sleep(0.3)
    finally:
        proc.terminate()                       # the recorders stop the held ranks
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return seen


@pytest.mark.slow
def test_a_local_gloo_run_under_mpirun_listens_on_loopback_only(tmp_path):
    tag = f"listen-{os.getpid()}-{time.monotonic_ns()}"
    seen = _watch([MPIRUN, "-n", "2", sys.executable, "-m", "real.train", "--algorithm",
                   "allreduce", *RUN], tag, tmp_path)
    ranks = {k for k, names in seen.items() if "rank" in names}
    assert ranks, "saw no listener of the training processes"
    outside = {k: names for k, names in seen.items() if k[0] not in LOOPBACK}
    hydra = {k for k, names in outside.items() if names & {"mpirun", "mpiexec.hydra",
                                                             "hydra_pmi_proxy"}}
    assert all("rank" not in outside[k] for k in outside), outside
    assert set(outside) == hydra, outside       # only hydra's control port is not loopback
    assert len(hydra) <= 1


@pytest.mark.slow
def test_a_single_process_gloo_run_listens_on_loopback_only(tmp_path):
    tag = f"listen1-{os.getpid()}-{time.monotonic_ns()}"
    seen = _watch([sys.executable, "-m", "real.train", "--algorithm", "ddp", *RUN], tag,
                  tmp_path)
    assert any("rank" in names for names in seen.values()), "saw no store or gloo socket"
    assert all(k[0] in LOOPBACK for k in seen), seen


@pytest.mark.slow
def test_a_sweep_point_runs_in_a_network_of_its_own(tmp_path):
    """real.sweep's local points (and calibrate's comm probes) run mpirun in a network
    namespace whose only interface is loopback: hydra's control port reaches nothing else."""
    from real.launch.dist import can_isolate
    if not can_isolate():
        pytest.skip("no network namespaces here (unshare, ip or user namespaces missing)")
    tag = f"iso-{os.getpid()}-{time.monotonic_ns()}"
    env = dict(os.environ, PYTHONPATH=str(ROOT), PSGD_TEST_TAG=tag,
               PATH=f"{os.path.dirname(sys.executable)}:{os.environ.get('PATH', '')}")
    proc = subprocess.Popen([sys.executable, "-m", "real.sweep", "--algorithm", "psgd",
                             "--workers", "2-2", "--out", str(tmp_path), *RUN[:8]],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    mine = os.readlink("/proc/self/ns/net")
    seen = {}
    try:
        while proc.poll() is None:
            for p in _tagged(tag):
                try:
                    if p.name() in ("mpirun", "mpiexec.hydra", "hydra_pmi_proxy", "python"):
                        ns = os.readlink(f"/proc/{p.pid}/ns/net")
                        with open(f"/proc/{p.pid}/net/dev") as f:
                            devices = {ln.split(":")[0].strip() for ln in f if ":" in ln}
                        seen[p.pid] = (p.name(), ns, devices)
                except (psutil.NoSuchProcess, OSError):
                    continue
            time.sleep(0.3)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.wait() == 0
    launchers = [v for v in seen.values() if v[0] in ("mpirun", "mpiexec.hydra")]
    assert launchers, "never saw the point's mpirun"
    assert all(ns != mine and devices == {"lo"} for _, ns, devices in launchers), launchers
