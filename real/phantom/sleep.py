"""Sleeping for a measured compute time, precisely, and saying how late each sleep woke.

A phantom step is a chain of sleeps (each layer's forward, then each layer's
backward, then the update). ``time.sleep(d)`` on Linux wakes 50-130 us after
``d`` (docs/phantom.md, ``benchmarks/phantom_sleep.py``): the kernel's default
timer slack of a normal thread is 50 us (``/proc/self/timerslack_ns``), which
lets it wake the thread that much later to batch wake-ups, and a virtual
machine adds its own wake-up latency on top. Over a chain of 21 sleeps (the
seed-000 CNN) that is 1-2 ms on an 11 ms step: 10-20% too slow.

Two measures keep the chain's sum exact without burning a core:

* ``prctl(PR_SET_TIMERSLACK, 1)`` sets this thread's slack to 1 ns for each
  sleep, which takes out the slack part of the lateness (the rest is wake-up
  latency), and sets it back after: MPICH's heavy yield (phantom runs on the
  emulated cluster, ``real.launch.dist.sleeping_waits``) sleeps the thread's slack
  between polls, and at 1 ns a waiting rank spins (docs/cluster.md, "Waiting
  ranks": 1.9 of 2 cores in system time at P = 2);
* every sleep's own lateness is a debt taken off the next sleep's length
  (``Sleeper.sleep``): the lateness of one sleep does not add up over the
  chain, so the total slept time equals the total asked for, give or take
  the last sleep's lateness, which the next step's first sleep pays back.
  The stand-in's own work between its sleeps (the sleeper's bookkeeping, its
  autograd function's dispatch and zero gradients, ``Sleeper.charge``) is
  carried too: a real layer's measured time already holds its own dispatch.
  The scheme's work between two sleeps (DDP's hooks, copies into buckets) is
  never carried: it stays on top, as in a real run.

Spinning the last few hundred microseconds of a sleep would wake it on time
too, but it burns the core for that long, 21 times a step: on the emulated
cluster, where many ranks share two cores, that is the CPU the phantom is
there to save. It is offered (``spin_s``) for the measurement only.

Each sleep's lateness (its wake-up after the deadline it asked the kernel
for) goes into a histogram (``LatenessLog``, bounded however long the run);
``Sleeper.summary`` is what the record's ``testbed`` section keeps of it
(``real.records.testbed``, which judges it).

Imports: the standard library.
"""
from __future__ import annotations

import ctypes
import math
import threading
import time
from dataclasses import dataclass, field

PR_SET_TIMERSLACK, PR_GET_TIMERSLACK = 29, 30     # linux/prctl.h
TIMER_SLACK_NS = 1                     # the least the kernel takes (0 means "the default")
DEFAULT_SLACK_NS = 50_000              # Linux's for a normal thread
BINS_PER_DECADE = 50                   # lateness histogram: 4.7% wide bins
LOWEST_S, HIGHEST_S = 1e-7, 10.0       # below: the first bin; above: the last


_PRCTL = None


def _prctl():
    """libc's ``prctl``, looked up once: ``ctypes.CDLL(None)`` on every call cost 50 us of
    CPU, two calls a sleep: with 16 CNN ranks on two cores (9 sleeps a 31 ms step) about
    0.4 of a core."""
    global _PRCTL
    if _PRCTL is None:
        try:
            _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            _PRCTL = False
    return _PRCTL


def set_timer_slack(ns: int = TIMER_SLACK_NS) -> bool:
    """Set the calling thread's timer slack (Linux ``prctl``); False where it cannot."""
    prctl = _prctl()
    return bool(prctl) and prctl(PR_SET_TIMERSLACK, ctypes.c_ulong(ns), 0, 0, 0) == 0


def timer_slack_ns() -> int | None:
    """The calling thread's timer slack as the kernel reports it (None where it does not)."""
    prctl = _prctl()
    if not prctl:
        return None
    slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0)
    return slack if slack >= 0 else None


@dataclass
class LatenessLog:
    """A histogram of sleep lateness (log-spaced bins) with exact count, sum and maximum:
    bounded memory however long the run, p50 / p99 to within one bin (4.7%)."""
    counts: list[int] = field(default_factory=lambda: [0] * _n_bins())
    n: int = 0
    total_s: float = 0.0
    max_s: float = 0.0

    def add(self, late_s: float) -> None:
        late_s = max(0.0, late_s)
        self.counts[_bin(late_s)] += 1
        self.n += 1
        self.total_s += late_s
        self.max_s = max(self.max_s, late_s)

    def quantile(self, q: float) -> float:
        """The upper edge of the bin that holds quantile ``q`` (0 when empty)."""
        if not self.n:
            return 0.0
        rank, seen = q * self.n, 0
        for i, c in enumerate(self.counts):
            seen += c
            if seen >= rank and c:
                return min(_edge(i + 1), self.max_s)
        return self.max_s


def _n_bins() -> int:
    return round(math.log10(HIGHEST_S / LOWEST_S) * BINS_PER_DECADE) + 2


def _bin(x: float) -> int:
    if x <= LOWEST_S:
        return 0
    return min(_n_bins() - 1, 1 + int(math.log10(x / LOWEST_S) * BINS_PER_DECADE))


def _edge(i: int) -> float:
    """The upper edge of bin ``i - 1``."""
    return LOWEST_S * 10 ** ((i - 1) / BINS_PER_DECADE) if i > 0 else LOWEST_S


class Sleeper:
    """Sleeps whose lengths add up: each one's lateness is taken off the next.

    ``carry``: take the debt off the next sleep (the default); ``spin_s``: sleep
    until that long before the deadline, then spin (measurement only, see above).
    A sleep shorter than the debt is skipped and the debt shrinks by its length,
    so a rank that was kept off the CPU catches up, as the compute it stands for
    would not have been delayed; the lateness log shows that it was.
    """

    def __init__(self, carry: bool = True, spin_s: float = 0.0, slack: bool = True,
                 clock=time.monotonic, nap=time.sleep):
        self.carry, self.spin_s, self.slack = carry, spin_s, slack
        self.clock, self.nap = clock, nap
        self.debt_s = 0.0
        self.asked_s = 0.0                 # every duration the compute asked for
        self.slept_s = 0.0                 # the lengths asked of the kernel (less the debt)
        self.skipped = 0                   # sleeps the debt covered
        self.lateness = LatenessLog()
        self._threads = threading.local()  # timer slack is per thread
        self.fine_slack = False            # whether a sleep got the 1 ns slack

    def sleep(self, duration_s: float) -> None:
        """Sleep ``duration_s`` less the debt; note how late it woke. The sleeper's own
        bookkeeping counts as part of the sleep (its time goes to the debt)."""
        if duration_s <= 0:
            return
        entered = self.clock()
        self.asked_s += duration_s
        length = duration_s - self.debt_s if self.carry else duration_s
        if length <= 0:
            self.debt_s = -length
            self.skipped += 1
            return
        if self.slack:
            if not hasattr(self._threads, "rest_ns"):
                self._threads.rest_ns = timer_slack_ns() or DEFAULT_SLACK_NS
            self.fine_slack = set_timer_slack() or self.fine_slack
        self.slept_s += length
        deadline = entered + length
        if self.spin_s > 0:
            if length > self.spin_s:
                self.nap(max(0.0, deadline - self.spin_s - self.clock()))
            while self.clock() < deadline:
                pass
        else:
            self.nap(max(0.0, deadline - self.clock()))
        self.lateness.add(self.clock() - deadline)
        if self.slack:
            set_timer_slack(self._threads.rest_ns)
        self.debt_s = max(0.0, self.clock() - deadline) if self.carry else 0.0

    def charge(self, seconds: float) -> None:
        """Count ``seconds`` of the stand-in's own work (not the scheme's) as compute already
        done: the next sleep is that much shorter."""
        if self.carry and seconds > 0:
            self.debt_s += seconds

    def summary(self) -> dict | None:
        """This rank's sleeps for the record (``real.records.testbed.RankProbe.stop`` takes it): how
        late they woke (``p50_s``, ``p99_s``, ``max_s``, ``late_total_s`` against
        ``asked_total_s``, the lengths asked of the kernel), what the compute asked for
        (``compute_s``), the sleeps the debt covered; None when nothing slept (a server)."""
        log = self.lateness
        if not log.n:
            return None
        return {"sleeps": log.n, "p50_s": log.quantile(0.5), "p99_s": log.quantile(0.99),
                "max_s": log.max_s, "late_total_s": log.total_s, "asked_total_s": self.slept_s,
                "compute_s": self.asked_s, "skipped": self.skipped, "debt_left_s": self.debt_s,
                "timer_slack_ns": TIMER_SLACK_NS if self.fine_slack else timer_slack_ns()}
