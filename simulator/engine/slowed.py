"""The fast path of DDP and Horovod when NCCL slows the backward (``hardware.interference``).

Vectorised over iterations and workers as ``engine.fast`` is, the backward's progress
computed with the allreduces in flight (``progress_end_array``, ``progress_at``):

* DDP: bucket j of iteration i is ready on rank w once its share of the backward is done
  under the allreduces of buckets j' < j, each in flight on w from its arrival
  ``max(ready, previous end)`` to its end (``interference.ddp_iteration_s`` per rank);
* Horovod: the allreduces of one iteration are the same on every rank (the stream takes
  each fused buffer at ``max(tick, previous end)``), so one clock (``SharedClock``) gives
  every rank's progress; the next cycle that takes layer j is the first tick once every
  rank has done it under the allreduces already scheduled (no later one can start before
  it is ready), and it takes every layer done by then.

Imports: numpy, model (hardware.interference, schemes.fusion).
"""
from __future__ import annotations

import numpy as np

from simulator.model.hardware.interference import progress_end_array
from simulator.model.schemes.fusion import (fuse, handed_over, last_tensors, next_tick,
                                            uncovered_s)


def ddp_slowed(plan, steps: np.ndarray, allreduce_s, speed: np.ndarray, slowdown: float):
    """As ``engine.fast._ddp`` (the first iteration with ``plan.first_buckets``)."""
    busy = steps / speed[:, None]                                        # (P, I)
    parts = [_ddp_buckets(plan.backward_fraction, busy[:, 1:], plan.buckets, allreduce_s,
                          slowdown)]
    if busy.shape[1]:
        parts.append(_ddp_buckets(plan.backward_fraction, busy[:, :1],
                                  plan.first_buckets or plan.buckets, allreduce_s, slowdown))
    return (float(sum(p[0] for p in parts)), *(sum(p[k] for p in parts) for k in (1, 2, 3)))


def _ddp_buckets(bf: float, busy: np.ndarray, buckets, allreduce_s, slowdown: float):
    """(time, compute, comm and wait per worker) of the iterations of ``busy`` (P, I)."""
    cum = np.minimum(np.cumsum([s for _, s in buckets]), 1.0)
    cost = [allreduce_s(nb) for nb, _ in buckets]
    forward, backward = busy.T * (1 - bf), busy.T * bf                   # (I, P)
    iterations, workers = forward.shape
    end = np.zeros(iterations)
    comm, wait = np.zeros(workers), np.zeros(workers)
    intervals = []
    for j, c in enumerate(cost):
        ready = progress_end_array(forward, backward * cum[j], intervals, slowdown)
        arrive = np.maximum(ready, end[:, None])
        start = arrive.max(axis=1) if workers else end
        if workers > 1:
            wait += (start[:, None] - arrive).sum(axis=0)
            comm += c * iterations
        end = start + c
        intervals.append((arrive, end[:, None]))
    backward_end = progress_end_array(forward, backward, intervals, slowdown)
    total = np.maximum(end, backward_end.max(axis=1)) if workers else end
    return float(total.sum()), backward_end.sum(axis=0), comm, wait


class SharedClock:
    """Compute progress on ranks that share their in-flight intervals (Horovod's stream
    runs the same allreduces on every rank): with ``O(x)`` the time in flight before x,
    ``f(x) = x - s / (1 + s) * O(x)`` is the same for all, and a rank's work from t0 to
    T is ``f(T) - f(t0)``; ``f`` rises, so its inverse gives when work is done."""

    def __init__(self, slowdown: float):
        self.c = slowdown / (1.0 + slowdown)
        self.a: list[float] = []
        self.b: list[float] = []

    def add(self, a: float, b: float) -> None:
        self.a.append(a)
        self.b.append(b)
        self._arrays = None

    def _prepare(self):
        if self._arrays is None:
            a, b = np.array(self.a), np.array(self.b)
            cum = np.concatenate([[0.0], np.cumsum(b - a)])
            points = np.sort(np.concatenate([a, b]))
            self._arrays = (a, b, cum, points, self.f(points, (a, b, cum)))
        return self._arrays

    def f(self, x, arrays=None):
        x = np.asarray(x, dtype=float)
        if not self.a:
            return x
        a, b, cum = arrays or self._prepare()[:3]
        k = np.searchsorted(a, x, side="right")
        inside = np.where(k > 0, np.minimum(x - a[np.maximum(k - 1, 0)],
                                            (b - a)[np.maximum(k - 1, 0)]), 0.0)
        return x - self.c * (cum[np.maximum(k - 1, 0)] * (k > 0) + np.maximum(inside, 0.0))

    def time_of(self, y):
        """The x with f(x) = y."""
        y = np.asarray(y, dtype=float)
        if not self.a:
            return y
        _, _, _, points, values = self._prepare()
        return np.where(y <= values[0], y,
                        np.where(y >= values[-1], points[-1] + (y - values[-1]),
                                 np.interp(y, values, points)))


class _Stream:
    """One Horovod iteration's stream under the slowdown: fused allreduces one after
    another, each slowing the backward it overlaps (``SharedClock``)."""

    def __init__(self, t0, work, start: float, slowdown: float, allreduce_s, cost: dict):
        self.t0, self.work, self.end, self.comm_s = t0, work, start, 0.0
        self.clock, self.allreduce_s, self.cost = SharedClock(slowdown), allreduce_s, cost

    def ready_by(self, share: float) -> float:
        """When every rank has done ``share`` of its backward."""
        return float(self.clock.time_of(self.clock.f(self.t0) + self.work * share).max())

    def share_done(self, t: float) -> float:
        """The least share of the backward any rank has done by ``t``."""
        return float(((self.clock.f(t) - self.clock.f(self.t0)) / self.work).min())

    def enqueue(self, size: int, earliest: float) -> None:
        if size not in self.cost:
            self.cost[size] = self.allreduce_s(size)
        a = max(self.end, earliest)
        self.end = a + self.cost[size]
        self.clock.add(a, self.end)
        self.comm_s += self.cost[size]


def horovod_slowed(plan, steps: np.ndarray, allreduce_s, speed: np.ndarray, slowdown: float):
    bf = plan.backward_fraction
    sizes = [b for b, _ in plan.ready_tensors]
    cum = np.minimum(handed_over(plan.ready_tensors, plan.horovod_groups), 1.0)
    busy = steps / speed[:, None]                                        # (P, I)
    cost: dict[int, float] = {}
    start, comm_s, compute = 0.0, 0.0, np.zeros(busy.shape[0])
    wait = np.zeros(busy.shape[0])
    for i in range(busy.shape[1]):
        t0 = start + busy[:, i] * (1 - bf)                               # backward starts
        stream = _Stream(t0, busy[:, i] * bf, start, slowdown, allreduce_s, cost)
        j = 0
        if plan.requests_ahead:                 # each fused buffer waits for its data
            for size, last in last_tensors(sizes, plan.fusion_bytes):
                stream.enqueue(size, stream.ready_by(cum[last]))
            j = len(sizes)
        while j < len(sizes):
            tick = next_tick(stream.ready_by(cum[j]), plan.cycle_period_s)
            done = stream.share_done(tick)
            m = max(j + 1, int(np.searchsorted(cum, done * (1 + 1e-12), side="right")))
            for size in fuse(sizes[j:m], plan.fusion_bytes):
                stream.enqueue(size, tick)
            j = m
        clock = stream.clock
        backward_end = clock.time_of(clock.f(t0) + stream.work)
        compute += backward_end - start
        wait += uncovered_s(backward_end, stream.end, zip(clock.a, clock.b))   # the cycle's
        comm_s += stream.comm_s
        start = max(stream.end, float(backward_end.max()))
    workers = busy.shape[0]
    return start, compute, np.full(workers, comm_s if workers > 1 else 0.0), wait
