"""Compute slowed while NCCL runs on the same GPU: the cost of overlapping communication.

NCCL's kernels run on the GPU's SMs and stream through its memory, so a backward kernel
that runs beside an allreduce gets fewer SMs and less memory bandwidth. Measured across
A100, H100, MI250 and MI210 with GPT and LLaMA layers, compute overlapped with
communication ran on average 18.9% slower (at most 40%) than alone ("Characterizing
Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning: Performance
and Power Implications", arXiv 2507.03114, 2025). The model: while
a collective of a rank is in flight (from the call's launch on the rank's stream to its
end, spinning included), that rank's compute advances at ``1 / (1 + s)`` of its speed
(``Hardware.compute_slowdown`` = s); the collective's own time is unchanged.

For a rank whose compute starts at ``t0`` and needs ``W`` seconds alone, with
collectives in flight over the intervals ``[a_k, b_k)``, the compute ends at the first
``t`` where::

    (t - t0) - s / (1 + s) * |[t0, t) ∩ U_k [a_k, b_k)| = W

``progress_end_s`` solves it; ``ddp_iteration_s`` is one DDP iteration of identical ranks
as a closed form (buckets in one stream, the last bucket exposed), which the SimPy model
(``Interference``) must reproduce. Imports: SimPy.
"""
from __future__ import annotations

import math

import simpy


def progress_end_s(t0: float, work_s: float, intervals, slowdown: float) -> float:
    """When ``work_s`` of compute started at ``t0`` ends, slowed by ``1 + slowdown``
    inside the sorted, disjoint ``intervals`` [(a, b), ...] and at full speed outside."""
    t, left = t0, work_s
    rate = 1.0 / (1.0 + slowdown)
    for a, b in intervals:
        if b <= t:
            continue
        if a > t:                              # full speed up to the next interval
            if left <= a - t:
                return t + left
            left -= a - t
            t = a
        if left <= (b - t) * rate:            # ends inside the interval
            return t + left / rate
        left -= (b - t) * rate
        t = b
    return t + left


def progress_end_array(t0, work, intervals, slowdown: float):
    """``progress_end_s`` for arrays of starts and works (any shape) over intervals
    ``[(a, b), ...]`` in order of start, each bound an array of that shape or a scalar."""
    import numpy as np
    t = np.array(t0, dtype=float, copy=True)
    left = np.array(work, dtype=float, copy=True)
    rate = 1.0 / (1.0 + slowdown)
    end = np.full(np.broadcast(t, left).shape, np.nan)
    done = np.zeros(end.shape, dtype=bool)
    for a, b in intervals:
        gap = np.maximum(a - t, 0.0)
        fin = ~done & (left <= gap)
        end[fin] = (t + left)[fin]
        done |= fin
        left = np.where(done, left, left - gap)
        t = np.maximum(t, a)
        span = np.maximum(b - t, 0.0)
        fin = ~done & (left <= span * rate)
        end[fin] = (t + left / rate)[fin]
        done |= fin
        left = np.where(done, left, left - span * rate)
        t = np.maximum(t, b)
    end[~done] = (t + left)[~done]
    return end


def ddp_iteration_s(forward_s: float, backward_s: float, shares, comm_s,
                    slowdown: float = 0.0) -> float:
    """One iteration of DDP on identical ranks, started at 0: the forward (and update),
    then the backward, whose bucket j is ready once ``sum(shares[:j+1])`` of it is done;
    bucket j's allreduce starts when it is ready and the one before has ended (one
    stream) and takes ``comm_s[j]``; the last bucket is ready at the backward's end, so
    its allreduce is exposed. While an allreduce is in flight the backward runs
    ``1 + slowdown`` slower. The iteration ends with the last allreduce::

        ready_j = progress_end_s(forward, backward * cum_j, allreduces so far)
        start_j = max(ready_j, end_{j-1}),   end_j = start_j + comm_j
    """
    intervals: list[tuple[float, float]] = []
    end, cum = 0.0, 0.0
    for share, c in zip(shares, comm_s):
        cum += share
        ready = progress_end_s(forward_s, backward_s * min(cum, 1.0), intervals, slowdown)
        start = max(ready, end)
        end = start + c
        intervals.append((start, end))
    return max(end, progress_end_s(forward_s, backward_s, intervals, slowdown))


class Interference:
    """The ranks' devices: which have a collective in flight, and compute that slows
    while one is (SimPy). ``compute(rank, work_s)`` is the event of ``work_s`` seconds of
    full-speed compute done; ``comm_started``/``comm_ended`` bracket a rank's call."""

    def __init__(self, env: simpy.Environment, slowdown: float):
        self.env, self.slowdown = env, slowdown
        self.in_flight: dict[int, int] = {}
        self.changed: dict[int, simpy.Event] = {}
        self.intervals: dict[int, list[list]] = {}     # rank -> [[start, end or None]]

    def comm_started(self, rank: int) -> None:
        self.in_flight[rank] = self.in_flight.get(rank, 0) + 1
        if self.in_flight[rank] == 1:
            self.intervals.setdefault(rank, []).append([self.env.now, None])
        self._signal(rank)

    def comm_ended(self, rank: int) -> None:
        self.in_flight[rank] -= 1
        if self.in_flight[rank] == 0:
            self.intervals[rank][-1][1] = self.env.now
        self._signal(rank)

    def done_by(self, rank: int, t0: float, work_s: float) -> bool:
        """Whether ``work_s`` of compute started at ``t0`` on ``rank`` is done by now
        (what ran in flight so far slowed it; the history before ``t0`` is dropped)."""
        now = self.env.now
        spans = self.intervals.get(rank, [])
        while spans and spans[0][1] is not None and spans[0][1] <= t0:
            spans.pop(0)
        closed = [(a, now if b is None else b) for a, b in spans if a < now]
        return progress_end_s(t0, work_s, closed, self.slowdown) <= now * (1 + 1e-12)

    def ready_at(self, rank: int, t0: float, work_s: float) -> float:
        """When ``work_s`` of compute started at ``t0`` on ``rank`` ends if the collectives
        in flight now run on for ever (exact until one starts or ends: ``changed_event``)."""
        spans = [(a, math.inf if b is None else b)
                 for a, b in self.intervals.get(rank, []) if b is None or b > t0]
        return progress_end_s(t0, work_s, spans, self.slowdown)

    def changed_event(self, rank: int) -> simpy.Event:
        """The event of the next start or end of a collective on ``rank``."""
        return self.changed.setdefault(rank, self.env.event())

    def _signal(self, rank: int) -> None:
        ev = self.changed.pop(rank, None)
        if ev is not None:
            ev.succeed()

    def compute(self, rank: int, work_s: float) -> simpy.Process:
        return self.env.process(self._compute(rank, work_s))

    def _compute(self, rank: int, work_s: float):
        env, left = self.env, work_s
        while left > 1e-15:
            rate = 1.0 / (1.0 + self.slowdown) if self.in_flight.get(rank) else 1.0
            changed = self.changed.setdefault(rank, env.event())
            t0 = env.now
            yield env.timeout(left / rate) | changed
            left -= (env.now - t0) * rate
            if not changed.triggered:          # finished before anything changed
                return
