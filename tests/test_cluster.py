"""The emulated cluster: units and commands everywhere; namespaces, shaping and MPI as root.

Root tests use their own prefix, so a cluster someone brought up with the default
prefix is left alone, and an autouse fixture removes everything with that prefix
before and after each test, whether it passed or not.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from real import cluster as rc
from real.cluster.__main__ import main as cluster_main
from real.cluster.netns import HOST_IFACE, list_namespaces
from real.records.testbed import cpu_seconds
from tests.cluster_helpers import CAN_BUILD, REPO_ROOT, SENDRECV, needs_root

PREFIX = "psgdtest"


def fake_cluster(n_hosts: int = 2) -> rc.Cluster:
    return rc.Cluster(prefix="x", namespaces=tuple(f"x-h{i}" for i in range(n_hosts)),
                      addresses=tuple(f"10.77.0.{i + 1}" for i in range(n_hosts)),
                      interface=HOST_IFACE, subnet="10.77.0.0/24", bridge_namespace="x-br",
                      bridge="br0", bandwidth_bits_per_s=100_000_000, burst_bytes=25_000,
                      hydra_launcher="/run/x-cluster-hydra-launcher")


# --- no root needed ------------------------------------------------------------

@pytest.mark.parametrize("text, bits", [
    ("100mbit", 100_000_000), ("1gbit", 1_000_000_000), ("500kbit", 500_000),
    ("1.5Mbit", 1_500_000), ("10Mbit/s", 10_000_000), ("12.5MB/s", 100_000_000),
    ("1mibit", 2**20),
])
def test_parse_bandwidth_like_tc(text, bits):
    assert rc.parse_bandwidth(text) == bits


@pytest.mark.parametrize("text", ["", "fast", "-5mbit", "100 mb", "0bit", "1e20bit",
                                  "64000", "10mbps", "10mb/s"])
def test_parse_bandwidth_rejects_nonsense(text):
    with pytest.raises(ValueError, match="bandwidth"):
        rc.parse_bandwidth(text)


@pytest.mark.parametrize("text, n", [("32kb", 32768), ("1mb", 2**20), ("20000", 20000),
                                     ("1mbit", 125_000), ("16k", 16384)])
def test_parse_size_like_tc(text, n):
    assert rc.parse_size(text) == n


def test_without_root_one_line_and_exit_2(monkeypatch, capsys):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    for command in ("up", "down", "status", "check"):
        assert cluster_main([command]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "root" in err


def test_bad_bandwidth_is_a_usage_error(capsys):
    assert cluster_main(["up", "--bandwidth", "lots"]) == 2
    assert "lots" in capsys.readouterr().err


def test_a_congestion_control_the_kernel_lacks_is_a_usage_error(capsys):
    assert cluster_main(["up", "--congestion-control", "nosuchcc"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nosuchcc" in err and "cubic" in err


def test_namespaces_are_allowed_the_asked_congestion_control_and_nothing_else(tmp_path):
    (tmp_path / "tcp_available_congestion_control").write_text("reno bbr cubic\n")
    allowed = tmp_path / "tcp_allowed_congestion_control"
    allowed.write_text("reno bbr\n")
    rc.netns.allow_congestion_control("cubic", tmp_path)
    assert allowed.read_text().split() == ["reno", "bbr", "cubic"]
    rc.netns.allow_congestion_control("bbr", tmp_path)          # already allowed: unchanged
    assert allowed.read_text().split() == ["reno", "bbr", "cubic"]
    with pytest.raises(ValueError, match="vegas"):
        rc.netns.allow_congestion_control("vegas", tmp_path)


def test_mpirun_command_runs_mpiexec_on_host_0_with_the_namespace_launcher():
    c = fake_cluster(3)
    cmd = rc.mpirun_command(c, 4, ["python", "prog.py"], ranks_per_host=2)
    assert cmd[:4] == ["ip", "netns", "exec", "x-h0"]
    assert cmd[cmd.index("-launcher-exec") + 1] == c.hydra_launcher
    assert cmd[cmd.index("-hosts") + 1] == "10.77.0.1:2,10.77.0.2:2"
    assert cmd[-4:] == ["-n", "4", "python", "prog.py"]
    assert rc.mpi_env(c)["MPIR_CVAR_CH4_NETMOD"] == "ofi"
    with pytest.raises(ValueError, match="hosts"):
        rc.mpirun_command(c, 4, ["prog"], ranks_per_host=1)


def test_torch_env_rendezvous_on_host_0_over_the_link():
    env = rc.torch_env(fake_cluster(), rank=1, world_size=2, master_port=29600)
    assert env == {"MASTER_ADDR": "10.77.0.1", "MASTER_PORT": "29600", "RANK": "1",
                   "WORLD_SIZE": "2", "LOCAL_RANK": "0", "GLOO_SOCKET_IFNAME": HOST_IFACE}


# --- root: real namespaces --------------------------------------------------------

@pytest.fixture(autouse=True)
def no_leftovers(request):
    if "root" not in request.keywords or not CAN_BUILD:
        yield
        return
    rc.down(PREFIX)
    yield
    left = list_namespaces(PREFIX)
    rc.down(PREFIX)
    assert not left, f"left behind: {left}"


@pytest.mark.root
@needs_root
def test_up_builds_hosts_and_down_removes_everything():
    key = ["sysctl", "-n", "net.ipv4.tcp_slow_start_after_idle"]
    machine_ssai = subprocess.run(key, capture_output=True, text=True).stdout
    cc = ["sysctl", "-n", "net.ipv4.tcp_congestion_control"]
    machine_cc = subprocess.run(cc, capture_output=True, text=True).stdout
    with rc.emulated_cluster(3, "100mbit", prefix=PREFIX, slow_start_after_idle=0) as c:
        assert list_namespaces(PREFIX) == [*c.namespaces, c.bridge_namespace]
        assert c.addresses == ("10.77.0.1", "10.77.0.2", "10.77.0.3")
        assert c.bandwidth_bits_per_s == 100_000_000
        assert rc.read_state(PREFIX) == c
        qdisc = subprocess.run(["tc", "-n", c.namespaces[1], "qdisc", "show", "dev", c.interface],
                               capture_output=True, text=True).stdout
        assert "tbf" in qdisc and "100Mbit" in qdisc
        # TCP's slow start after idle is the hosts' own setting, the machine's left alone.
        assert {subprocess.run(["ip", "netns", "exec", ns, *key], capture_output=True,
                               text=True).stdout.strip() for ns in c.namespaces} == {"0"}
        assert c.tcp_slow_start_after_idle == 0
        assert subprocess.run(key, capture_output=True, text=True).stdout == machine_ssai
        # So is the congestion control: CUBIC by default, whatever the machine runs.
        assert {subprocess.run(["ip", "netns", "exec", ns, *cc], capture_output=True,
                               text=True).stdout.strip() for ns in c.namespaces} == {"cubic"}
        assert c.tcp_congestion_control == "cubic"
        assert subprocess.run(cc, capture_output=True, text=True).stdout == machine_cc
        # Host 2 reaches host 0 through the bridge.
        reach = subprocess.run(rc.netns_command(c, 2, [sys.executable, "-c",
                               "import socket; socket.create_server(('10.77.0.3', 0)); "
                               "s = socket.socket(); s.settimeout(2); "
                               "print(s.connect_ex(('10.77.0.1', 9)))"]),
                               capture_output=True, text=True)
        assert reach.stdout.strip() == "111"    # ECONNREFUSED: the host answered
    assert list_namespaces(PREFIX) == []
    assert rc.read_state(PREFIX) is None
    assert not os.path.exists(c.hydra_launcher)


@pytest.mark.root
@needs_root
def test_torn_down_after_an_exception_and_down_is_idempotent():
    with pytest.raises(ZeroDivisionError):
        with rc.emulated_cluster(2, "50mbit", prefix=PREFIX):
            1 / 0
    assert list_namespaces(PREFIX) == []
    subprocess.run(["ip", "netns", "add", f"{PREFIX}-h7"], check=True)   # a stray
    assert rc.down(PREFIX) == [f"{PREFIX}-h7"]
    assert rc.down(PREFIX) == []


@pytest.mark.root
@needs_root
def test_a_host_does_not_drop_what_its_own_tcp_sends():
    """A bulk TCP stream at 20 Mbit/s: the default switch-like queue (1 MiB) and, behind a
    5 ms shaper, a NIC-like queue of 1000 packets drop none of it, while the shaper's own
    5 ms queue cuts TCP's GSO bursts of up to 64 kB and drops a share of the stream at the
    sender (10% on 2026-11-25)."""
    from real.cluster.check import measure_bandwidth
    from real.cluster.netns import qdisc_counters
    dropped = {}
    for name, queue_s, packets in (("nic", 0.005, 1000), ("switch", None, 0),
                                   ("5ms", 0.005, 0)):
        with rc.emulated_cluster(2, "20mbit", prefix=PREFIX, queue_s=queue_s,
                                 host_queue_packets=packets) as c:
            measure_bandwidth(c, 0, 1, seconds=1.0)
            sent, dropped[name] = qdisc_counters(c.namespaces[0], c.interface)
            assert sent > 1000 and c.host_queue_packets == packets
    assert dropped["nic"] == 0 and dropped["switch"] == 0 and dropped["5ms"] > 0, dropped


@pytest.mark.root
@needs_root
def test_up_refuses_a_second_cluster_with_the_same_prefix():
    with rc.emulated_cluster(2, "50mbit", prefix=PREFIX):
        with pytest.raises(RuntimeError, match="already up"):
            rc.up(2, "50mbit", prefix=PREFIX)
        assert len(list_namespaces(PREFIX)) == 3


@pytest.mark.root
@needs_root
@pytest.mark.parametrize("bandwidth", ["50mbit", "200mbit"])
def test_measured_bandwidth_within_15_percent(bandwidth):
    """The shaper's rate, as the best of up to three 2 s TCP streams: one retransmission
    timeout (200 ms at least, docs/validation.md) costs the 1.75 s window 11%, and it is
    TCP's loss recovery at the shallow queue, not the rate, that it measures then. (A 1 s
    stream's 0.75 s window read 5% over the rate on a loaded machine: a late first read
    after the warm-up takes in what queued meanwhile at once; a longer window halves that.
    A stream short of the rate on the wire is tried again too: a sender starved of CPU by
    other work read 10% under it.) Four processes spinning at nice -10 beside the stream
    leave it at the rate (2026-11-28: 47.1-47.8 Mbit/s of goodput at 50 Mbit/s, no
    retransmission); time the hypervisor takes from the machine's cores (``steal`` in
    /proc/stat) stops the shaper's softirq and both ends alike, so a try that lost more
    than 5% of its cores' time that way is the machine's, not the link's: the test skips
    when every try was."""
    from real.cluster.check import measure_bandwidth
    asked = rc.parse_bandwidth(bandwidth)
    cpus = range(os.cpu_count())
    tries = []
    with rc.emulated_cluster(2, bandwidth, prefix=PREFIX) as c:
        while len(tries) < 3 and (not tries or tries[-1][0].goodput_bits_per_s < 0.85 * asked
                                   or tries[-1][0].wire_bits_per_s < 0.95 * asked):
            before, t0 = cpu_seconds(cpus)["steal"], time.monotonic()
            m = measure_bandwidth(c, 0, 1, seconds=2.0, port=5201 + len(tries))
            stolen = (cpu_seconds(cpus)["steal"] - before) / ((time.monotonic() - t0) * len(cpus))
            tries.append((m, stolen))
    kept = [m for m, stolen in tries if stolen <= 0.05]
    if not kept:
        pytest.skip("the hypervisor took over 5% of the machine's cores during every try: "
                    + ", ".join(f"{s:.0%}" for _, s in tries))
    m = max(kept, key=lambda t: t.goodput_bits_per_s)
    assert m.goodput_bits_per_s == pytest.approx(asked, rel=0.15)
    assert m.wire_bits_per_s == pytest.approx(asked, rel=0.05)




@pytest.mark.root
@pytest.mark.slow
@needs_root
def test_mpi_send_recv_across_namespaces_takes_the_shaped_time(tmp_path):
    script = tmp_path / "sendrecv.py"
    script.write_text(SENDRECV)
    with rc.emulated_cluster(2, "100mbit", prefix=PREFIX) as c:
        proc = subprocess.run(rc.mpirun_command(c, 2, [sys.executable, str(script)]),
                              env=os.environ | rc.mpi_env(c), capture_output=True, text=True,
                              timeout=60)
    assert proc.returncode == 0, proc.stderr
    seconds = float(proc.stdout.split("SENDRECV_S")[1].split()[0])
    payload_s = (4 << 20) * 8 / 100e6                 # 0.336 s; frames add ~4.6 %
    # Shared memory would take ~1 ms: this proves the bytes crossed the shaped link.
    assert 0.9 * payload_s < seconds < 2.0 * payload_s


@pytest.mark.root
@needs_root
def test_sigterm_during_up_leaves_nothing_behind():
    up = subprocess.Popen([sys.executable, "-m", "real.cluster", "up", "--prefix", PREFIX,
                           "--hosts", "60"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, env=os.environ | {"PYTHONPATH": str(REPO_ROOT)})
    deadline = time.monotonic() + 20
    while len(list_namespaces(PREFIX)) < 3 and up.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    up.send_signal(signal.SIGTERM)
    _, err = up.communicate(timeout=30)
    assert up.returncode == 128 + signal.SIGTERM, err
    assert list_namespaces(PREFIX) == []
    assert rc.read_state(PREFIX) is None


ALLREDUCE = textwrap.dedent("""
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    x = torch.full((1000,), float(dist.get_rank() + 1))
    dist.all_reduce(x)
    print("ALLREDUCE", x[0].item(), flush=True)
    dist.destroy_process_group()
""")


@pytest.mark.root
@pytest.mark.slow
@needs_root
def test_gloo_all_reduce_across_namespaces(tmp_path):
    script = tmp_path / "allreduce.py"
    script.write_text(ALLREDUCE)
    with rc.emulated_cluster(2, "100mbit", prefix=PREFIX) as c:
        ranks = [subprocess.Popen(rc.netns_command(c, r, [sys.executable, str(script)]),
                                  env=os.environ | rc.torch_env(c, r, 2, 29531)
                                  | {"OMP_NUM_THREADS": "1"},
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for r in range(2)]
        try:
            outs = [p.communicate(timeout=60) for p in ranks]
        finally:
            for p in ranks:
                p.kill()
    assert [p.returncode for p in ranks] == [0, 0], outs[0][1][-2000:]
    assert all("ALLREDUCE 3.0" in out for out, _ in outs)
