"""Did a run get the machine it asked for? Load before and during a run, and the verdict.

A rank asks the kernel for CPU whenever one of its threads is runnable. Linux
keeps, for every thread, the time it ran and the time it was runnable but
waited on a run queue (``/proc/<pid>/task/<tid>/schedstat``: run ns, wait ns).
Over a run, per machine (ranks on one kernel, the emulated cluster's hosts
included, share ``/proc/sys/kernel/random/boot_id``):

* ``run_cores``    = sum of the ranks' run time / wall time: the CPU the run got;
* ``demand_cores`` = sum of run + wait / wall: the CPU it asked for;
* ``served``       = run / (run + wait): the share of its demand the kernel gave it;
* ``expected_served`` = min(1, cores / demand_cores): what the machine could give it
  with nobody else on it (below 1 when the run itself has more runnable threads
  than cores: that sharing is the run's own and the simulator models it);
* ``others_cores`` = the machine's busy CPU time (``/proc/stat``) over the run, less
  the run's own: what other processes took, in cores.

A run is **disturbed** when on some machine ``served < DISTURBED_SHARE *
expected_served`` and ``others_cores >= OTHERS_MIN_CORES``: its ranks got clearly
less CPU than they asked for, and other processes used it. The record keeps every
figure (``load`` in ``contracts.record``), also each rank's CPU% against
its threads. CPU% alone cannot tell a disturbed rank from one that waits for a
message; the run-queue wait can.

Every rank runs a ``RankMeter`` around its training, from just before the barrier that
starts it to a barrier after it (``real.launch.runner.start_training``: built before a
first barrier, its window opened between that and the start barrier, so that neither its
own set-up nor any rank's is in a window or in the timed one), so that every rank's
window ends together: a rank that finished first
and polls for the others (MPI's waits spin on a core) does so inside its own window, not
as another process in theirs (which marked runs of many ranks on few cores disturbed
that nobody else touched). The meter is a thread that reads the
schedstat of the rank's threads and child processes (hogwild's) every
``SAMPLE_S`` and the load average. ``machine_busy_cores`` over a short window, with
nothing of ours running, is how busy the machine is *before* a run (``real.sweep``
and ``calibrate`` wait for it to fall: ``wait_for_quiet``).

Imports: psutil, real.launch.launchers, real.records.tcpstats (the meter's window also bounds
the TCP counters).
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from real.records import tcpstats

DISTURBED_SHARE = 0.85       # served below 85% of what an empty machine would give ...
OTHERS_MIN_CORES = 0.25      # ... while other processes used at least a quarter core
SAMPLE_S = 0.5
QUIET_CORES = 0.25           # a machine is quiet when others use less than this
USER_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
RULE = (f"disturbed: on some machine the ranks got less than {DISTURBED_SHARE:.0%} of the CPU "
        f"share an empty machine would give them (served < {DISTURBED_SHARE} x expected_served) "
        f"while other processes used at least {OTHERS_MIN_CORES} cores")


def machine_id() -> str:
    """One id per running kernel: network namespaces of one machine share it."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        import socket
        return socket.gethostname()


def busy_cpu_s() -> float | None:
    """CPU seconds the whole machine has been busy since boot (all cores; /proc/stat)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal (guest is already in user)
    return sum(fields[i] for i in (0, 1, 2, 5, 6, 7) if i < len(fields)) / USER_HZ


def machine_busy_cores(window_s: float = 1.0) -> float | None:
    """Cores busy on average over the next ``window_s`` (None where /proc/stat is missing)."""
    b0, t0 = busy_cpu_s(), time.monotonic()
    time.sleep(window_s)
    b1, t1 = busy_cpu_s(), time.monotonic()
    return None if b0 is None or b1 is None else max(0.0, (b1 - b0) / (t1 - t0))


def wait_for_quiet(max_wait_s: float, quiet_cores: float = QUIET_CORES,
                   window_s: float = 2.0, said=None) -> dict:
    """Wait until other processes use less than ``quiet_cores`` (or ``max_wait_s`` passed);
    ``said(busy_cores)`` is called once, when the first window finds the machine busy.

    Returns what happened: ``quiet`` (bool), ``waited_s``, ``busy_cores`` of the last window.
    """
    t0 = time.monotonic()
    first = True
    while True:
        busy = machine_busy_cores(window_s)
        waited = time.monotonic() - t0
        if first and said is not None and busy is not None and busy >= quiet_cores:
            said(busy)
        first = False
        if busy is None or busy < quiet_cores or waited >= max_wait_s:
            return {"quiet": busy is not None and busy < quiet_cores, "waited_s": round(waited, 1),
                    "busy_cores": None if busy is None else round(busy, 2),
                    "quiet_cores": quiet_cores}


def _thread_stats(pids) -> dict[tuple[int, int], tuple[int, int]]:
    """(pid, tid) -> (run ns, wait ns) for every thread of ``pids``."""
    out = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    run, wait = f.read().split()[:2]
                out[(pid, int(tid))] = (int(run), int(wait))
            except (OSError, ValueError):
                continue
    return out


class RankMeter:
    """The CPU one rank (and its child processes) got and waited for, and the load around it.
    Built, it has found its processes (a scan of every process's parent: milliseconds on a
    busy machine); ``start()`` opens its window (a few reads of /proc and its sampler)."""

    def __init__(self, threads: int, sample_s: float = SAMPLE_S):
        import psutil
        self._proc, self.threads, self._sample_s = psutil.Process(), threads, sample_s
        self._start_pids = self._pids()

    def start(self) -> RankMeter:
        """Open the window: the figures from now on."""
        self.load_before = [round(x, 2) for x in os.getloadavg()]
        self._t0, self._busy0 = time.monotonic(), busy_cpu_s()
        self._tcp0 = tcpstats.counters()
        self._base = _thread_stats(self._start_pids)
        self._last = dict(self._base)
        self._load_max = self.load_before[0]
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._run, name="load-meter", daemon=True)
        self._sampler.start()
        return self

    def _pids(self) -> list[int]:
        try:
            return [self._proc.pid] + [c.pid for c in self._proc.children(recursive=True)]
        except Exception:   # noqa: BLE001 - psutil's NoSuchProcess and friends: keep ourselves
            return [self._proc.pid]

    def _sample(self) -> None:
        self._last.update(_thread_stats(self._pids()))
        self._load_max = max(self._load_max, os.getloadavg()[0])

    def _run(self) -> None:
        while not self._stop.wait(self._sample_s):
            self._sample()

    def stop(self) -> dict:
        """This rank's figures (to be gathered by rank 0 and judged by ``assess``)."""
        self._stop.set()
        self._sampler.join()
        self._sample()
        wall = max(time.monotonic() - self._t0, 1e-9)
        busy1 = busy_cpu_s()
        run = sum(r - self._base.get(k, (0, 0))[0] for k, (r, _) in self._last.items()) / 1e9
        wait = sum(w - self._base.get(k, (0, 0))[1] for k, (_, w) in self._last.items()) / 1e9
        from real.launch.launchers import host_name
        return {"host": host_name(), "machine": machine_id(), "cores": os.cpu_count() or 1,
                "threads": self.threads, "wall_s": wall, "run_s": run, "wait_s": wait,
                "cpu_percent": 100.0 * run / wall,
                "busy_cores": (busy1 - self._busy0) / wall
                if busy1 is not None and self._busy0 is not None else None,
                "load_before": self.load_before, "load_max": round(self._load_max, 2),
                "load_end": [round(x, 2) for x in os.getloadavg()],
                "tcp": _tcp(tcpstats.delta(self._tcp0, tcpstats.counters()))}


def _tcp(counted: dict | None) -> dict | None:
    """The TCP counters' changes over the run and the congestion control that ran."""
    return None if counted is None else {**counted,
                                         "congestion_control": tcpstats.congestion_control()}


def assess(per_rank: list[dict]) -> tuple[bool, dict]:
    """(disturbed, the record's ``load`` section) from every rank's ``RankMeter.stop()``."""
    machines = []
    for machine in dict.fromkeys(r["machine"] for r in per_rank):
        ranks = [i for i, r in enumerate(per_rank) if r["machine"] == machine]
        machines.append(_machine(machine, [per_rank[i] for i in ranks], ranks))
    disturbed = any(m["disturbed"] for m in machines)
    rows = [{"rank": i, "host": r["host"], "threads": r["threads"],
             "cpu_percent": round(r["cpu_percent"], 1),
             "cpu_percent_of_threads": round(r["cpu_percent"] / max(1, r["threads"]), 1),
             "served": round(_share(r["run_s"], r["wait_s"]), 3),
             "window_s": round(r["wall_s"], 3)} for i, r in enumerate(per_rank)]
    root = per_rank[0]
    return disturbed, {"before": {"load_avg": root["load_before"]},
                       "during": {"load_avg_max": max(r["load_max"] for r in per_rank),
                                  "load_avg_end": root["load_end"]},
                       "per_rank": rows, "machines": machines, "rule": RULE}


def _share(run: float, wait: float) -> float:
    return run / (run + wait) if run + wait > 0 else 1.0


def _machine(machine: str, ranks: list[dict], rank_ids: list[int]) -> dict:
    cores = ranks[0]["cores"]
    wall = max(r["wall_s"] for r in ranks)
    run = sum(r["run_s"] for r in ranks)
    wait = sum(r["wait_s"] for r in ranks)
    busy = [r["busy_cores"] for r in ranks if r["busy_cores"] is not None]
    run_cores, demand = run / wall, (run + wait) / wall
    others = max(0.0, sum(busy) / len(busy) - run_cores) if busy else None
    served, expected = _share(run, wait), min(1.0, cores / demand) if demand > 0 else 1.0
    disturbed = (served < DISTURBED_SHARE * expected and others is not None
                 and others >= OTHERS_MIN_CORES)
    return {"machine": machine, "cores": cores, "ranks": rank_ids, "wall_s": round(wall, 3),
            "run_cores": round(run_cores, 3), "demand_cores": round(demand, 3),
            "served": round(served, 3), "expected_served": round(expected, 3),
            "others_cores": None if others is None else round(others, 3),
            "disturbed": bool(disturbed)}


def summary(load: dict) -> str:
    """One line for people: what the worst machine got and who else ran."""
    worst = min(load["machines"], key=lambda m: m["served"] / max(m["expected_served"], 1e-9))
    others = worst["others_cores"]
    return (f"the ranks got {worst['served']:.0%} of the CPU they asked for "
            f"(an empty machine: {worst['expected_served']:.0%}); other processes used "
            f"{'?' if others is None else f'{others:.2f}'} of {worst['cores']} cores; "
            f"load average {load['before']['load_avg'][0]:.1f} before, "
            f"up to {load['during']['load_avg_max']:.1f} during")
