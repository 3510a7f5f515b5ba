"""A host: C cores shared by the processes running on it (processor sharing).

Like the Linux scheduler, the cores are shared fairly between runnable
*threads*: with processes of ``T_j`` threads runnable, every thread gets
``min(1, C / sum_j T_j)`` of a core, so every process runs at the same speed,
times the measured ``sharing_efficiency(k)`` of the profile for k processes
(memory bandwidth and cache losses that ideal sharing does not see)::

    speed = min(1, C / sum_j T_j) * sharing_efficiency(k)
    (k single-thread workers: min(1, C / k) * sharing_efficiency(k))

A job of ``work_s`` full-speed seconds ends when the host's *virtual time*
(the integral of ``speed``) has advanced by ``work_s`` since it started; a heap
of finishing virtual times makes each start or end O(log k).

A process that waits for messages either sleeps (gloo: a condition variable)
and leaves the cores to the others, or *polls* (MPICH busy-waits in its
progress engine; so does a parameter server between requests): a polling
process is runnable with one thread the whole time it is not computing, so it
takes its share of the cores exactly like a computing one. ``start_polling``
registers such a process for good; its compute jobs (``polls=True``) replace
its polling thread while they run::

    speed = min(1, C / (sum_j T_j + pollers)) * sharing_efficiency(k + pollers)

Imports: SimPy.
"""
from __future__ import annotations

import functools
import heapq
import itertools
from typing import Callable

import simpy


def succeed_in_order(env: simpy.Environment, dones: list) -> None:
    """End jobs at this instant, in order: an event is succeeded; a run of callbacks
    shares one event (SimPy would process one event per callback back to back, with
    nothing scheduled in between: one event with the same callbacks in the same
    order is the same schedule, with fewer events)."""
    shared = None
    for done in dones:
        if isinstance(done, simpy.Event):
            done.succeed()
            shared = None
        else:
            if shared is None:
                shared = env.event().succeed()
            shared.callbacks.append(done)


class Host:
    def __init__(self, env: simpy.Environment, index: int, cores: int,
                 sharing_efficiency: Callable[[int], float]):
        self.env = env
        self.index = index
        self.cores = cores
        # looked up on every change of k: remember it
        self._efficiency = functools.lru_cache(maxsize=None)(sharing_efficiency)
        # (v_finish, seq, threads, polls, done)
        self._jobs: list[tuple[float, int, int, bool, simpy.Event]] = []
        self._threads = 0
        self._pollers = 0                  # polling processes not computing now
        self._virtual_s = 0.0
        self._speed = 0.0
        self._updated_at = env.now
        self._version = 0
        self._seq = itertools.count()

    @property
    def runnable(self) -> int:
        """Processes wanting a core now: computing ones and polling ones."""
        return len(self._jobs) + self._pollers

    def start_polling(self, proc=None) -> None:
        """One more process that busy-waits whenever it is not computing (for good)."""
        self._advance()
        self._pollers += 1
        self._reschedule()

    def speed(self, processes: int, threads: int) -> float:
        """Speed of each of ``processes`` runnable processes with ``threads`` threads in all."""
        if processes == 0:
            return 0.0
        return min(1.0, self.cores / threads) * self._efficiency(processes)

    def compute(self, work_s: float, threads: int = 1, polls: bool = False, proc=None,
                wakes: bool = False):
        """Event that fires when ``work_s`` seconds of full-speed work are done.
        ``polls``: the job's process is a registered poller, idle while the job runs.
        ``proc`` (whose job it is) and ``wakes`` matter to ``CoreHost`` only."""
        done = self.env.event()
        if work_s <= 0:
            return done.succeed()
        self._advance()
        heapq.heappush(self._jobs, (self._virtual_s + work_s, next(self._seq), threads, polls,
                                    done))
        self._threads += threads
        self._pollers -= polls
        self._reschedule()
        return done

    def compute_wakes(self, jobs, on_done: Callable) -> None:
        """The wake-ups of several processes' calls at this instant: ``compute(work_s,
        wakes=True)`` for each ``(proc, work_s)`` of ``jobs``, in order, with ``on_done(event)``
        called as each ends; one rescheduling for all (the timers one per job would set
        are stale before the clock moves)."""
        self._advance()
        for _proc, work_s in jobs:
            heapq.heappush(self._jobs, (self._virtual_s + work_s, next(self._seq), 1, False,
                                        on_done))
            self._threads += 1
        self._reschedule()

    def wake(self, proc) -> simpy.Event:
        """A woken sleeper runs at once here (the fluid has no ticks; see ``CoreHost``)."""
        return self.env.event().succeed()

    def sleep(self, proc) -> None:
        """Nothing to free in the fluid (see ``CoreHost``)."""

    def _advance(self) -> None:
        self._virtual_s += self._speed * (self.env.now - self._updated_at)
        self._updated_at = self.env.now

    def _reschedule(self) -> None:
        self._version += 1
        self._speed = self.speed(len(self._jobs) + self._pollers, self._threads + self._pollers)
        if not self._jobs:
            return
        dt = max(0.0, (self._jobs[0][0] - self._virtual_s) / self._speed)
        version = self._version
        self.env.timeout(dt).callbacks.append(lambda _ev: self._on_timer(version))

    def _on_timer(self, version: int) -> None:
        if version != self._version:
            return                            # a job started or ended since: stale timer
        self._advance()
        # the job this timer was set for ends now, and any due within rounding of it
        due = max(self._virtual_s, self._jobs[0][0]) + 1e-12 * max(1.0, self._virtual_s)
        ended = []
        while self._jobs and self._jobs[0][0] <= due:
            _, _, threads, polls, done = heapq.heappop(self._jobs)
            self._threads -= threads
            self._pollers += polls
            ended.append(done)
        succeed_in_order(self.env, ended)
        self._reschedule()
