"""The testbed's self-checks (``real.records.testbed``, ``real.cluster.linkstats``) on synthetic
figures: each check passes what is faithful and fails, with its reason, what is not."""
from __future__ import annotations

import os
import socket
import struct
import time

import pytest

from real.records import testbed
from real.cluster import linkstats
from contracts import record

STAT = """cpu  10 0 10 10 0 0 0 0 0 0
cpu0 100 0 50 800 0 5 20 0 0 0
cpu1 300 0 60 600 0 0 40 0 0 0
intr 1 2 3
"""


def test_cpu_seconds_sums_the_fields_of_the_cpus_asked():
    both = testbed.cpu_seconds([0, 1], STAT)
    one = testbed.cpu_seconds([1], STAT)
    hz = testbed.USER_HZ
    assert both["user"] == pytest.approx(400 / hz) and both["softirq"] == pytest.approx(60 / hz)
    assert one["system"] == pytest.approx(60 / hz) and one["irq"] == 0


def probe(wait_s=0.0, wall_s=10.0, cpus=(0, 1), sleeps=None, sent=0):
    cpu = dict.fromkeys(testbed.CPU_FIELDS, 0.0) | {"user": 8.0, "system": 2.0, "softirq": 1.0,
                                                     "idle": 9.0}
    return {"cpus": list(cpus), "wall_s": wall_s, "cpu_s": cpu, "user_s": 4.0, "system_s": 1.0,
            "max_thread_wait_s": wait_s, "max_core_wait_s": wait_s, "tcp_sent_bytes": sent, "tcp_received_bytes": 0,
            "sleeps": sleeps}


LOAD = [{"machine": "m"}, {"machine": "m"}]


def test_cpu_check_fails_a_rank_that_waited_for_a_core_beyond_the_limit():
    ok = testbed.cpu_check(LOAD, [probe(0.4), probe(0.1)], judged=True)
    bad = testbed.cpu_check(LOAD, [probe(0.1), probe(0.6)], judged=True)
    assert ok["verdict"] == "pass"
    assert bad["verdict"] == "fail" and "rank 1" in bad["why"] and "6%" in bad["why"]
    m = bad["machines"][0]
    assert m["cores"] == 2 and m["busy_cores"] == pytest.approx(1.1)
    assert m["kernel_irq_cores"] == pytest.approx(0.1) and m["ranks_user_cores"] == 0.8


def test_only_waits_longer_than_the_wake_up_path_count_as_waits_for_a_core(tmp_path):
    """schedstat per thread: run ns, wait ns, slices. Thread 1 waited 30 ms over 10 slices
    (3 ms each: for a core), thread 2 90 ms over 9000 (10 us each: the wake-up path)."""
    for tid, stat in ((1, "5 30000000 10"), (2, "5 90000000 9000")):
        (tmp_path / str(tid)).mkdir()
        (tmp_path / str(tid) / "schedstat").write_text(stat + "\n")
    waits = testbed._thread_waits(str(tmp_path))
    assert waits == {1: (30_000_000, 10), 2: (90_000_000, 9000)}
    core = [w for w, n in waits.values() if w > n * testbed.WAKEUP_WAIT_S * 1e9]
    assert core == [30_000_000]


def test_cpu_check_leaves_a_real_run_off_the_cluster_unjudged():
    c = testbed.cpu_check(LOAD, [probe(5.0), probe(5.0)], judged=False)
    assert c["verdict"] == "not judged" and c["machines"][0]["max_wait_share"] == 0.5
    assert not c["shared_cores"]


def test_cpu_check_says_when_a_machine_held_more_ranks_than_cores():
    """Three ranks on two cores (the parameter server at P = 2 on the 2-core VM): the
    record says their compute was time-shared, judged or not."""
    load = LOAD + [{"machine": "m"}]
    c = testbed.cpu_check(load, [probe(), probe(), probe()], judged=False)
    assert c["shared_cores"] and "3 ranks on 2 core(s)" in c["why"]
    assert testbed.cpu_check(load, [probe(), probe(), probe()], judged=True)["shared_cores"]


def sleeps(late_ms, asked_ms=10.0):
    """A sleeper's summary (as ``real.phantom.sleep.Sleeper.summary`` writes it, less the
    carry's fields) of sleeps of ``asked_ms`` that woke ``late_ms`` late."""
    import numpy as np
    late = np.array(late_ms) / 1e3
    return {"sleeps": len(late), "p50_s": float(np.quantile(late, 0.5)),
            "p99_s": float(np.quantile(late, 0.99)), "max_s": float(late.max()),
            "late_total_s": float(late.sum()), "asked_total_s": len(late) * asked_ms / 1e3}


def test_lateness_check_judges_how_far_behind_the_latest_rank_was_at_each_step():
    """A phantom rank's sleeps carry their lateness to the next sleep: only its debt as
    backward ends (``behind_s``, per step) can reach a step, and a synchronising call waits
    for the largest. 10 s windows: 100 steps 0.1 ms behind are 0.1%; one rank 3 ms behind
    at every step 3%; a tail of 3 ms sleeps inside the chain is only a figure."""
    quiet = sleeps([0.05] * 99 + [0.2]) | {"compute_s": 1.0, "behind_s": [1e-4] * 100}
    tail = sleeps([0.05] * 90 + [3.0] * 10) | {"compute_s": 1.0, "behind_s": [1e-4] * 100}
    late = quiet | {"behind_s": [3e-3] * 100}
    check = lambda a, b: testbed.lateness_check([probe(sleeps=a), probe(sleeps=b)])
    ok = check(quiet, quiet)
    assert ok["verdict"] == "pass" and ok["behind_share"] == pytest.approx(1e-3)
    assert check(tail, quiet)["verdict"] == "pass"
    bad = check(quiet, late)
    assert bad["verdict"] == "fail" and "3.0% of the run" in bad["why"]
    assert bad["per_rank"][1]["behind_max_s"] == 3e-3 and "behind_s" not in bad["per_rank"][1]
    # the largest at each step, not the sum: two ranks late at alternate steps
    odd = quiet | {"behind_s": [3e-3, 0.0] * 50}
    even = quiet | {"behind_s": [0.0, 3e-3] * 50}
    assert check(odd, even)["behind_share"] == pytest.approx(0.03)
    slow = sleeps([0.9] * 100, asked_ms=10.0)      # a sleeper that does not carry: mean 9%
    assert check(slow, quiet)["verdict"] == "fail" and "9.0%" in check(slow, quiet)["why"]
    assert testbed.lateness_check([probe(), probe()])["verdict"] == "not judged"


def test_bytes_check_fails_a_rank_that_sent_too_little_or_too_much():
    expect = [1000.0, 2000.0]
    ok = testbed.bytes_check([probe(sent=1010), probe(sent=2100)], expect)
    low = testbed.bytes_check([probe(sent=1010), probe(sent=1000)], expect)
    high = testbed.bytes_check([probe(sent=1300), probe(sent=2000)], expect)
    assert ok["verdict"] == "pass" and ok["ratio"] == [1.01, 1.05]
    assert low["verdict"] == "fail" and "rank 1" in low["why"]
    assert high["verdict"] == "fail" and "rank 0" in high["why"]
    assert testbed.bytes_check([probe()], None)["verdict"] == "not judged"
    headers = testbed.bytes_check([probe(sent=1100 + 8192), probe(sent=2000)], expect,
                                  steps=[2, 2])
    assert headers["verdict"] == "pass"            # 4 KiB of headers a step on top
    assert testbed.bytes_check([probe(sent=5), probe()], [None, 0.0])["verdict"] == "pass"


def qdisc(t_bytes, backlog, drops=0):
    return {"bytes": t_bytes, "packets": t_bytes // 1000, "drops": drops, "overlimits": 0,
            "backlog": backlog}


def test_links_achieved_rate_is_measured_where_an_interval_s_worth_was_queued():
    rate = 8e6                                    # 1 MB/s: 500 kB a half-second interval
    shapers = [("h0->switch", "ns0", "psgd0")]
    # 0-1 s: 600 kB queued at each sample, full rate; 1-2 s: 300 kB queued (too little to
    # keep the link busy: not judged) and idle; 2-3 s: 500 kB queued, 80% of the rate
    series = [(0.0, 0, 600_000), (0.5, 500_000, 600_000), (1.0, 1_000_000, 300_000),
              (2.0, 1_000_000, 0), (2.5, 1_000_000, 500_000), (3.0, 1_400_000, 500_000)]
    samples = [(t, {("ns0", "psgd0"): qdisc(b, q, drops=int(t))}) for t, b, q in series]
    row, = linkstats.summarize(samples, shapers, rate)
    assert row["bytes"] == 1_400_000 and row["drops"] == 3
    assert row["backlogged_s"] == 1.5
    assert row["backlogged_rate_share"] == pytest.approx(1.4e6 / 1.5 / 1e6, abs=1e-4)
    starved = linkstats.summarize(samples[3:], shapers, rate)
    assert starved[0]["backlogged_rate_share"] == 0.8
    check = testbed.links_check(starved)
    assert check["verdict"] == "fail" and "h0->switch sent 80%" in check["why"]
    assert testbed.links_check(linkstats.summarize(samples[:3], shapers, rate))["verdict"] == "pass"
    assert testbed.links_check(None)["verdict"] == "not judged"


def test_a_netlink_qdisc_dump_is_parsed():
    """One RTM_NEWQDISC message as the kernel writes it: tcmsg, TCA_KIND, TCA_STATS2."""
    def attr(kind, payload):
        raw = struct.pack("=HH", 4 + len(payload), kind) + payload
        return raw + b"\0" * (-len(raw) % 4)
    stats2 = attr(linkstats.TCA_STATS_BASIC, struct.pack("=QI", 123456, 789) + b"\0" * 4) \
        + attr(linkstats.TCA_STATS_QUEUE, struct.pack("=IIIII", 2, 3000, 17, 0, 99))
    body = struct.pack("=BBHiIII", 0, 0, 0, 5, 0x10000, linkstats.TC_H_ROOT, 1) \
        + attr(linkstats.TCA_KIND, b"tbf\0") + attr(linkstats.TCA_STATS2 | 0x8000, stats2)
    msg = struct.pack("=IHHII", 16 + len(body), linkstats.RTM_NEWQDISC, 2, 1, 0) + body
    child = msg[:16 + 12] + struct.pack("=I", 0x10001) + msg[16 + 16:]     # parent 1:1
    done = struct.pack("=IHHII", 20, linkstats.NLMSG_DONE, 2, 1, 0) + b"\0" * 4
    qs, ended = linkstats.parse_qdiscs(msg + child + done)
    assert ended and len(qs) == 1
    assert qs[0] == {"ifindex": 5, "kind": "tbf", "bytes": 123456, "packets": 789,
                     "backlog": 3000, "drops": 17, "overlimits": 99}


def test_judge_marks_a_run_that_fails_any_check_and_says_why():
    ok = [probe(0.1, sleeps=sleeps([0.05] * 100)), probe(0.1, sleeps=sleeps([0.05] * 100))]
    bound, tb = testbed.judge(LOAD, ok, phantom=True, emulated_cluster=False)
    assert not bound and tb["reasons"] == [] and tb["thresholds"] == testbed.THRESHOLDS
    busy = [probe(2.0, sleeps=sleeps([2.0] * 100)), ok[1]]
    bound, tb = testbed.judge(LOAD, busy, phantom=True, emulated_cluster=False)
    assert bound and [r.split(":")[0] for r in tb["reasons"]] == ["cpu", "sleep_lateness"]
    assert testbed.summary(tb).startswith("cpu: rank 0 waited for a core 20%")
    assert record.is_testbed_bound({"testbed_bound": True})
    assert not record.is_testbed_bound({})


def test_tcp_bytes_reads_what_a_socket_of_this_process_sent():
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
        before = testbed.tcp_bytes()
        client.sendall(b"x" * 100_000)
        got = 0
        while got < 100_000:
            got += len(peer.recv(65536))
        deadline = time.monotonic() + 5
        while True:                     # wait for the ACKs: bytes_acked counts acked bytes
            sent, received = testbed.tcp_delta(before, testbed.tcp_bytes())
            if sent >= 100_000 or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        client.close()
        peer.close()
    assert sent == 100_000 and received == 100_000


def write_record(folder, run_id, **marks):
    rec = record.RunRecord(run_id=run_id, config={}, environment={},
                           timings={"train_wall_s": 1.0}, **marks)
    return record.write(rec, folder)


def test_the_sweep_runs_a_testbed_bound_point_again(tmp_path, monkeypatch):
    from real.launch import sweep
    assert sweep.retry_mark(write_record(tmp_path, "a", testbed_bound=True)) == "testbed-bound"
    assert sweep.retry_mark(write_record(tmp_path, "b", disturbed=True,
                                         testbed_bound=True)) == "disturbed"
    assert sweep.retry_mark(write_record(tmp_path, "c")) is None
    args = sweep.build_parser().parse_args(["--schemes", "allreduce", "--workers", "2-2",
                                            "--out", str(tmp_path / "s"), "--quiet-wait", "1",
                                            "--retry-testbed-bound", "2"])
    marks = iter(["testbed-bound", "testbed-bound", "testbed-bound", None])
    calls = []
    monkeypatch.setattr(sweep, "run_one", lambda *a: calls.append(a[1:3]) or next(marks))
    monkeypatch.setattr(sweep, "_wait_for_quiet", lambda s: None)
    sweep.run_points(args, [], None, [("allreduce", 2, 0)], {("allreduce", 2, 0): {}})
    assert calls == [("allreduce", 2)] * 3          # the first run and two retries
    assert sweep.retries(args, "disturbed") == 0 and sweep.retries(args, None) == 0


class Request:
    """An MPI request that completes at its n-th Test."""

    def __init__(self, n):
        self.left = n

    def Test(self, status=None):
        self.left -= 1
        return self.left <= 0


def test_a_sleeping_wait_backs_off_to_its_longest_sleep(monkeypatch):
    from real.launch import dist
    naps = []
    monkeypatch.setattr(dist.time, "sleep", naps.append)
    dist.wait(Request(8), 10.0, "test", poll_s=0.001)
    assert naps == [50e-6, 100e-6, 200e-6, 400e-6, 800e-6, 0.001, 0.001]
    naps.clear()
    monkeypatch.delenv(dist.WAIT_SLEEP_ENV, raising=False)
    dist.wait(Request(5), 10.0, "test")                     # spins: no sleep
    assert naps == []
    monkeypatch.setenv(dist.WAIT_SLEEP_ENV, "0.0002")
    dist.wait(Request(4), 10.0, "test")
    assert naps == [50e-6, 100e-6, 0.0002]


def test_sleeping_waits_keep_what_the_user_set():
    from real.launch.dist import sleeping_waits
    env = {"MPIR_CVAR_ENABLE_HEAVY_YIELD": "0"}
    assert sleeping_waits(env) == {"PSGD_WAIT_SLEEP_S": "0.001"}
    assert env["MPIR_CVAR_ENABLE_HEAVY_YIELD"] == "0"


def test_expected_bytes_follow_the_scheme_the_hosts_and_the_steps():
    """gloo's ring allreduce per tensor at P = 2 on two hosts: each rank sends each
    tensor once a step, in two segments a phase, each framed by three 48-byte preambles;
    a parameter server's rank 0 sends the weights to each worker once a step and once at
    the start; a scheme without messages is not judged."""
    import torch

    from real.records import wire
    model = torch.nn.Linear(10, 3)                          # 30 + 3 float32
    rows = [{"rank": r, "batch_size": 32 if it >= 0 else 0} for r in (0, 1)
            for it in (-1, 0, 1, 2)]
    rec = record.RunRecord(run_id="x", config={"algorithm": "allreduce"},
                           environment={"hosts": [{"host": "a", "ranks": [0]},
                                                  {"host": "b", "ranks": [1]}]})
    # 4 segments a tensor: the weight's of 8 elements (the last 6), the bias's of one (the
    # last empty): each rank sends and receives 4 and 3 of them, 48 bytes x 3 a message
    assert testbed.expected_tcp_bytes(rec, model, rows) == [3 * (33 * 4 + 7 * 144)] * 2
    rec.config = {"algorithm": "ps_sync"}
    rows = [{"rank": r, "batch_size": 32} for r in (1, 1)]
    msg = wire.PS_HEADER_BYTES + 33 * 4
    assert testbed.expected_tcp_bytes(rec, model, rows) == [3 * msg, 2 * msg]
    rec.config = {"algorithm": "serial"}
    assert testbed.expected_tcp_bytes(rec, model, rows) is None


SPIN = "import os\nos.sched_setaffinity(0, {0})\nwhile True:\n    pass\n"


def test_a_thread_that_shares_its_core_with_a_busy_loop_is_seen_waiting_for_it():
    """This process and a busy loop pinned to CPU 0, both runnable: the scheduler shares
    the core about half and half, so the probe sees this thread wait runnable for the
    core far beyond the limit, in slices longer than the wake-up path."""
    import subprocess
    import sys
    import time

    cpus = os.sched_getaffinity(0)
    spin = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        os.sched_setaffinity(0, {0})
        time.sleep(0.3)                               # the loop is on CPU 0
        probe = testbed.RankProbe().start()
        end = time.monotonic() + 0.6
        while time.monotonic() < end:
            pass
        figures = probe.stop()
    finally:
        os.sched_setaffinity(0, cpus)
        spin.kill()
        spin.wait()
    assert figures["cpus"] == [0]
    assert figures["max_core_wait_s"] / figures["wall_s"] > 2 * testbed.THRESHOLDS["cpu_wait_share"]


def test_a_phantom_run_on_one_core_records_its_testbed_checks(tmp_path):
    """Two phantom ranks pinned to CPU 0: the record carries the machine's one core, each
    rank's sleeps and the bytes it put on TCP (gloo's ring on loopback), which are what
    the scheme sends; the run is marked testbed-bound exactly when a check failed, and
    says so on stderr. (Whether the scheduler made a rank wait is the machine's business:
    the waiting itself is checked above, deterministically.)"""
    import sys

    from tests.conftest import MPIRUN, run_cmd
    from tests.test_phantom import workload_file
    done = run_cmd(["taskset", "-c", "0", MPIRUN, "-n", "2", sys.executable, "-m",
                    "real.train", "--schemes", "allreduce", "--compute", "phantom",
                    "--workload", str(workload_file(tmp_path)), "--dataset", "synthetic",
                    "--train-size", "512", "--batch-size", "32", "--run-id", "busy",
                    "--out", str(tmp_path / "runs")], timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    rec = record.read(tmp_path / "runs" / "busy")
    checks = rec["testbed"]["checks"]
    failed = any(c.get("verdict") == "fail" for c in checks.values())
    assert rec["testbed_bound"] is failed
    assert ("testbed-bound:" in done.stderr) is failed
    assert checks["cpu"]["machines"][0]["cores"] == 1
    assert checks["sleep_lateness"]["per_rank"][0]["sleeps"] > 0
    assert checks["bytes"]["verdict"] == "pass", checks["bytes"]


def test_set_up_runs_before_the_barrier_that_starts_training_and_t_start_after_it():
    """The scheme's preparation, the testbed probe (rank 0's samples the shapers: 10-30 ms on
    the emulated cluster) and the load meter (5-55 ms a rank on two shared cores) are built
    before the barrier that starts training, so that every rank leaves it together and its
    window (t_start) begins at the barrier's exit; built after it, each started its rank's
    training late, inside the run's window and in no row (the parameter server's first w
    waited for it). The meters' windows open after a first barrier: no rank's set-up is in
    another's window as another process's CPU."""
    from types import SimpleNamespace

    from real.launch.runner import start_training
    events = []

    def made(name):
        def make(*args, **kwargs):
            events.append((name, *args, *kwargs.values()))
            return name
        return make

    def opened(name):
        class Meter:
            def __init__(self, *args, **kwargs):
                events.append((name, *args, *kwargs.values()))

            def start(self):
                events.append((f"{name} window",))
                return self
        return Meter

    comm = SimpleNamespace(barrier=lambda: events.append(("barrier",)))
    for is_root in (True, False):
        events.clear()
        meters, train, t_start = start_training(
            comm, SimpleNamespace(is_root=is_root), 3, made("prepare"),
            meters=(opened("probe"), made("usage"), opened("load")),
            clock=lambda: events.append(("clock",)) or 12.5)
        # the meters' windows open once every rank's set-up is done, before the start
        assert events == [("prepare",), ("probe", is_root), ("load", 3), ("barrier",),
                          ("probe window",), ("usage",), ("load window",), ("barrier",),
                          ("clock",)]
        assert (meters.usage, train, t_start) == ("usage", "prepare", 12.5)
        assert events.count(("probe window",)) == 1


def test_a_scheme_is_prepared_before_its_training_is_called(monkeypatch):
    """``schemes.prepared`` runs a module's ``prepare`` at once (the runner calls it before
    the start barrier) and its training only when called; a module without one trains
    through ``train``. The parameter-server and async_avg modules have one."""
    from types import SimpleNamespace

    from real import schemes
    calls = []
    with_prepare = SimpleNamespace(prepare=lambda ctx: calls.append(("prepare", ctx))
                                   or (lambda: calls.append(("train",)) or [1.0]))
    plain = SimpleNamespace(train=lambda ctx: calls.append(("plain", ctx)) or [2.0])
    monkeypatch.setattr(schemes, "get", {"a": with_prepare, "b": plain}.__getitem__)
    run = schemes.prepared("a", "ctx")
    assert calls == [("prepare", "ctx")]
    assert run() == [1.0] and calls[-1] == ("train",)
    calls.clear()
    run = schemes.prepared("b", "ctx")
    assert calls == [] and run() == [2.0] and calls == [("plain", "ctx")]
    monkeypatch.undo()
    for name in ("ps_sync", "ps_async", "async_avg"):
        assert callable(getattr(schemes.get(name), "prepare", None)), name
