"""What happened: per-rank compute / communication / waiting time, staleness, a timeline.

``compute`` is a rank's own work (forward, backward, update, server service);
``wait`` is time blocked until the slowest rank reaches a collective (or until
a server replies; for Horovod, named ``cycle``, until its background loop's next
tick takes the gradients, ``schemes.fusion``); ``comm`` is the rest of the time
spent in communication.
With ``trace=True`` every interval is also kept as a Chrome-trace event
(``chrome://tracing``: ``ph = "X"``, microseconds, pid = host, tid = rank).
With a ``ScheduleLog`` the scheme loops' updates, averagings, mixes and
evaluation points are kept too (``update``, ``average``, ``mix``,
``after_step``, ``synchronous_step``, ``server_step``: no-ops without one).

Imports: the standard library only.
"""
from __future__ import annotations

from collections import Counter

from simulator.model.schedule_log import ScheduleLog


class Recorder:
    def __init__(self, placement: tuple[int, ...], trace: bool = False,
                 schedule: ScheduleLog | None = None):
        n = len(placement)
        self.schedule = schedule
        self.placement = placement
        self.compute_s = [0.0] * n
        self.comm_s = [0.0] * n
        self.wait_s = [0.0] * n
        self.staleness: Counter[int] = Counter()
        self._by_kind = {"compute": self.compute_s, "comm": self.comm_s, "wait": self.wait_s}
        self.trace = trace
        self.spans: list[dict] = []
        self.steps_done = [0] * n           # training steps each rank has finished
        self.watch: tuple[int, ...] = ()    # step counts at which to note the totals
        self.noted: dict[tuple[int, int], tuple[float, float, float, float]] = {}
        self.tracked = 0                    # workers whose step ends are tracked (0: none)
        self.step_end_s = [0.0]             # when the last of them finished step j
        self.last_update_s = 0.0            # when the last update was applied
        self._finished = [0]                # how many of them have finished step j
        self.on_step_end = None             # called with j when the last finishes step j

    def step_done(self, rank: int, now: float) -> None:
        """``rank`` finished a training step at ``now``; at a watched count, note when and
        its compute / comm / wait so far (the steady-state window of ``engine.steady``);
        with ``tracked`` workers, note when the last of them finished each step."""
        k = self.steps_done[rank] = self.steps_done[rank] + 1
        if k in self.watch:
            self.noted[rank, k] = (now, self.compute_s[rank], self.comm_s[rank],
                                   self.wait_s[rank])
        if self.tracked:
            if k == len(self._finished):
                self._finished.append(0)
                self.step_end_s.append(now)
            self._finished[k] += 1
            if self._finished[k] == self.tracked:
                self.step_end_s[k] = now
                if self.on_step_end is not None:
                    self.on_step_end(k)

    def add(self, rank: int, kind: str, t0: float, t1: float, name: str = "") -> None:
        """Account ``t1 - t0`` seconds of ``kind`` (compute | comm | wait) to ``rank``."""
        dt = t1 - t0
        if dt <= 0:
            return
        self._by_kind[kind][rank] += dt
        if self.trace:
            self.spans.append({"name": name or kind, "cat": kind, "ph": "X",
                               "ts": t0 * 1e6, "dur": dt * 1e6,
                               "pid": self.placement[rank], "tid": rank})

    def add_staleness(self, updates_between: int) -> None:
        self.staleness[updates_between] += 1

    # --- the update schedule (only when one is asked for) ---------------------

    def update(self, t: float, worker: int, i: int, read: int, applied: int,
               shard: int | None = None) -> None:
        if t > self.last_update_s:
            self.last_update_s = t
        if self.schedule is not None:
            self.schedule.update(t, worker, i, read, applied, shard)

    def average(self, t: float, workers: tuple[int, ...], key) -> None:
        if self.schedule is not None:
            self.schedule.average(t, workers, key)

    def mix(self, t: float, worker: int, weight: float, reply: bool) -> None:
        if self.schedule is not None:
            self.schedule.mix(t, worker, weight, reply)

    def after_step(self, t: float, worker: int, steps_done: int) -> None:
        if self.schedule is not None:
            self.schedule.after_step(t, worker, steps_done)

    def synchronous_step(self, t: float, i: int) -> None:
        if self.schedule is not None:
            self.schedule.synchronous_step(t, i)

    def server_step(self, t: float, updates_done: int) -> None:
        if self.schedule is not None:
            self.schedule.server_step(t, updates_done)

    def chrome_trace(self, meta: dict | None = None) -> dict:
        names = [{"name": "process_name", "ph": "M", "pid": h, "args": {"name": f"host {h}"}}
                 for h in sorted(set(self.placement))]
        names += [{"name": "thread_name", "ph": "M", "pid": h, "tid": r,
                   "args": {"name": f"rank {r}"}} for r, h in enumerate(self.placement)]
        return {"traceEvents": names + self.spans, "displayTimeUnit": "ms",
                "otherData": meta or {}}
