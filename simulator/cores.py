"""A host with one run queue per core, as the Linux scheduler keeps them.

``Host`` shares a host's cores as a fluid: 3 processes on 2 cores each run at
2/3 speed. The kernel really puts every runnable process on *one* core and
shares each core between the processes queued on it, so 3 processes sit 2 and
1. It evens that out only slowly: a core that goes idle takes a process over
from a busy core after about ``balance_delay_s`` (21-28 ms here, measured by
``calibrate``; the periodic load balancer, not an instant steal). Within a
synchronous step shorter than that, the pair on one core finishes at ``2 w``
while the lone process waits from ``w`` on: the step takes ``2 w``, not the
fluid ``1.5 w``. Over a long stretch of steps (HogWild, local SGD) the
balancer turns the processes round, and the total is the fluid one again.

The rules, per host:

* A job (a stretch of work of one single-thread process) starts on an idle
  core, its process's last core when that is one of them. With no core idle it
  starts on its process's last core, however many wait there: the kernel's
  wake-up path looks for an idle core and otherwise keeps a task where it ran
  (or by the waker); it does not weigh the busy cores' queues, and the
  balancer evens out what that leaves uneven. (``python -m
  calibrate.sched_probe --check 4 --leaves`` counts how the ranks sit on the
  cores after each call.) A process that starts a job the instant its last one
  ended never left its core and stays there. A polling process is runnable on
  its core all the time; its jobs run in its place.
* Each core runs its runnable jobs and pollers round-robin: each at ``1/m`` of
  the core, times the measured ``sharing_efficiency(k)`` of all ``k`` runnable
  processes of the host (memory-bandwidth losses).
* A job of many short wake-ups (``wakes``: a gloo call's CPU, each message a
  thread woken on the least busy core) sits on no core: such jobs fill the
  least loaded cores as a fluid (water-filling), sharing them with what runs
  there.
* A sleeper woken while every core runs something (a gloo rank leaving a call
  as the ranks that left first compute) is not let in at once: the kernel
  preempts the running process only at a tick, once that one has had its
  slice. It gets a core ``wake_wait_s`` later (measured: two gloo ranks
  training on one core), one more such interval for each sleeper already
  waiting; a core that falls idle takes the first waiting at once, and a
  woken rank that goes straight to sleep in its next call takes no core.
  (``python -m calibrate.sched_probe --check 3,4,5 --leaves``: on 2 cores the
  first two ranks leave an allreduce at once, the rest 4-11 ms later.)
* The balancer acts ``balance_delay_s`` after the cores' loads came to differ
  (one core has two or more runnable, another fewer): the least loaded core
  takes over the busiest core's job that has run most, else a poller. An
  idle core so takes work over; 3 processes on 2 cores change places every
  ``balance_delay_s``, which over many steps is the fair (fluid) share. (The
  kernel turns them round more slowly than it fills an idle core, ~140 ms
  against ~25 ms here; one delay for both is a simplification that matters
  only for steps about that long.) The delay is drawn in turn from its
  measured spread (``balance_delays_s``: 0-100 ms here, median 20-28 ms), in
  a fixed low-discrepancy order: one fixed delay near a step's length locks
  the model into a cycle that the kernel's varying delay does not keep.

Multi-thread jobs are left to ``Host`` (``simulate`` picks it): the kernel
spreads a process's threads over the cores.
"""
from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence

import simpy


class _Runnable:
    """A job (``left_s`` of full-speed work, ``done`` fires at the end) or a poller."""
    __slots__ = ("core", "done", "left_s", "polls", "proc", "served_s", "speed")

    def __init__(self, proc, core: int, left_s: float, done, polls: bool):
        self.proc, self.core, self.left_s, self.done, self.polls = proc, core, left_s, done, polls
        self.speed = self.served_s = 0.0


class CoreHost:
    def __init__(self, env: simpy.Environment, index: int, cores: int,
                 sharing_efficiency: Callable[[int], float], balance_delay_s: float,
                 wake_wait_s: float = 0.0, balance_delays_s: Sequence[float] = ()):
        self.env = env
        self.index = index
        self.cores = cores
        self.balance_delay_s = balance_delay_s
        # the measured spread of the delay, drawn in a fixed low-discrepancy order
        self._delays_s = sorted(balance_delays_s) or [balance_delay_s]
        self._turns = 0
        self.wake_wait_s = wake_wait_s
        self._efficiency = functools.lru_cache(maxsize=None)(sharing_efficiency)
        self._queues: list[list[_Runnable]] = [[] for _ in range(cores)]
        self._pollers: dict = {}            # proc -> its _Runnable while it polls
        self._last_core: dict = {}          # proc -> core it last ran on
        self._updated_at = env.now
        self._version = 0
        self._anon = itertools.count()
        self._balance_at = None             # when the balancer moves a process next
        self._ended_at: dict = {}           # proc -> when its last job ended
        self._free: list[_Runnable] = []    # jobs of many short wake-ups: on no core for long
        self._woken: list[tuple] = []       # (proc, event, when let in): woken, all cores busy
        self._given = (env.now, set())      # (instant, procs woken onto a core then)

    @property
    def runnable(self) -> int:
        return sum(len(q) for q in self._queues) + len(self._free)

    def start_polling(self, proc=None) -> None:
        """``proc`` busy-waits whenever it is not computing, for good."""
        proc = next(self._anon) if proc is None else proc
        self._advance()
        core = self._place(proc)
        poller = _Runnable(proc, core, 0.0, None, True)
        self._pollers[proc] = poller
        self._enqueue(poller)
        self._reschedule()

    def compute(self, work_s: float, threads: int = 1, polls: bool = False, proc=None,
                wakes: bool = False):
        """Event that fires when ``work_s`` seconds of full-speed work are done.
        ``wakes``: the work is many short wake-ups (a call's message handling), each
        placed on the least busy core: it fills the cores' spare share as a fluid."""
        if threads != 1:
            raise ValueError("CoreHost runs single-thread jobs; use Host for threads > 1")
        done = self.env.event()
        if work_s <= 0:
            return done.succeed()
        proc = next(self._anon) if proc is None else proc
        self._given_now().discard(proc)        # its core now shows as taken by the job
        self._advance()
        poller = self._pollers.get(proc) if polls else None
        if wakes:
            self._free.append(_Runnable(proc, None, work_s, done, False))
        elif poller is not None:               # the job runs in its poller's place
            self._queues[poller.core].remove(poller)
            self._enqueue(_Runnable(proc, poller.core, work_s, done, False))
        else:
            self._enqueue(_Runnable(proc, self._place(proc), work_s, done, False))
        self._reschedule()
        return done

    def wake(self, proc) -> simpy.Event:
        """Event: ``proc``, a sleeper woken now (a gloo rank whose call is over), is on
        a core. At once while a core has nothing to run. Otherwise the kernel lets it
        in only at a tick, after the process it displaces has had its slice:
        ``wake_wait_s`` (measured), one more such interval for each sleeper already
        waiting. A core that falls idle meanwhile takes the first waiting at once."""
        woken = self.env.event()
        busy = sum(1 for q in self._queues if q) + len(self._given_now())
        if self.wake_wait_s <= 0 or (busy < self.cores and not self._woken):
            self._given_now().add(proc)
            return woken.succeed()
        behind_s = self._woken[-1][2] if self._woken else self.env.now
        at = max(self.env.now, behind_s) + self.wake_wait_s
        self._woken.append((proc, woken, at))
        self.env.timeout(at - self.env.now).callbacks.append(
            lambda _ev: self._let_in(proc, woken, at))
        return woken

    def sleep(self, proc) -> None:
        """``proc`` sleeps again (its next call): a core given to it at this instant is
        free for the first sleeper waiting."""
        given = self._given_now()
        if proc in given:
            given.discard(proc)
            if self._woken:
                self._let_in(*self._woken[0])

    def _given_now(self) -> set:
        """Woken processes given an idle core at this instant that have not yet started
        a job or slept again: their cores count as taken."""
        if self._given[0] != self.env.now:
            self._given = (self.env.now, set())
        return self._given[1]

    def _let_in(self, proc, woken: simpy.Event, at: float) -> None:
        if (proc, woken, at) in self._woken:   # (not let in early by an idle core)
            self._woken.remove((proc, woken, at))
            self._given_now().add(proc)
            woken.succeed()

    def _place(self, proc) -> int:
        last = self._last_core.get(proc)
        if self._ended_at.get(proc) == self.env.now:
            return last                        # it never left its core: it did not sleep
        loads = [len(q) for q in self._queues]
        if last is not None and (loads[last] == 0 or min(loads) > 0):
            return last                        # its core is idle, or none is: back where it ran
        return loads.index(min(loads))         # else the first idle (or least loaded) core

    def _enqueue(self, r: _Runnable) -> None:
        self._queues[r.core].append(r)
        self._last_core[r.proc] = r.core

    def _advance(self) -> None:
        dt = self.env.now - self._updated_at
        if dt > 0:
            for q in self._queues + [self._free]:
                for r in q:
                    if not r.polls:
                        r.left_s -= r.speed * dt
                        r.served_s += r.speed * dt
        self._updated_at = self.env.now

    def _reschedule(self) -> None:
        """One timer for whatever comes first: a job's end or the balancer's turn."""
        self._version += 1
        self._watch_balance()
        efficiency = self._efficiency(max(1, self.runnable))
        level = self._level()
        for r in self._free:
            r.speed = efficiency * min(1.0, 1.0 / level)
        next_dt = None
        for q in self._queues + [self._free]:
            for r in q:
                if r.core is not None:
                    r.speed = efficiency / max(len(q), level)
                if not r.polls:
                    dt = r.left_s / r.speed
                    next_dt = dt if next_dt is None else min(next_dt, dt)
        if next_dt is not None:                # (no jobs: no timer, the run may end)
            if self._balance_at is not None:
                next_dt = min(next_dt, self._balance_at - self.env.now)
            version = self._version
            self.env.timeout(max(0.0, next_dt)).callbacks.append(
                lambda _ev: self._on_timer(version))

    def _on_timer(self, version: int) -> None:
        if version != self._version:
            return                             # a job started, ended or moved since: stale
        self._advance()
        due = 1e-12 * max(1.0, self.env.now)
        for r in [r for r in self._free if r.left_s <= due * r.speed]:
            self._free.remove(r)
            r.done.succeed()
        for core, q in enumerate(self._queues):
            for r in [r for r in q if not r.polls and r.left_s <= due * r.speed]:
                q.remove(r)
                self._ended_at[r.proc] = self.env.now
                poller = self._pollers.get(r.proc)
                if poller is not None:         # it polls again, where its job ran
                    poller.core = core
                    q.append(poller)
                r.done.succeed()
        for _ in range(min(len(self._woken), sum(1 for q in self._queues if not q))):
            self._let_in(*self._woken[0])      # an idle core runs a waiting sleeper at once
        if self._balance_at is not None and self.env.now >= self._balance_at - due:
            self._balance_at = None            # its turn: it acts if the loads differ now
            if self._imbalanced():
                self._balance()
        self._reschedule()

    def _level(self) -> float:
        """The load of the cores the free jobs fill (water-filling: they go where the
        fewest run, until those cores are as loaded as the next); 0 without free jobs."""
        if not self._free:
            return 0.0
        loads = sorted(len(q) for q in self._queues)
        total = float(len(self._free))
        for k in range(1, self.cores + 1):
            total += loads[k - 1]
            level = total / k
            if k == self.cores or level <= loads[k]:
                return level
        return total / self.cores

    def _imbalanced(self) -> bool:
        loads = [len(q) for q in self._queues]
        jobs = any(not r.polls for q in self._queues for r in q)   # pollers alone: nothing to do
        return jobs and max(loads) >= 2 and max(loads) > min(loads)

    def _watch_balance(self) -> None:
        """The balancer's turn comes ``balance_delay_s`` after the cores' loads came to
        differ; it acts if they differ then (loads that even out for an instant, as
        jobs end and the next begin, do not stop its clock)."""
        if self._balance_at is not None and self._balance_at < self.env.now:
            self._balance_at = None            # its turn passed with nothing to run
        if self._balance_at is None and self._imbalanced():
            self._balance_at = self.env.now + self._next_delay_s()

    def _next_delay_s(self) -> float:
        """The next of the measured delays: quantile frac(n * golden ratio) of their spread,
        so any stretch of turns samples it evenly (deterministic, no random draws)."""
        self._turns += 1
        u = (self._turns * 0.6180339887498949) % 1.0
        return self._delays_s[min(len(self._delays_s) - 1, int(u * len(self._delays_s)))]

    def _balance(self) -> None:
        """The least loaded core takes over the busiest core's job that has run most:
        the one left behind gets a core to itself (turn by turn, the fair share)."""
        busiest = max(self._queues, key=len)
        least = min(range(self.cores), key=lambda c: len(self._queues[c]))
        jobs = [r for r in busiest if not r.polls]
        moved = max(jobs, key=lambda r: r.served_s) if jobs else busiest[-1]
        busiest.remove(moved)
        moved.core = least
        self._enqueue(moved)
