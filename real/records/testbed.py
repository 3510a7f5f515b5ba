"""Did the testbed stay faithful? Four self-checks every run's record carries.

A run measures the system it stands for only while the machine that runs it is
not the bottleneck. Simulators validated at scale without the hardware check
this in every run (Mininet-HiFi's CPU and link invariants; Handigol et al.,
CoNEXT 2012): here each rank measures, over its training window (the barrier
before training to the barrier after it, as ``real.records.load``'s meter does),

* **CPU**: its threads' time runnable without a core (``/proc/<pid>/task/*/schedstat``,
  from ``real.records.load.RankMeter``), its own user and system time (``getrusage``) and,
  per machine, the kernel's time on the cores the ranks may use (``/proc/stat``:
  system, irq and softirq, where the emulated links' packets are moved), against
  those cores (the ranks' CPU affinity);
* **sleep lateness** (phantom runs): how late each compute sleep woke (the phantom's
  ``real.phantom.sleep.Sleeper``, whose ``summary`` ``RankProbe.stop`` takes);
* **bytes on the wire**: the TCP payload its sockets sent (``TCP_INFO``'s
  ``tcpi_bytes_acked`` of every TCP socket the process holds), against what the
  scheme should send (``real.records.wire.tcp_bytes``);
* **link rates** (the emulated cluster): each shaper's bytes, packets and drops, and
  the rate it sent at while it had a backlog, against its configured rate
  (``real.cluster.linkstats``, rank 0 samples every shaper).

``judge`` turns them into the record's ``testbed`` section and the verdict
``testbed_bound``: a run that fails any check is marked, with the reasons;
comparisons leave it out as they leave out ``disturbed`` runs, and a sweep can run it
again (``real.sweep --retry-testbed-bound``). The thresholds (``THRESHOLDS``) and why:

* ``cpu_wait_share`` 5%: a rank whose threads were runnable without a core for more than
  5% of the window may have been slowed by that much: a step waits for it, a message
  it should send waits for it. 5% is the agreement phantom runs are held to against
  real ones. Judged for phantom runs and for any run on the emulated cluster (hosts
  that stand for machines with cores of their own share this machine's); a real run on
  one host or a real cluster shares its cores by design (the simulator models that
  sharing) and ``disturbed`` judges other processes' load there. Either way the check
  says ``shared_cores`` where a machine held more ranks than cores the ranks could use:
  such a real run's compute is time-shared, which a phantom (sleeps that need no core)
  does not reproduce, so ``real.phantom_check`` judges no phantom against it.
* ``late_mean_share`` 5%: sleeps that woke late by more than 5% of their length on
  average stretched the phantom compute by that much (judged for a sleeper that does not
  take each sleep's lateness off the next; the phantom's does, and sets its thread's timer
  slack to 1 ns while it sleeps: Linux's default, 50 us, is 5% of a 1 ms sleep by itself).
* ``behind_share`` 2%: the phantom's sleeper pays each sleep's lateness back with the
  next sleep, so a late wake-up inside the chain stretches nothing; what a step can
  measure is how far behind its plan a rank still is when its compute hands over to a
  synchronising call (the sleeper's debt then), and the call waits for the latest rank.
  Summed over the steps (the largest rank's at each) against the run's time. Measured
  (``benchmarks/sleep_tail.py``, docs/cluster.md "Does a late sleep stretch the step?"):
  with 2-32 phantom ranks of the CNN on two cores the latest rank's compute overran its
  plan by that debt plus 0.03-0.09 ms while single sleeps woke up to 0.3-1.0 ms late at
  p99, so the p99 (1.5 ms, the former limit) judged a tail that never reached a step.
  2% is the part of the validation's 5% goal the testbed may take.
* ``bytes_low`` / ``bytes_high`` 0.95 / 1.15, plus ``header_bytes_per_step`` 4 KiB for
  each step of the rank (the server's: each of its workers' steps): below, a rank sent
  less than its scheme must (a message missing); above, more than the scheme plus the
  headers the count leaves out (MPICH's) and the run's control messages (barriers, the
  rendezvous store) explain. gloo's framing is in the count (``real.records.wire``): the
  CNN's per-tensor allreduce at P = 2-16 on the emulated cluster sent within 500 B of it
  over a run.
* ``link_rate_min`` 90%: a shaper that has an interval's worth of traffic queued sends
  at its rate unless the kernel that runs it is short of CPU (a bulk stream at 20 Mbit/s
  on an idle machine: 99.9%); under 90% the links were the machine's, not the network
  asked for.

Imports: the standard library (socket, resource, os); real.cluster.linkstats for the links,
real.records.wire and real.schemes for the bytes a scheme sends.
"""
from __future__ import annotations

import os
import resource
import socket
import struct
import threading
import time

THRESHOLDS = {"cpu_wait_share": 0.05, "late_mean_share": 0.05, "behind_share": 0.02,
              "bytes_low": 0.95, "bytes_high": 1.15, "header_bytes_per_step": 4096, "link_rate_min": 0.90}
CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
USER_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


# ------------------------------------------------------------------ measuring (rank side)

def cpu_seconds(cpus, stat_text: str | None = None) -> dict[str, float] | None:
    """Seconds each of ``CPU_FIELDS`` took since boot, summed over ``cpus`` (per-CPU
    lines of /proc/stat); None where it cannot be read."""
    try:
        text = stat_text if stat_text is not None else open("/proc/stat").read()
    except OSError:
        return None
    want = {f"cpu{c}" for c in cpus}
    out = dict.fromkeys(CPU_FIELDS, 0.0)
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] in want:
            for name, value in zip(CPU_FIELDS, parts[1:]):
                out[name] += int(value) / USER_HZ
    return out


METER_THREADS = ("load-meter", "link-sampler", "iteration-rows")  # ours (real.records.load, real.records.timing):
                                                # their waits delay no message
# A thread woken onto an idle core waits only for the wake-up path (tens of us: the
# sleeps' median lateness on the idle VM is 25-70 us, timer included); one that waits
# for another thread's slice waits a good part of EEVDF's 1.5 ms. A thread's waits count
# as waits for a core when they average more than this per time it ran.
WAKEUP_WAIT_S = 0.0002
TCP_INFO_BYTES_ACKED = 120      # offsets in struct tcp_info (linux/tcp.h): __u64 tcpi_bytes_acked
TCP_INFO_BYTES_RECEIVED = 128   # __u64 tcpi_bytes_received
TCP_INFO_LEN = 136


def tcp_bytes(fd_dir: str = "/proc/self/fd") -> dict[tuple[int, str], tuple[int, int]]:
    """(fd, socket inode) -> (payload bytes sent and acknowledged, received) of every TCP
    socket this process holds (MPICH's libfabric and gloo open theirs in the process)."""
    out = {}
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return out
    for name in fds:
        try:
            target = os.readlink(f"{fd_dir}/{name}")
        except OSError:
            continue
        if not target.startswith("socket:"):
            continue
        try:
            with socket.socket(fileno=os.dup(int(name))) as s:
                if s.type != socket.SOCK_STREAM or s.family not in (socket.AF_INET,
                                                                    socket.AF_INET6):
                    continue
                info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_LEN)
        except OSError:
            continue
        if len(info) >= TCP_INFO_LEN:
            acked, received = struct.unpack_from("=QQ", info, TCP_INFO_BYTES_ACKED)
            out[(int(name), target)] = (acked, received)
    return out


def tcp_delta(before: dict, after: dict) -> tuple[int, int]:
    """Bytes sent and received between two ``tcp_bytes`` readings (a socket opened in
    between counts from zero)."""
    sent = sum(a[0] - before.get(k, (0, 0))[0] for k, a in after.items())
    received = sum(a[1] - before.get(k, (0, 0))[1] for k, a in after.items())
    return max(0, sent), max(0, received)


class RankProbe:
    """One rank's testbed figures over its training window; with ``sample_links``, on the
    emulated cluster (``PSGD_CLUSTER``, set by ``real.sweep --cluster``), also every
    shaper's (``real.cluster.linkstats``: one rank does it, rank 0)."""

    def __init__(self, sample_links: bool = False):
        """Built, it has its shapers' handles and their first sample (rank 0 on the emulated
        cluster: 10-30 ms at 3-9 namespaces); ``start()`` opens its window."""
        try:
            self.cpus = sorted(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            self.cpus = list(range(os.cpu_count() or 1))
        self._links = None
        if sample_links and os.environ.get("PSGD_CLUSTER"):
            import json

            from real.cluster import linkstats
            self._links = linkstats.start(json.loads(os.environ["PSGD_CLUSTER"]))

    def start(self) -> RankProbe:
        """Open the window: the figures from now on (the shapers' from their first sample)."""
        self._t0 = time.monotonic()
        self._cpu0 = cpu_seconds(self.cpus)
        self._ru0 = _rusage()
        self._tcp0 = tcp_bytes()
        self._threads0 = _thread_waits()
        return self

    def stop(self, sleeps=None) -> dict:
        """This rank's figures; ``sleeps``: anything with a ``summary()`` of its sleeps
        (``sleeps``, ``p50_s``, ``p99_s``, ``max_s``, ``late_total_s``, ``asked_total_s``)."""
        wall = max(time.monotonic() - self._t0, 1e-9)
        cpu1, ru1 = cpu_seconds(self.cpus), _rusage()
        sent, received = tcp_delta(self._tcp0, tcp_bytes())
        meters = {t.native_id for t in threading.enumerate() if t.name in METER_THREADS}
        waits = {tid: (w - self._threads0.get(tid, (0, 0))[0],
                       n - self._threads0.get(tid, (0, 0))[1])
                 for tid, (w, n) in _thread_waits().items() if tid not in meters}
        for_core = [w for w, n in waits.values() if w > n * WAKEUP_WAIT_S * 1e9]
        cpu = None if cpu1 is None or self._cpu0 is None else \
            {k: cpu1[k] - self._cpu0[k] for k in CPU_FIELDS}
        return {"cpus": self.cpus, "wall_s": wall, "cpu_s": cpu,
                "user_s": ru1[0] - self._ru0[0], "system_s": ru1[1] - self._ru0[1],
                "max_thread_wait_s": max((w for w, _ in waits.values()), default=0) / 1e9,
                "max_core_wait_s": max(for_core, default=0) / 1e9,
                "thread_waits": sorted(([round(w / 1e9, 6), n] for w, n in waits.values()),
                                       reverse=True),
                "tcp_sent_bytes": sent, "tcp_received_bytes": received,
                "sleeps": sleeps.summary() if sleeps is not None else None,
                "links": self._links.stop() if self._links is not None else None}


def _thread_waits(task_dir: str = "/proc/self/task") -> dict[int, tuple[int, int]]:
    """Thread id -> (ns it has waited runnable for a core, times it was put on a core),
    for this process's threads (``schedstat``: run ns, wait ns, timeslices)."""
    out = {}
    try:
        tids = os.listdir(task_dir)
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"{task_dir}/{tid}/schedstat") as f:
                _, wait, slices = f.read().split()[:3]
            out[int(tid)] = (int(wait), int(slices))
        except (OSError, ValueError):
            continue
    return out


def _rusage() -> tuple[float, float]:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), \
        resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + kids.ru_utime, me.ru_stime + kids.ru_stime


# ------------------------------------------------------------------ judging (rank 0)

def _check(verdict: str, why: str, **figures) -> dict:
    return {"verdict": verdict, "why": why, **figures}


def cpu_check(load: list[dict], probes: list[dict], judged: bool,
              limits: dict = THRESHOLDS) -> dict:
    """Per machine: cores the ranks could use, the ranks' and the kernel's CPU on them
    (cores), and the largest share of its window a thread of a rank waited runnable for
    a core (a rank's threads are the model's compute, MPI's progress, gloo's workers:
    the one that waited most is the one whose delay can reach the step; a thread whose
    waits average less than ``WAKEUP_WAIT_S`` per time it ran waited for the wake-up
    path, which a real host has too, and is not counted).
    ``load``: every rank's ``real.records.load.RankMeter.stop()``; ``probes``:
    ``RankProbe.stop()``."""
    machines = []
    for machine in dict.fromkeys(r["machine"] for r in load):
        ranks = [i for i, r in enumerate(load) if r["machine"] == machine]
        wall = max(probes[i]["wall_s"] for i in ranks)
        cpus = sorted({c for i in ranks for c in probes[i]["cpus"]})
        stat = max((probes[i]["cpu_s"] for i in ranks if probes[i]["cpu_s"]),
                   key=lambda c: sum(c.values()), default=None)
        waits = {i: probes[i]["max_core_wait_s"] / probes[i]["wall_s"] for i in ranks}
        worst = max(waits, key=waits.get)
        m = {"machine": machine, "ranks": ranks, "cores": len(cpus),
             "ranks_user_cores": sum(probes[i]["user_s"] for i in ranks) / wall,
             "ranks_system_cores": sum(probes[i]["system_s"] for i in ranks) / wall,
             "max_wait_share": waits[worst], "max_wait_rank": worst}
        if stat:
            m.update(busy_cores=sum(v for k, v in stat.items() if k not in ("idle", "iowait"))
                     / wall, system_cores=stat["system"] / wall,
                     kernel_irq_cores=(stat["irq"] + stat["softirq"]) / wall)
        machines.append({k: round(v, 4) if isinstance(v, float) else v for k, v in m.items()})
    worst = max(machines, key=lambda m: m["max_wait_share"])
    crowded = [m for m in machines if len(m["ranks"]) > m["cores"]]
    figures = {"machines": machines, "shared_cores": bool(crowded),
               "thread_waits": [p.get("thread_waits") for p in probes]}
    if not judged:
        return _check("not judged", "a real run off the emulated cluster shares its cores by "
                      "design (modelled); `disturbed` judges other load" + "".join(
                          f"; {len(m['ranks'])} ranks on {m['cores']} core(s): their compute "
                          "is time-shared, which a phantom (sleeps that need no core) does "
                          "not reproduce" for m in crowded[:1]), **figures)
    if worst["max_wait_share"] > limits["cpu_wait_share"]:
        return _check("fail", f"rank {worst['max_wait_rank']} waited for a core "
                      f"{worst['max_wait_share']:.0%} of its window (limit "
                      f"{limits['cpu_wait_share']:.0%}) on {worst['cores']} core(s), busy "
                      f"{worst.get('busy_cores', float('nan')):.2f}, kernel irq/softirq "
                      f"{worst.get('kernel_irq_cores', float('nan')):.2f}", **figures)
    return _check("pass", f"no rank waited for a core more than "
                  f"{limits['cpu_wait_share']:.0%} of its window", **figures)


def lateness_check(probes: list[dict], limits: dict = THRESHOLDS) -> dict:
    """Phantom sleeps: how far behind its plan the latest rank was as each step's compute
    handed over to communication, summed over the steps, against the run's time
    (``behind_share``; the phantom's ``PhantomCompute.summary`` gives each rank's
    ``behind_s`` per step); for a sleeper that does not carry lateness to the next sleep,
    the mean lateness against the sleeps' length. p50 / p99 / max per rank are kept as
    figures: a late sleep inside the chain is paid back by the next one and stretches
    nothing (docs/cluster.md, "Does a late sleep stretch the step?")."""
    per_rank = [dict(p["sleeps"], rank=i) for i, p in enumerate(probes) if p.get("sleeps")]
    if not per_rank:
        return _check("not judged", "no phantom sleeps (a real run)")
    behind = []
    for r in per_rank:
        b = r.pop("behind_s", None)
        if b is not None:
            behind.append(b)
            r["behind_mean_s"] = sum(b) / len(b) if b else 0.0
            r["behind_max_s"] = max(b, default=0.0)
        carried = "compute_s" in r
        r["late_mean_share"] = 0.0 if carried or r["asked_total_s"] <= 0 else \
            r["late_total_s"] / r["asked_total_s"]
    worst99 = max(per_rank, key=lambda r: r["p99_s"])
    worst_mean = max(per_rank, key=lambda r: r["late_mean_share"])
    wall = max((p["wall_s"] for p in probes if p.get("sleeps")), default=0.0)
    steps = max((len(b) for b in behind), default=0)
    behind_total = sum(max(b[k] for b in behind if len(b) > k) for k in range(steps))
    share = behind_total / wall if wall > 0 else 0.0
    figures = {"per_rank": per_rank, "behind_total_s": behind_total,
               "behind_share": round(share, 5), "steps": steps}
    if share > limits["behind_share"]:
        return _check("fail", f"the latest rank was behind its compute plan by {share:.1%} of "
                      f"the run at its synchronisations (sum over {steps} steps of the "
                      f"largest unpaid sleep lateness; limit {limits['behind_share']:.0%})",
                      **figures)
    if worst_mean["late_mean_share"] > limits["late_mean_share"]:
        return _check("fail", f"rank {worst_mean['rank']}'s sleeps woke late by "
                      f"{worst_mean['late_mean_share']:.1%} of their length (limit "
                      f"{limits['late_mean_share']:.0%})", **figures)
    return _check("pass", f"behind at synchronisations {share:.2%} of the run; p99 lateness at "
                  f"most {worst99['p99_s'] * 1e3:.3f} ms, paid back by the next sleep",
                  **figures)


def bytes_check(probes: list[dict], expected: list[float | None] | None,
                limits: dict = THRESHOLDS, steps: list[int] | None = None) -> dict:
    """Each rank's TCP payload sent against what its scheme should send (None: not known),
    with ``header_bytes_per_step`` for each of the rank's ``steps`` on top of the upper
    limit (the libraries' headers and the run's control messages)."""
    sent = [p["tcp_sent_bytes"] for p in probes]
    figures = {"sent_bytes": sent, "expected_bytes": expected}
    if expected is None or all(e is None for e in expected):
        return _check("not judged", "no expected bytes for this scheme and placement",
                      **figures)
    steps = steps or [0] * len(sent)
    ratios = [None if e is None or e <= 0 else s / e for s, e in zip(sent, expected)]
    figures["ratio"] = [None if r is None else round(r, 4) for r in ratios]
    for rank, (s, e) in enumerate(zip(sent, expected)):
        if e is None or e <= 0:
            continue
        high = limits["bytes_high"] * e + limits["header_bytes_per_step"] * steps[rank]
        if not limits["bytes_low"] * e <= s <= high:
            return _check("fail", f"rank {rank} sent {s} B over TCP, {s / e:.2f} x the "
                          f"{e:.0f} B its scheme sends (limits {limits['bytes_low']} x .. "
                          f"{limits['bytes_high']} x + {limits['header_bytes_per_step']} B a "
                          f"step)", **figures)
    return _check("pass", "every rank sent what its scheme sends", **figures)


def links_check(links: list[dict] | None, limits: dict = THRESHOLDS) -> dict:
    """Shapers (``real.cluster.linkstats.summarize``): the rate each sent at while
    backlogged, against its configured rate."""
    if not links:
        return _check("not judged", "not on the emulated cluster")
    judged = [s for s in links if s.get("backlogged_rate_share") is not None]
    figures = {"shapers": links}
    if not judged:
        return _check("pass", "no shaper was backlogged long enough to measure its rate",
                      **figures)
    worst = min(judged, key=lambda s: s["backlogged_rate_share"])
    if worst["backlogged_rate_share"] < limits["link_rate_min"]:
        return _check("fail", f"shaper {worst['name']} sent {worst['backlogged_rate_share']:.0%} "
                      f"of its rate while packets waited (limit {limits['link_rate_min']:.0%})",
                      **figures)
    return _check("pass", f"backlogged shapers sent at least "
                  f"{worst['backlogged_rate_share']:.0%} of their rate", **figures)


def judge(load: list[dict], probes: list[dict], phantom: bool, emulated_cluster: bool,
          expected_bytes: list[float | None] | None = None, links: list[dict] | None = None,
          limits: dict = THRESHOLDS, steps: list[int] | None = None) -> tuple[bool, dict]:
    """(testbed_bound, the record's ``testbed`` section) from every rank's figures."""
    checks = {"cpu": cpu_check(load, probes, phantom or emulated_cluster, limits),
              "sleep_lateness": lateness_check(probes, limits),
              "bytes": bytes_check(probes, expected_bytes, limits, steps),
              "links": links_check(links, limits)}
    reasons = [f"{name}: {c['why']}" for name, c in checks.items() if c["verdict"] == "fail"]
    return bool(reasons), {"reasons": reasons, "checks": checks, "thresholds": dict(limits)}


def judge_run(rec, load: list[dict], probes: list[dict], phantom: bool, model=None,
              rows: list[dict] | None = None) -> None:
    """Set ``rec.testbed_bound`` and ``rec.testbed`` (a ``RunRecord``) from the gathered
    figures of every rank; ``model`` and ``rows`` (every rank's iterations) give what the
    scheme should have sent (``expected_tcp_bytes``)."""
    links = next((p["links"] for p in probes if p.get("links") is not None), None)
    for p in probes:
        p.pop("links", None)
    expected = expected_tcp_bytes(rec, model, rows) if model is not None and rows else None
    steps = [sum(1 for r in rows or [] if r["rank"] == rank and r["iteration"] >= 0)
             for rank in range(len(probes))]
    rec.testbed_bound, rec.testbed = judge(
        load, probes, phantom, bool(rec.environment.get("cluster")), expected, links,
        steps=steps)


def expected_tcp_bytes(rec, model, rows: list[dict]) -> list[float | None] | None:
    """What each rank should have put on TCP over the run (``real.records.wire.tcp_bytes``): from
    the model's tensors in ``parameters()`` order, each rank's host (the record's
    ``environment.hosts``) and the training steps each worker logged; None for a scheme
    without messages or a launch whose ranks the record does not place."""
    from real import schemes
    from real.records import wire
    cfg = rec.config
    host_of = {r: h["host"] for h in rec.environment.get("hosts") or [] for r in h["ranks"]}
    ranks = len(host_of)
    if cfg.get("algorithm") not in schemes.RANK_BASED or ranks < 2 or \
            sorted(host_of) != list(range(ranks)):
        return None
    first = schemes.first_worker_rank(cfg["algorithm"])
    steps = [sum(1 for r in rows if r["rank"] == rank and r["batch_size"] > 0)
             for rank in range(first, ranks)]
    tensors = [(p.numel(), str(p.dtype).removeprefix("torch.")) for p in model.parameters()]
    buffers = [(b.numel(), str(b.dtype).removeprefix("torch.")) for b in model.buffers()]
    try:
        return wire.tcp_bytes(cfg["algorithm"], tensors, [host_of[r] for r in range(ranks)],
                              steps, cfg.get("average_every") or 0,
                              cfg.get("mpi_allreduce") or "auto", buffers)
    except (ValueError, KeyError, TypeError):      # a count real.records.wire cannot make: unjudged,
        return None                                 # the record itself must still be written


def summary(testbed: dict) -> str:
    """One line for people: why the run is testbed-bound."""
    return "; ".join(testbed.get("reasons") or []) or "faithful"
