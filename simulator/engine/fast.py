"""The fast path: synchronous schemes with analytic communication, without events.

In a synchronous scheme with analytic collectives every worker leaves each
collective at the same instant, so a run is a sequence of *segments*: all
workers start computing together, and the segment ends with a collective.
Processor sharing of jobs that start together has a closed form: sort the
works ``w_1 <= ... <= w_k`` of the k jobs on a host; while n jobs remain each
runs at ``speed(n) = min(1, C / (n T)) * sharing_efficiency(n)``, so::

    finish_j = finish_{j-1} + (w_j - w_{j-1}) / speed(k - j + 1)

A worker that keeps computing through a segment is one job of the summed
work. The segment's time is the slowest finish plus the collective's closed
form. This is what the SimPy model computes with events, vectorised with
numpy over hosts and segments; the tests check that both agree. (``ddp`` is
exact only when speeds stay constant: no host oversubscribed.) With
``Cluster.shared_cores`` the jobs of all hosts share one pool of cores.
The cores are a fluid here: with a profile's ``balance_delay_s`` (per-core run
queues, ``model.hardware.cores``) ``engine="auto"`` takes the SimPy model for an
oversubscribed host, and a forced ``engine="fast"`` ignores the delay.

psgd's average where its MPI ranks sleep between polls is played out poll by poll
(``comm.iallreduce``), each rank leaving at its own poll: exact for one average at the
end; ``engine.run`` sends averages every K steps to the SimPy model.

Imports: numpy, simulator.model.comm.closed_forms, simulator.model (comm, network), engine
(placement, result).
"""
from __future__ import annotations

import numpy as np

from simulator.engine.placement import Layout
from simulator.engine.result import build_result
from simulator.engine.slowed import ddp_slowed, horovod_slowed
from simulator.model.comm import call_cpu_s
from simulator.model.comm.choice import call_latency_s, ranks_per_host, resolve_algorithm
from simulator.model.comm.closed_forms import steps as step_count
from simulator.model.comm.costs import collective_time_s
from simulator.model.comm.iallreduce import polled, shared_leave_s
from simulator.model.network import nccl_order
from simulator.model.schemes.fusion import ahead, cycles, handed_over, uncovered_s


def shared_finish_s(work_s: np.ndarray, host_of: np.ndarray, cores: int, threads: int,
                    efficiency, polls: bool = False) -> np.ndarray:
    """Finish times (S, P) of jobs (S segments x P workers) that start together on their hosts.

    ``polls``: workers busy-wait once their job is done (see ``Host``), so a host's
    runnable count stays ``k`` and only the threads change."""
    segments, workers = work_s.shape
    counts = np.bincount(host_of)
    kmax = int(counts.max())
    slot = np.zeros(workers, dtype=int)
    seen = np.zeros(len(counts), dtype=int)
    for p, h in enumerate(host_of):
        slot[p] = seen[h]
        seen[h] += 1
    grid = np.zeros((segments, len(counts), kmax))
    grid[:, host_of, slot] = work_s                # zero padding finishes at once, first
    order = np.argsort(grid, axis=2, kind="stable")
    w = np.take_along_axis(grid, order, axis=2)
    speed = np.ones((len(counts), kmax))
    for h, k in enumerate(counts):
        for j in range(kmax - k, kmax):            # the pads of host h come first
            n = kmax - j                           # jobs still computing
            idle = k - n if polls else 0           # done, and polling
            speed[h, j] = min(1.0, cores / (n * threads + idle)) * efficiency(int(n + idle))
    finish_sorted = np.cumsum(np.diff(w, axis=2, prepend=0.0) / speed[None], axis=2)
    finish = np.empty_like(finish_sorted)
    np.put_along_axis(finish, order, finish_sorted, axis=2)
    return finish[:, host_of, slot]


def collective_s(run: Layout, kind: str, ranks, n: float, algorithm: str = "ring") -> float:
    """One collective of ``n`` bytes over ``ranks`` on the laid-out run, as this path and
    the SimPy model's analytic fidelity price it: its closed form on the routes, NCCL's
    call latency, and on CPU hosts at least the CPU its calls take."""
    spec, cluster, profile = run.spec, run.cluster, run.profile
    placement, transport, routes = run.placement, run.transport, run.routes
    if kind == "allreduce":
        if transport.backend == "nccl":
            ranks = nccl_order(placement, ranks)
        algorithm = resolve_algorithm(transport.backend, algorithm, ranks, n, routes)
    t = collective_time_s(kind, ranks, n, routes, transport.gamma_s_per_byte, algorithm)
    if transport.step_extra_s(kind) > 0:
        t += transport.step_extra_s(kind) * step_count(kind, len(ranks), n, algorithm,
                                                       ranks_per_host(routes, ranks))
    if len(ranks) > 1:
        t += call_latency_s(transport, routes, algorithm)
    if spec.polls or cluster.device is not None:   # (devices: no CPU of calls, as des)
        return t
    spans = len({placement[r] for r in ranks}) > 1
    return max(t, _cpu_s(transport, kind, ranks, n, algorithm, run.worker_pools, cluster,
                         profile.sharing_efficiency, spans))


def simulate_fast(run: Layout, cfg, plan, workload, seed, steps: np.ndarray):
    spec, cluster, profile = run.spec, run.cluster, run.profile
    placement, transport, routes = run.placement, run.transport, run.routes
    g = transport.gamma_s_per_byte
    # compute contends per pool of cores (a host's own, or the machine's with shared_cores)
    host_of = run.worker_pools
    finish = lambda work: shared_finish_s(work, host_of, cluster.cores_per_host,  # noqa: E731
                                          workload.threads_per_worker, profile.sharing_efficiency,
                                          spec.polls)

    def coll(kind, ranks, n, algorithm="ring"):
        return collective_s(run, kind, ranks, n, algorithm)

    ranks, n, p = plan.worker_ranks, plan.param_bytes, plan.workers
    grads, alg = plan.grad_bytes, plan.gradient_algorithm
    if spec.overlaps_backward:
        counts = np.bincount(host_of)[host_of]
        speed = np.array([min(1.0, cluster.cores_per_host / (k * workload.threads_per_worker))
                          * profile.sharing_efficiency(int(k)) for k in counts])
        cost = lambda nb: coll("allreduce", ranks, nb, alg)  # noqa: E731
        slowdown = (cluster.hardware.slowdown_at(plan.precision) if cluster.device is not None
                else 0.0)
        if slowdown > 0 and p > 1:        # NCCL slows the backward it overlaps
            slowed = ddp_slowed if spec.exchange == "buckets" else horovod_slowed
            parts = slowed(plan, steps, cost, speed, slowdown)
        else:
            parts = (_ddp(plan, steps, cost, speed) if spec.exchange == "buckets"
                     else _horovod(plan, steps, cost, speed))
        if spec.exchange == "buckets" and p > 1:   # DDP broadcasts the weights when built
            parts = _started(parts, coll("bcast", ranks, n))
    elif spec.exchange in ("none", "average"):
        k = plan.avg_every or plan.iterations
        bounds = list(range(0, plan.iterations, k)) + [plan.iterations]
        work = np.stack([steps[:, a:b].sum(axis=1) for a, b in zip(bounds, bounds[1:])])
        if spec.exchange == "average" and p > 1 and polled(transport):   # one segment (run)
            done = finish(work)[-1]
            parts = _polled_end(done, shared_leave_s(list(done), transport.poll_s, n,
                                                     routes, ranks, reduce_s_per_byte=g))
        else:
            parts = _segments(finish(work), coll("allreduce", ranks, n, plan.algorithm))
    else:
        per_iter = {  # (only the scheme's own is priced; the flat vector's copies with it)
            "gather_scatter": lambda: (coll("gather", ranks, grads) + coll("scatter", ranks, grads)
                                       + plan.new_copy_s + plan.kept_copy_s),
            "per_tensor": lambda: sum(coll("allreduce", ranks, tb, alg)
                                      for tb in plan.tensor_bytes),
            "flat": lambda: (coll("allreduce", ranks, grads, plan.algorithm)
                             + plan.new_copy_s + 2 * plan.kept_copy_s),
        }[spec.exchange]()
        parts = _segments(finish(steps.T), per_iter)
        if spec.exchange == "gather_scatter" and p > 1:   # the root's sum, stack, / size
            average_s = (g * (p - 1) * grads + (p + 2) * plan.new_copy_s) * plan.iterations
            parts = _root_average(parts, average_s)
    time_s, compute, comm, wait = parts
    return build_result(spec, cfg, plan, workload, seed, "fast", time_s, compute, comm, wait,
                   {}, 0, 0.0, None)


def _cpu_s(transport, kind, ranks, n, algorithm, host_of, cluster, efficiency,
           spans: bool) -> float:
    """When the last rank's CPU for a call is done, every rank having started together
    (``comm.call_cpu_s``): a sleeping backend's calls need cores too; ``spans``: its ranks
    are on several hosts (the link's CPU per message applies where it was measured)."""
    link = cluster.link
    over = link if spans and link is not None and (
        link.cpu_s_per_message > 0 or link.cpu_s_per_byte > 0) else None
    work = np.array([[call_cpu_s(transport, kind, len(ranks), n, algorithm, i == 0, over)
                      for i in range(len(ranks))]])
    if not work.any():
        return 0.0
    return float(shared_finish_s(work, host_of, cluster.cores_per_host, 1, efficiency).max())


def _segments(finish: np.ndarray, comm_s: float):
    """Each segment: compute until the slowest finishes, then a collective of ``comm_s``."""
    slowest = finish.max(axis=1)
    time_s = float(slowest.sum() + comm_s * len(slowest))
    comm = np.full(finish.shape[1], comm_s * len(slowest)) if comm_s > 0 else np.zeros(finish.shape[1])
    wait = (slowest[:, None] - finish).sum(axis=0) if finish.shape[1] > 1 else np.zeros(1)
    return time_s, finish.sum(axis=0), comm, wait


def _polled_end(arrive: np.ndarray, leave: list[float]):
    """One segment ending in psgd's polled average (``comm.iallreduce``): each rank waits
    for the last one in, then is in the call until it leaves at its own ``leave``."""
    last, leave = arrive.max(), np.asarray(leave)
    return float(leave.max()), arrive.copy(), leave - last, last - arrive


def _started(parts, start_s: float):
    """A collective every worker runs before its first step (``start_s``), as SimPy runs it."""
    time_s, compute, comm, wait = parts
    return time_s + start_s, compute, comm + start_s, wait


def _root_average(parts, average_s: float):
    """gather_scatter: rank 0 adds the gradients up while the others wait for the scatter."""
    time_s, compute, comm, wait = parts
    compute, wait = compute.copy(), wait.copy()
    compute[0] += average_s
    wait[1:] += average_s
    return time_s + average_s, compute, comm, wait


def _ddp(plan, steps: np.ndarray, allreduce_s, speed: np.ndarray):
    """Buckets become ready during the backward; one allreduce stream per iteration (the
    first iteration with ``plan.first_buckets``). Exact while every worker keeps one
    speed (``speed``, per worker) through a step."""
    busy = steps / speed[:, None]                                          # (P, I)
    parts = [_ddp_buckets(plan.backward_fraction, busy[:, 1:], plan.buckets, allreduce_s)]
    if busy.shape[1]:
        parts.append(_ddp_buckets(plan.backward_fraction, busy[:, :1],
                                  plan.first_buckets or plan.buckets, allreduce_s))
    end = sum(part[0] for part in parts)
    return float(end), busy.sum(axis=1), sum(p[1] for p in parts), sum(p[2] for p in parts)


def _ddp_buckets(bf: float, busy: np.ndarray, buckets, allreduce_s):
    """(time, comm per worker, wait per worker) of iterations of ``busy`` (P, I) seconds
    of step that all use ``buckets``."""
    shares = np.cumsum([s for _, s in buckets])
    cost = [allreduce_s(nb) for nb, _ in buckets]
    ready = busy.T[:, :, None] * ((1 - bf) + bf * shares)[None, None, :]   # (I, P, J)
    iterations, workers = ready.shape[0], busy.shape[0]
    end = np.zeros(iterations)
    comm = np.zeros(workers)
    wait = np.zeros(workers)
    for j, c in enumerate(cost):
        arrive = np.maximum(ready[:, :, j], end[:, None])
        start = arrive.max(axis=1) if workers else end
        if workers > 1:
            wait += (start[:, None] - arrive).sum(axis=0)
            comm += c * iterations
        end = start + c
    return end.sum(), comm, wait


# what a step sends (``Scheme.exchange``) in the schemes this path prices
FAST_EXCHANGES = ("none", "average", "gather_scatter", "per_tensor", "flat", "buckets", "fused")


def _horovod(plan, steps: np.ndarray, allreduce_s, speed: np.ndarray):
    """Horovod's cycles (``schemes.fusion``) iteration by iteration: every rank starts a
    step when the last allreduce of the one before is over, its layers are ready through
    its backward, and the stream runs each cycle's fused buffers one after another.
    Exact while every worker keeps one speed through a step."""
    bf = plan.backward_fraction
    sizes = [b for b, _ in plan.ready_tensors]
    cum = np.asarray(handed_over(plan.ready_tensors, plan.horovod_groups))
    busy = steps / speed[:, None]                                        # (P, I)
    cost: dict[int, float] = {}
    start, comm_s, wait = 0.0, 0.0, np.zeros(busy.shape[0])
    for i in range(busy.shape[1]):
        backward_at = start + busy[:, i] * (1 - bf)
        ready_all = (backward_at[:, None] + busy[:, i, None] * bf * cum[None, :]).max(axis=0)
        end, spans = start, []
        schedule = (ahead(list(ready_all), sizes, plan.fusion_bytes) if plan.requests_ahead
                    else cycles(list(ready_all), sizes, plan.cycle_period_s, plan.fusion_bytes))
        for tick, buffers in schedule:
            for size in buffers:
                if size not in cost:
                    cost[size] = allreduce_s(size)
                spans.append((max(end, tick), max(end, tick) + cost[size]))
                end = spans[-1][1]
                comm_s += cost[size]
        wait += uncovered_s(start + busy[:, i], end, spans)       # the cycle's wait
        start = max(end, float((start + busy[:, i]).max()))
    workers = busy.shape[0]
    comm = np.full(workers, comm_s if workers > 1 else 0.0)
    return start, busy.sum(axis=1), comm, wait
