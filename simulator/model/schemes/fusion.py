"""horovod: Horovod's tensor fusion and background cycle, overlapping the backward.

As Horovod (0.12, ``horovod/common/operations.cc``) runs it: every rank hands
each gradient to Horovod as soon as the backward has made it; a background
thread wakes every ``cycle_s`` (its loop sleeps 5 ms, later
``HOROVOD_CYCLE_TIME``), learns which tensors *every* rank has handed over,
fuses them in the order they were requested into buffers of at most
``fusion_bytes`` (``HOROVOD_FUSION_THRESHOLD``, 64 MiB; fusion stops at the
first tensor that does not fit, and a larger tensor goes alone) and enqueues
one allreduce per buffer on the device's stream; the stream runs them one
after another. The step's update waits for the last of them. Learning what
every rank has is a round through rank 0 (each rank sends its requests, rank 0
answers all): ``negotiation_s`` per other rank lengthens every cycle to
``cycle_s + (P - 1) * negotiation_s`` (0 by default: not modelled).

Each gradient tensor is a request of its own (``DistributedOptimizer.compute_gradients``,
``horovod/tensorflow/__init__.py``: one ``allreduce`` a gradient), and the loop fuses
responses tensor by tensor (``BackgroundThreadLoop`` in ``horovod/common/operations.cc``
of 0.12.1: "Attempt to add more responses to this fused response"), so a layer's weight
and bias can fall in different buffers (``workload.ready_tensors``: a layer's tensors,
bias first, all ready with the layer). Gradients become ready layer by layer through the
backward: tensor ``l`` of a rank that started its backward of ``W`` seconds at ``t`` is
ready at ``t + W * c_l``, with ``c_l`` the workload's cumulative backward share up to
its layer (its measured per-layer times, else FLOPs, else parameters). The backward is one
compute job per rank (exact where a rank has its device or core to itself,
as on accelerator hosts). A tensor is ready on all ranks at
``R_l = max_r (t_r + W_r c_l)``; the cycle that takes it is the first tick
``k * cycle_s >= R_l``.

Requests ahead of the data (``Plan.requests_ahead``; TensorFlow 1.x, whose GPU ops
return once their kernels are enqueued): the framework hands a gradient to Horovod
when the op that makes it has been *scheduled*, and Horovod records an event on the
compute stream that says when its data is there (``RecordReadyEvent``,
``horovod/tensorflow/mpi_ops.cc`` of 0.9-0.13). Requests therefore run ahead of the
GPU, and the responses of a cycle are fused by request; before enqueuing a fused
allreduce the background thread waits until the GPU has computed every tensor in it
(``PerformOperation``: "WAIT_FOR_DATA", "WAIT_FOR_OTHER_TENSOR_DATA: ... other inputs
... that are part of the same fusion batch", Horovod's ``docs/timeline.md``). With the
host ahead of the device by the backward (all requests in before the first gradient's
data), the buffers are the tensors in order fused up to the threshold, and buffer
``k`` (its last tensor ``l_k``) starts at ``max(R_{l_k}, end_{k-1})`` (``ahead``): the
loop's cycles and negotiation happen while it waits and cost nothing.

Grouped allreduces (``Plan.horovod_groups``; Horovod 0.21's ``num_groups``): the
framework splits its gradient tensors, in parameter (forward) order, into that many
groups of consecutive tensors (``split_list``) and requests each group as one grouped
allreduce once every gradient in it is computed, so each tensor is handed over with the
last of its group (``handed_over``); the cycles then fuse what is ready as before.
Imports: ``schemes.base`` (and SimPy).
"""
from __future__ import annotations

import bisect
import itertools
import math

import simpy

from simulator.model.schemes.base import Setup
from simulator.model.schemes.collective import _stepped as stepped


def fuse(sizes: list[int], threshold: int) -> list[int]:
    """Horovod's fusion of tensors in request order: a buffer takes the next tensor while
    it fits under ``threshold`` bytes, and stops at the first that does not."""
    buffers: list[int] = []
    current = 0
    for size in sizes:
        if current and current + size > threshold:
            buffers.append(current)
            current = 0
        current += size
    if current:
        buffers.append(current)
    return buffers


def group_starts(n: int, groups: int) -> list[int]:
    """Where each of Horovod's ``num_groups`` groups starts among ``n`` tensors in the
    framework's (forward) order: ``split_list`` (``horovod/common/util.py``, 0.21), chunks of
    ``n // groups`` tensors, the first ``n % groups`` one longer (no empty group counted)."""
    d, r = divmod(n, groups)
    return [i * d + min(i, r) for i in range(min(groups, n))]   # beyond n: empty groups


def handed_over(ready_tensors, groups: int = 0) -> list[float]:
    """The share of the backward done when Horovod is handed each tensor (ready order:
    ``Plan.ready_tensors``): its own cumulative share, or with ``groups`` > 0 its group's.
    A grouped allreduce (``num_groups``, Horovod 0.21: ``grouped_allreduce_async_`` of a
    group once every tensor in it has its gradient, ``_make_hook`` in ``horovod/torch/
    optimizer.py``; MXNet's engine runs the op once all its inputs are ready) is requested
    when the group's last gradient is computed: in ready order the tensor of the group
    that comes first in the forward order."""
    cum = list(itertools.accumulate(share for _, share in ready_tensors))
    n = len(cum)
    if groups <= 0 or n == 0:
        return cum
    starts = group_starts(n, groups)                 # forward order: tensor f is n - 1 - j
    handed = []
    for j in range(n):
        first = starts[bisect.bisect_right(starts, n - 1 - j) - 1]
        handed.append(cum[n - 1 - first])
    return handed


def next_tick(t: float, cycle_s: float) -> float:
    """The first wake-up of a background loop of period ``cycle_s`` at or after ``t``."""
    if cycle_s <= 0:
        return t
    k = math.ceil(t / cycle_s - 1e-9)
    return max(t, k * cycle_s)          # (a tick within rounding of t is t itself)


def cycles(ready_all: list[float], sizes: list[int], cycle_s: float,
           threshold: int) -> list[tuple[float, list[int]]]:
    """(tick, fused buffer sizes) of every cycle that finds tensors ready on all ranks."""
    out, j = [], 0
    while j < len(sizes):
        tick = next_tick(ready_all[j], cycle_s)
        m = j + 1                       # (the tensor this tick waited for, at least)
        while m < len(sizes) and ready_all[m] <= tick:
            m += 1
        out.append((tick, fuse(sizes[j:m], threshold)))
        j = m
    return out


def ahead(ready_all: list[float], sizes: list[int],
          threshold: int) -> list[tuple[float, list[int]]]:
    """(earliest start, [buffer size]) of every fused buffer when the requests precede
    the data: the tensors in order fused up to ``threshold``, each buffer waiting for its
    last tensor's data on all ranks (the stream runs them one after another)."""
    out, j = [], 0
    for size in fuse(sizes, threshold):
        held = 0
        while held < size:
            held += sizes[j]
            j += 1
        out.append((ready_all[j - 1], [size]))
    return out


def last_tensors(sizes: list[int], threshold: int) -> list[tuple[int, int]]:
    """(size, index of its last tensor) of each buffer ``ahead`` makes (its readiness
    taken as the tensors' own indices)."""
    return [(bs[0], int(t)) for t, bs in ahead(list(range(len(sizes))), sizes, threshold)]


MIN_TICK_S = 1e-4      # with a cycle of 0 and slowed compute: how often readiness is checked


class Fusion:
    """The background threads of all ranks as one coordinator (rank 0 decides for all)."""

    def __init__(self, env: simpy.Environment, setup: Setup):
        self.env, self.setup = env, setup
        plan = setup.plan
        self.sizes = [b for b, _ in plan.ready_tensors]
        self.cum = handed_over(plan.ready_tensors, plan.horovod_groups)
        self.queues = {w.rank: simpy.Store(env) for w in setup.workers}
        self.started: dict[int, list[tuple[float, float]]] = {}
        self.reduced: dict[tuple[int, int], simpy.Event] = {}
        self.busy: dict[int, list[tuple[float, float]]] = {}   # rank -> its stream's spans

    def reduced_event(self, rank: int, it: int) -> simpy.Event:
        key = (rank, it)
        if key not in self.reduced:
            self.reduced[key] = self.env.event()
        return self.reduced[key]

    def backward_started(self, it: int, work_s: float, rank: int) -> None:
        starts = self.started.setdefault(it, [])
        starts.append((self.env.now, work_s, rank))
        if len(starts) == len(self.queues):
            starts = self.started.pop(it)
            interference = self.setup.extra.get("interference")
            if self.setup.plan.requests_ahead and interference is not None:
                self.env.process(self._ahead_slowed(it, starts, interference))
            else:
                self.env.process(self._negotiate(it, starts) if interference is None
                                 else self._negotiate_slowed(it, starts, interference))

    def _send(self, it: int, buffers: list[int], last_cycle: bool) -> None:
        for b, size in enumerate(buffers):
            last = last_cycle and b == len(buffers) - 1
            for q in self.queues.values():
                q.put((it, size, last))

    def _negotiate_slowed(self, it: int, starts, interference):
        """The cycles when the allreduces slow the backward (``hardware.interference``):
        tick by tick, each cycle takes the layers every rank has finished by then, as far
        as its compute got under the allreduces in flight so far."""
        plan, env = self.setup.plan, self.env
        step = plan.cycle_period_s or MIN_TICK_S
        j, n = 0, len(self.sizes)
        while j < n:
            tick = next_tick(env.now, plan.cycle_period_s)
            if tick > env.now:
                yield env.timeout(tick - env.now)
            m = j
            while m < n and all(interference.done_by(r, t, w * self.cum[m])
                                for t, w, r in starts):
                m += 1
            if m > j:
                self._send(it, fuse(self.sizes[j:m], plan.fusion_bytes), m == n)
                j = m
            if j < n:
                yield env.timeout(step)

    def _ahead_slowed(self, it: int, starts, interference):
        """``ahead`` when the allreduces slow the backward: each buffer is sent once
        every rank has computed its last tensor, as far as its compute got under the
        allreduces in flight (recomputed whenever one starts or ends)."""
        env = self.env
        buffers = last_tensors(self.sizes, self.setup.plan.fusion_bytes)
        for k, (size, j) in enumerate(buffers):
            while True:
                ready = max(interference.ready_at(r, t, w * self.cum[j]) for t, w, r in starts)
                if ready <= env.now * (1 + 1e-12):
                    break
                yield env.timeout(ready - env.now) | env.any_of(
                    [interference.changed_event(r) for _, _, r in starts])
            self._send(it, [size], k == len(buffers) - 1)

    def _negotiate(self, it: int, starts: list[tuple[float, float, int]]):
        plan = self.setup.plan
        ready_all = [max(t + w * c for t, w, _ in starts) for c in self.cum]
        schedule = (ahead(ready_all, self.sizes, plan.fusion_bytes) if plan.requests_ahead
                    else cycles(ready_all, self.sizes, plan.cycle_period_s, plan.fusion_bytes))
        for k, (tick, buffers) in enumerate(schedule):
            if tick > self.env.now:
                yield self.env.timeout(tick - self.env.now)
            self._send(it, buffers, k == len(schedule) - 1)

    def stream(self, rank: int):
        """The device's stream: the enqueued allreduces one after another."""
        plan, comm = self.setup.plan, self.setup.comm
        interference = self.setup.extra.get("interference")
        done = 0
        while done < plan.iterations:
            it, size, last = yield self.queues[rank].get()
            if interference is not None:            # in flight from its launch to its end
                interference.comm_started(rank)
            began = self.env.now
            yield from comm.allreduce(rank, plan.worker_ranks, size, plan.gradient_algorithm)
            self.busy.setdefault(rank, []).append((began, self.env.now))
            if interference is not None:
                interference.comm_ended(rank)
            if last:
                self.reduced_event(rank, it).succeed()
                done += 1


    def cycle_wait(self, rank: int, t0: float, t1: float) -> None:
        """Record as ``wait`` (named ``cycle``) the part of ``[t0, t1)`` a rank spent
        blocked for its gradients with no allreduce of its own in flight: waiting for the
        background loop's next tick (and for the other ranks to be ready)."""
        rec, t = self.setup.recorder, t0
        for a, b in self.busy.pop(rank, []):
            if b > t and a < t1:
                rec.add(rank, "wait", t, min(a, t1), "cycle")
                t = max(t, b)
        rec.add(rank, "wait", t, t1, "cycle")


def uncovered_s(t0, t1: float, spans):
    """For each start in ``t0`` (an array), the time of ``[t0, t1)`` outside the disjoint
    ``spans`` [(a, b), ...]: ``Fusion.cycle_wait``'s total, for the fast paths."""
    import numpy as np
    t0 = np.asarray(t0, dtype=float)
    covered = sum((np.clip(np.minimum(b, t1) - np.maximum(a, t0), 0.0, None)
                   for a, b in spans), np.zeros_like(t0))
    return np.maximum(t1 - t0, 0.0) - covered


def start_horovod(env, setup: Setup):
    fusion = Fusion(env, setup)
    for w in setup.workers:
        env.process(fusion.stream(w.rank))
        env.process(horovod_rank(env, w, fusion, setup))


def horovod_rank(env, worker, fusion: Fusion, setup: Setup):
    plan, rec, me = setup.plan, setup.recorder, worker.rank
    bf = plan.backward_fraction
    for i in range(plan.iterations):
        step_s = worker.step_s[i]
        t0 = env.now
        yield worker.compute(step_s * (1 - bf))          # forward (and update)
        fusion.backward_started(i, step_s * bf, me)
        yield worker.compute(step_s * bf)
        rec.add(me, "compute", t0, env.now, "step")
        rec.step_done(me, env.now)
        backward_end = env.now
        yield fusion.reduced_event(me, i)                # the update waits for the gradients
        fusion.cycle_wait(me, backward_end, env.now)
        stepped(env, me, rec, i)                         # (the serial step, for a replay)
