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
queues, ``simulator.cores``) ``engine="auto"`` takes the SimPy model for an
oversubscribed host, and a forced ``engine="fast"`` ignores the delay.
"""
from __future__ import annotations

import numpy as np

from .closed_form import choose_allreduce, collective_s
from .comm import call_cpu_s
from .network import Routes


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


def simulate_fast(spec, cfg, plan, workload, cluster, profile, seed, steps: np.ndarray):
    from .simulate import _placement, _result, handoffs   # the Result type lives with simulate()
    placement = _placement(spec, cluster, plan.workers)
    transport = profile.transport(spec.backend)
    routes = Routes(placement, cluster.link, transport,
                    handoffs(spec, cluster, placement, plan.workers, profile))
    g = transport.gamma_s_per_byte
    # compute contends per pool of cores (a host's own, or the machine's with shared_cores)
    host_of = np.asarray([cluster.core_pool_of(h) for h in placement[:plan.workers]])
    finish = lambda work: shared_finish_s(work, host_of, cluster.cores_per_host,  # noqa: E731
                                          workload.threads_per_worker, profile.sharing_efficiency,
                                          spec.polls)

    def coll(kind, ranks, n, algorithm="ring"):
        a, b = routes.group_params(ranks)
        if kind == "allreduce":
            algorithm = choose_allreduce(algorithm, n, len(ranks), routes.one_host(ranks))
        t = collective_s(kind, len(ranks), n, a + transport.step_extra_s(kind), b, g, algorithm)
        if spec.polls:
            return t
        return max(t, _cpu_s(transport, kind, ranks, n, algorithm, host_of, cluster.cores_per_host,
                             profile.sharing_efficiency))

    ranks, n, p = plan.worker_ranks, plan.param_bytes, plan.workers
    if spec.name == "ddp":
        counts = np.bincount(host_of)[host_of]
        speed = np.array([min(1.0, cluster.cores_per_host / (k * workload.threads_per_worker))
                          * profile.sharing_efficiency(int(k)) for k in counts])
        parts = _ddp(plan, steps, lambda nb: coll("allreduce", ranks, nb), speed)
    elif spec.name in ("serial", "psgd"):
        k = plan.avg_every or plan.iterations
        bounds = list(range(0, plan.iterations, k)) + [plan.iterations]
        work = np.stack([steps[:, a:b].sum(axis=1) for a, b in zip(bounds, bounds[1:])])
        parts = _segments(finish(work), coll("allreduce", ranks, n, plan.algorithm))
    else:
        per_iter = {"gather_scatter": coll("gather", ranks, n) + coll("scatter", ranks, n),
                    "allreduce": sum(coll("allreduce", ranks, tb) for tb in plan.tensor_bytes),
                    "mpi_allreduce": coll("allreduce", ranks, n, plan.algorithm)}[spec.name]
        parts = _segments(finish(steps.T), per_iter)
        if spec.name == "gather_scatter" and p > 1:
            average_s = g * (p - 1) * n * plan.iterations
            parts = _root_average(parts, average_s)
    time_s, compute, comm, wait = parts
    return _result(spec, cfg, plan, workload, seed, "fast", time_s, compute, comm, wait,
                   {}, 0, 0.0, None)


def _cpu_s(transport, kind, ranks, n, algorithm, host_of, cores, efficiency) -> float:
    """When the last rank's CPU for a call is done, every rank having started together
    (``comm.call_cpu_s``): a sleeping backend's calls need cores too."""
    work = np.array([[call_cpu_s(transport, kind, len(ranks), n, algorithm, i == 0)
                      for i in range(len(ranks))]])
    if not work.any():
        return 0.0
    return float(shared_finish_s(work, host_of, cores, 1, efficiency).max())


def _segments(finish: np.ndarray, comm_s: float):
    """Each segment: compute until the slowest finishes, then a collective of ``comm_s``."""
    slowest = finish.max(axis=1)
    time_s = float(slowest.sum() + comm_s * len(slowest))
    comm = np.full(finish.shape[1], comm_s * len(slowest)) if comm_s > 0 else np.zeros(finish.shape[1])
    wait = (slowest[:, None] - finish).sum(axis=0) if finish.shape[1] > 1 else np.zeros(1)
    return time_s, finish.sum(axis=0), comm, wait


def _root_average(parts, average_s: float):
    """gather_scatter: rank 0 adds the gradients up while the others wait for the scatter."""
    time_s, compute, comm, wait = parts
    compute, wait = compute.copy(), wait.copy()
    compute[0] += average_s
    wait[1:] += average_s
    return time_s + average_s, compute, comm, wait


def _ddp(plan, steps: np.ndarray, allreduce_s, speed: np.ndarray):
    """Buckets become ready during the backward; one allreduce stream per iteration.
    Exact while every worker keeps one speed (``speed``, per worker) through a step."""
    bf = plan.backward_fraction
    shares = np.cumsum([s for _, s in plan.buckets])
    cost = [allreduce_s(nb) for nb, _ in plan.buckets]
    busy = steps / speed[:, None]                                          # (P, I)
    ready = busy.T[:, :, None] * ((1 - bf) + bf * shares)[None, None, :]   # (I, P, J)
    iterations, workers = ready.shape[0], ready.shape[1]
    end = np.zeros(iterations)
    comm = np.zeros(workers)
    wait = np.zeros(workers)
    for j, c in enumerate(cost):
        arrive = np.maximum(ready[:, :, j], end[:, None])
        start = arrive.max(axis=1)
        if workers > 1:
            wait += (start[:, None] - arrive).sum(axis=0)
            comm += c * iterations
        end = start + c
    return float(end.sum()), busy.sum(axis=1), comm, wait
