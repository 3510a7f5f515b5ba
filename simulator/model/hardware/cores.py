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

Multi-thread jobs are left to ``Host`` (``engine.des`` picks it): the kernel
spreads a process's threads over the cores.

Imports: SimPy, model.hardware.host (``succeed_in_order``).
"""
from __future__ import annotations

import functools
import itertools
from collections import deque
from collections.abc import Callable, Sequence

import simpy

from simulator.model.hardware.host import succeed_in_order


class _Runnable:
    """A job (``left_s`` of full-speed work; ``done``: an event to succeed at its end, or a
    callback) or a poller. Every job on a core runs at that core's speed (``CoreHost``
    keeps one speed per core and one for the free jobs)."""
    __slots__ = ("core", "done", "left_s", "polls", "proc", "served_s")

    def __init__(self, proc, core: int | None, left_s: float, done, polls: bool):
        self.proc, self.core, self.left_s, self.done, self.polls = proc, core, left_s, done, polls
        self.served_s = 0.0


class _Sleeper:
    """A woken process waiting for a core: let in at ``at``, or earlier by an idle core."""
    __slots__ = ("at", "proc", "waiting", "woken")

    def __init__(self, proc, woken: simpy.Event, at: float):
        self.proc, self.woken, self.at, self.waiting = proc, woken, at, True


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
        self._queues: list[list[_Runnable]] = [[] for _ in range(cores)]   # jobs and pollers
        self._jobs: list[list[_Runnable]] = [[] for _ in range(cores)]     # the jobs alone
        self._speeds = [0.0] * cores        # speed of each core's jobs, as last rescheduled
        self._free_speed = 0.0              # speed of each free job, as last rescheduled
        self._pollers: dict = {}            # proc -> its _Runnable while it polls
        self._last_core: dict = {}          # proc -> core it last ran on
        self._updated_at = env.now
        self._timer = None                  # the one live timer; older ones are stale
        self._anon = itertools.count()
        self._balance_at = None             # when the balancer moves a process next
        self._ended_at: dict = {}           # proc -> when its last job ended
        self._free: list[_Runnable] = []    # jobs of many short wake-ups: on no core for long
        self._woken: deque[_Sleeper] = deque()   # woken while all cores were busy, in turn
        self._given_at = env.now            # the instant of ``_given``:
        self._given: set = set()            # the procs woken onto a core then
        self.dedicated = False              # every job at full speed throughout (``dedicate``)

    def dedicate(self, processes: int) -> bool:
        """Whether ``processes`` (all that ever run here, none with calls' wake-ups) keep
        a core each and lose nothing to each other: no more of them than cores, and
        ``sharing_efficiency`` 1 for up to as many. Then every job runs at full speed from
        start to end (each starts on an idle core: ``_place``), and ``compute`` is a timeout
        of its work, without the queues. The queues give the same end to rounding: they
        advance a job's work left at every other job's start and end (within 1e-15
        relative in ``tests/test_sim_cores.py``)."""
        self.dedicated = processes <= self.cores and all(
            self._efficiency(k) == 1.0 for k in range(1, self.cores + 1))
        return self.dedicated

    @property
    def runnable(self) -> int:
        return sum(map(len, self._queues)) + len(self._free)

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
        if self.dedicated and work_s > 0 and not wakes:
            return self.env.timeout(work_s)
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

    def compute_wakes(self, jobs: Sequence[tuple], on_done: Callable) -> None:
        """The wake-ups of several processes' calls at this instant (``compute(work_s,
        proc=proc, wakes=True)`` for each ``(proc, work_s)``, in order); ``on_done(event)``
        is called as each ends. One rescheduling for all of them: the timers that one
        per job would set are stale before the clock moves (free jobs leave the cores'
        queues, so the balancer's watch is the same)."""
        self._advance()
        given = self._given_now()
        for proc, work_s in jobs:
            given.discard(proc)
            self._free.append(_Runnable(proc, None, work_s, on_done, False))
        self._reschedule()

    def wake(self, proc) -> simpy.Event:
        """Event: ``proc``, a sleeper woken now (a gloo rank whose call is over), is on
        a core. At once while a core has nothing to run. Otherwise the kernel lets it
        in only at a tick, after the process it displaces has had its slice:
        ``wake_wait_s`` (measured), one more such interval for each sleeper already
        waiting. A core that falls idle meanwhile takes the first waiting at once."""
        woken = self.env.event()
        if self.wake_wait_s <= 0 or (not self._woken and self._busy_cores() < self.cores):
            self._given_now().add(proc)
            return woken.succeed()
        behind_s = self._woken[-1].at if self._woken else self.env.now
        at = max(self.env.now, behind_s) + self.wake_wait_s
        sleeper = _Sleeper(proc, woken, at)
        self._woken.append(sleeper)
        self.env.timeout(at - self.env.now).callbacks.append(lambda _ev: self._let_in(sleeper))
        return woken

    def sleep(self, proc) -> None:
        """``proc`` sleeps again (its next call): a core given to it at this instant is
        free for the first sleeper waiting."""
        given = self._given_now()
        if proc in given:
            given.discard(proc)
            if self._woken:
                self._let_in(self._woken[0])

    def _busy_cores(self) -> int:
        """Cores running something, and cores given at this instant to woken processes."""
        return sum(1 for q in self._queues if q) + len(self._given_now())

    def _given_now(self) -> set:
        """Woken processes given an idle core at this instant that have not yet started
        a job or slept again: their cores count as taken."""
        if self._given_at != self.env.now:
            self._given_at = self.env.now
            self._given = set()
        return self._given

    def _let_in(self, sleeper: _Sleeper) -> None:
        if sleeper.waiting:                    # (not let in early by an idle core)
            sleeper.waiting = False
            if self._woken[0] is sleeper:
                self._woken.popleft()
            else:
                self._woken.remove(sleeper)
            self._given_now().add(sleeper.proc)
            sleeper.woken.succeed()

    def _place(self, proc) -> int:
        last = self._last_core.get(proc)
        if self._ended_at.get(proc) == self.env.now:
            return last                        # it never left its core: it did not sleep
        loads = list(map(len, self._queues))
        if last is not None and (loads[last] == 0 or min(loads) > 0):
            return last                        # its core is idle, or none is: back where it ran
        return loads.index(min(loads))         # else the first idle (or least loaded) core

    def _enqueue(self, r: _Runnable) -> None:
        self._queues[r.core].append(r)
        if not r.polls:
            self._jobs[r.core].append(r)
        self._last_core[r.proc] = r.core

    def _advance(self) -> None:
        """Every job's work left (and work done) up to now, at the speeds last set: the
        jobs of one core share its speed, so one product per core (the same floats as
        one per job)."""
        dt = self.env.now - self._updated_at
        if dt > 0:
            for jobs, speed in zip(self._jobs, self._speeds):
                if jobs:
                    done_s = speed * dt
                    for r in jobs:
                        r.left_s -= done_s
                        r.served_s += done_s
            if self._free:
                done_s = self._free_speed * dt
                for r in self._free:
                    r.left_s -= done_s
                    r.served_s += done_s
        self._updated_at = self.env.now

    def _reschedule(self) -> None:
        """One timer for whatever comes first: a job's end or the balancer's turn.
        Speeds: each free job ``efficiency * min(1, 1 / level)``, each job on a core of
        ``m`` runnable ``efficiency / max(m, level)``. The first end is the least work
        left over its speed, per core (division by a core's one speed keeps the order
        of the work left, so its least over the speed is the least of the quotients)."""
        free = self._free
        loads = list(map(len, self._queues))
        self._watch_balance(loads)
        efficiency = self._efficiency(max(1, sum(loads) + len(free)))
        level = 0.0
        next_dt = None
        if free:
            level = self._level(loads)
            speed = self._free_speed = efficiency * min(1.0, 1.0 / level)
            next_dt = min([r.left_s for r in free]) / speed
        # (comparisons written out, not min() and max(): the same values, less work in
        # the model's most frequent call)
        speeds = self._speeds
        core = 0
        for jobs in self._jobs:
            if jobs:
                load = loads[core]
                speed = speeds[core] = efficiency / (load if load >= level else level)
                if len(jobs) == 1:
                    dt = jobs[0].left_s / speed
                else:
                    dt = min([r.left_s for r in jobs]) / speed
                if next_dt is None or dt < next_dt:
                    next_dt = dt
            core += 1
        if next_dt is None:                    # (no jobs: no timer, the run may end)
            self._timer = None
            return
        if self._balance_at is not None:
            turn_dt = self._balance_at - self.env.now
            if turn_dt < next_dt:
                next_dt = turn_dt
        self._timer = timer = self.env.timeout(next_dt if next_dt > 0.0 else 0.0)
        timer.callbacks.append(self._on_timer)

    def _on_timer(self, timer) -> None:
        if timer is not self._timer:
            return                             # a job started, ended or moved since: stale
        self._advance()
        now = self.env.now
        due = 1e-12 * max(1.0, now)
        if self._free:
            due_left = due * self._free_speed
            ended = [r for r in self._free if r.left_s <= due_left]
            if ended:
                self._free = [r for r in self._free if r.left_s > due_left]
                succeed_in_order(self.env, [r.done for r in ended])
        for core, jobs in enumerate(self._jobs):
            if not jobs:
                continue
            due_left = due * self._speeds[core]
            if len(jobs) == 1:
                if jobs[0].left_s > due_left:
                    continue
                ended = jobs[:]
            else:
                ended = [r for r in jobs if r.left_s <= due_left]
            q = self._queues[core]
            for r in ended:
                q.remove(r)
                jobs.remove(r)
                self._ended_at[r.proc] = now
                poller = self._pollers.get(r.proc)
                if poller is not None:         # it polls again, where its job ran
                    poller.core = core
                    q.append(poller)
                r.done.succeed()
        if self._woken:                        # an idle core runs a waiting sleeper at once
            for _ in range(min(len(self._woken), sum(1 for q in self._queues if not q))):
                self._let_in(self._woken[0])
        if self._balance_at is not None and now >= self._balance_at - due:
            self._balance_at = None            # its turn: it acts if the loads differ now
            if self._imbalanced(list(map(len, self._queues))):
                self._balance()
        self._reschedule()

    def _level(self, loads: list[int]) -> float:
        """The load of the cores the free jobs fill (water-filling: they go where the
        fewest run, until those cores are as loaded as the next)."""
        loads = sorted(loads)
        total = float(len(self._free))
        for k in range(1, self.cores + 1):
            total += loads[k - 1]
            level = total / k
            if k == self.cores or level <= loads[k]:
                return level
        return total / self.cores

    def _imbalanced(self, loads: list[int]) -> bool:
        most = max(loads)
        if most < 2 or most <= min(loads):
            return False
        return any(self._jobs)                 # pollers alone: nothing to do

    def _watch_balance(self, loads: list[int]) -> None:
        """The balancer's turn comes ``balance_delay_s`` after the cores' loads came to
        differ; it acts if they differ then (loads that even out for an instant, as
        jobs end and the next begin, do not stop its clock)."""
        if self._balance_at is not None:
            if self._balance_at >= self.env.now:
                return
            self._balance_at = None            # its turn passed with nothing to run
        if self._imbalanced(loads):
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
        core = max(range(self.cores), key=lambda c: len(self._queues[c]))
        least = min(range(self.cores), key=lambda c: len(self._queues[c]))
        busiest, jobs = self._queues[core], self._jobs[core]
        moved = max(jobs, key=lambda r: r.served_s) if jobs else busiest[-1]
        busiest.remove(moved)
        if not moved.polls:
            jobs.remove(moved)
        moved.core = least
        self._enqueue(moved)
