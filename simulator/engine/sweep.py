"""Predictions over worker counts, with one speedup baseline for every scheme.

``sweep(Sweep)`` runs ``simulate_on`` for every ``Point`` (a scheme, P and the cluster its
ranks take) of a sweep resolved beforehand (``counts_of`` decides which P for
``simulator.question``: ``serial`` at P = 1 only, a scheme that needs one host where its
ranks fit on one; ``check_request`` refuses a plan that cannot be meant or would not
finish, by what its simulations cost, before ``points_of`` makes its points; ``laid_out``
then resolves each point's cluster once, ``placement.layout``, and the engines take it) and
returns plain rows (one dict per point) that ``output.tables`` prints and ``output.plots``
draws. Speedup has one definition for the whole table: against the fastest scheme at the
baseline's worker count P0 (by default 1: the fastest single worker),
``speedup = epoch_s(baseline) / epoch_s``; efficiency is ``speedup * P0 / P`` (1 when P
workers are P / P0 times as fast as the baseline).

Imports: contracts, simulator.model (config, schemes), engine (placement, result, run).
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from typing import Callable

from contracts.checks import ConfigError, fits_in_memory
from contracts.cluster import Cluster
from contracts.profile import Profile
from contracts.workload import Workload
from simulator.engine.placement import Layout, layout
from simulator.engine.result import Result
from simulator.engine.run import simulate_on
from simulator.model.config import Heterogeneity, SchemeConfig
from simulator.model.schemes import SCHEMES

COLUMNS = ("scheme", "workers", "hosts", "epoch_s", "speedup", "efficiency", "time_s",
           "iterations_per_worker", "compute_s", "comm_s", "wait_s", "mean_staleness",
           "max_staleness", "engine", "fidelity", "simulated_iterations")


def row(result: Result, base_epoch_s: float, base_workers: int = 1) -> dict:
    speedup = base_epoch_s / result.epoch_s if result.epoch_s > 0 else float("nan")
    return {
        "scheme": result.scheme, "workers": result.workers, "epoch_s": result.epoch_s,
        "speedup": speedup, "efficiency": speedup * base_workers / result.workers,
        "time_s": result.time_s,
        "iterations_per_worker": result.iterations_per_worker,
        "compute_s": result.compute_s, "comm_s": result.comm_s, "wait_s": result.wait_s,
        "mean_staleness": result.mean_staleness,
        "max_staleness": max(result.staleness, default=0),
        "engine": result.engine, "fidelity": result.fidelity,
        "simulated_iterations": result.simulated_iterations,
        "staleness": {str(k): v for k, v in result.staleness.items()},
    }


@dataclass(frozen=True)
class Point:
    """One prediction of a sweep: a scheme at P workers on the cluster its ranks take."""
    scheme: SchemeConfig
    workers: int
    cluster: Cluster


@dataclass(frozen=True)
class Sweep:
    """Everything a sweep predicts, resolved before it runs: every point, one workload,
    the profile on the cluster's hardware, one seed and heterogeneity, the baseline's
    P0 (every point of P0 is a candidate for the baseline) and, once ``laid_out``, each
    point's cluster resolved (``placement.layout``), in the order of ``points``."""
    points: tuple[Point, ...]
    workload: Workload
    profile: Profile
    seed: int = 0
    heterogeneity: Heterogeneity = Heterogeneity()
    baseline: int = 1
    layouts: tuple[Layout, ...] = ()


def laid_out(job: Sweep) -> Sweep:
    """``job`` with every point's layout, each made once (``simulator.question`` lays out
    the sweep it resolves, after ``check_request``: the engines then derive none)."""
    return replace(job, layouts=tuple(layout(SCHEMES[pt.scheme.name], pt.scheme, pt.workers,
                                             pt.cluster, job.profile) for pt in job.points))


def sweep(job: Sweep, progress=None, jobs: int = 1,
          meanwhile: Callable[[], None] | None = None) -> list[dict]:
    """Rows for every point of ``job``, its speedups against the fastest at its
    baseline's P0. ``progress(n)`` is called after each prediction; ``jobs`` > 1 runs the
    predictions in that many processes (each is independent and seeded: the rows are the
    same); ``meanwhile()`` is called once they are under way (the caller's own work, done
    while the processes predict)."""
    results = _predict_all(job, jobs, progress, meanwhile)
    at_base = [r.epoch_s for pt, r in zip(job.points, results) if pt.workers == job.baseline]
    if not at_base:
        raise ConfigError(f"no scheme asked for runs at the baseline's P = {job.baseline}")
    base = min(at_base)
    return [row(r, base, job.baseline) | {"hosts": pt.cluster.hosts}
            for pt, r in zip(job.points, results)]


def _predict_all(job: Sweep, jobs: int, progress, meanwhile=None) -> list[Result]:
    """``simulate`` for every point, in ``jobs`` forked processes when there are several."""
    if len(job.layouts) != len(job.points):
        raise ValueError("the sweep is not laid out (engine.sweep.laid_out)")
    points = job.points
    jobs = min(jobs, os.cpu_count() or 1, len(points))       # never more than the cores
    if jobs <= 1 or len(points) < 4:
        if meanwhile:
            meanwhile()
        out = []
        for index in range(len(points)):
            out.append(_predict(job, index))
            if progress:
                progress(1)
        return out
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    global _FORKED_SWEEP
    # largest P first: the longest predictions start early and the pool ends together
    order = sorted(range(len(points)), key=lambda i: -points[i].workers)
    out: list = [None] * len(points)
    _FORKED_SWEEP = job            # the forked processes find it here: only indices travel
    try:
        with ProcessPoolExecutor(max_workers=jobs,
                                 mp_context=multiprocessing.get_context("fork")) as pool:
            results = pool.map(_predict_forked, order)   # (forked: all submitted)
            if meanwhile:
                meanwhile()
            for i, r in zip(order, results):
                out[i] = r
                if progress:
                    progress(1)
    finally:
        _FORKED_SWEEP = None
    return out


# the sweep under way, as the processes forked for it inherit it (its profile pickled is
# ~20 kB: unpickled once a point, 0.17 CPU s at --workers 16)
_FORKED_SWEEP: Sweep | None = None


def _predict_forked(index: int) -> Result:
    return _predict(_FORKED_SWEEP, index)


def _predict(job: Sweep, index: int) -> Result:
    return simulate_on(job.layouts[index], job.points[index].scheme, job.workload, job.seed,
                       job.heterogeneity)


def point(cluster, cfg: SchemeConfig, workers: int) -> Point:
    """``cfg`` at ``workers`` workers on the cluster (``at(ranks)``) its ranks take."""
    return Point(cfg, workers, cluster.at(SCHEMES[cfg.name].ranks(workers)))


# What a sweep is asked, before any point is made: each scheme with the P it is predicted at.
Plan = list[tuple[SchemeConfig, list[int]]]


def counts_of(cluster, cfg: SchemeConfig, workers: list[int], baseline: int = 1) -> list[int]:
    """The P of every prediction of one scheme: each P of ``workers`` and the baseline's
    P0, P = 1 alone for serial, and for a scheme that needs one host only where its ranks
    fit on one (``cluster.hosts_at``: no cluster is made)."""
    spec = SCHEMES[cfg.name]
    counts = [1] if spec.single_worker else sorted(set(workers) | {baseline})
    return [p for p in counts if not (spec.single_host and cluster.hosts_at(spec.ranks(p)) > 1)]


def points_of(cluster, plan: Plan) -> tuple[Point, ...]:
    """Every prediction of ``plan``: each scheme at each of its P on the cluster its ranks
    take, in the plan's order."""
    return tuple(point(cluster, cfg, p) for cfg, counts in plan for p in counts)


# What a prediction costs, measured on a 2-core host (simulator.bench and timed predict runs):
# the SimPy engine steps about this many worker-iterations per second, divided by how many
# ranks share a pool of cores (each one's time slices are events); the vectorised fast path
# is far quicker, so this overestimates synchronous schemes.
WORKER_ITERATIONS_PER_S = 50_000
SECONDS_PER_SIMULATION = 0.005
REFUSE_ABOVE_S = 1800.0            # half an hour: a typo (P or epochs), not a question
NOTE_ABOVE_S = 30.0


@dataclass(frozen=True)
class Cost:
    """What a plan asks the engines: ``simulations`` (every point, ``runs_each`` times),
    their ``worker_iterations`` in all, each weighted by how many ranks share a core of
    its pool, and the most worker-iterations of one prediction (``largest``)."""
    simulations: int
    worker_iterations: float
    largest: int

    @property
    def seconds(self) -> float:
        return (self.worker_iterations / WORKER_ITERATIONS_PER_S
                + self.simulations * SECONDS_PER_SIMULATION)


def check_request(plan: Plan, cluster, workload: Workload, runs_each: int = 1) -> None:
    """Refuse what cannot be meant or would not finish (``predict`` and ``pipelines.replay``,
    which simulates every point ``runs_each`` times, once a seed), from ``plan`` before any
    point is made (``--workers 65536`` asks for half a million): a batch larger than the
    training set, more threads than a host has cores, a point that needs more accelerators
    than the cluster has, and sweeps whose estimated simulation time or memory is out of
    reach (the estimate is named: ``cost_of``)."""
    host, threads = cluster.at(1), workload.threads_per_worker
    if workload.iterations is None and workload.batch_per_worker > workload.dataset_samples:
        raise ConfigError(f"--batch-size {workload.batch_per_worker} is more than the "
                          f"{workload.dataset_samples} samples of the training set")
    if threads is not None and threads > host.cores_per_host:
        raise ConfigError(f"--threads {threads} is more than the {host.cores_per_host} "
                          "cores of a host (oversubscribed threads are not modelled)")
    cost = cost_of(plan, cluster, workload, runs_each)
    fits_in_memory(f"one prediction of {cost.largest} worker-iterations", 16 * cost.largest)
    if cost.seconds > REFUSE_ABOVE_S:
        raise ConfigError(f"this prediction would run {cost.simulations} simulations of "
                          f"{cost.worker_iterations:.3g} worker-iterations in all, about "
                          f"{_minutes(cost.seconds)}: ask for fewer --workers, --epochs or "
                          "--iterations")
    if cost.seconds > NOTE_ABOVE_S:
        print(f"predict: note: {cost.simulations} simulations, about "
              f"{_minutes(cost.seconds)}", file=sys.stderr)


def cost_of(plan: Plan, cluster, workload: Workload, runs_each: int = 1) -> Cost:
    """The ``Cost`` of ``plan``, point by point without making one: a point's cluster,
    ``cluster.at(ranks)``, is ``cluster.at(1)`` on ``cluster.hosts_at(ranks)`` hosts (its
    cores, slots, accelerators and core sharing are the same). A point that needs more
    accelerators than its hosts hold is refused here, the first in the plan's order."""
    host = cluster.at(1)
    cores, accelerators = host.cores_per_host, host.device is not None
    slots = host.ranks_per_host or cores
    iterations: dict[int, int] = {}            # per P: the same for every scheme
    work, largest = 0.0, 0
    for cfg, counts in plan:
        spec = SCHEMES[cfg.name]
        for p in counts:
            ranks = spec.ranks(p)
            hosts = cluster.hosts_at(ranks)
            if accelerators and ranks > hosts * slots:
                raise ConfigError(f"{cfg.name} at P = {p} needs {ranks} accelerators, more "
                                  f"than the {hosts} hosts x {cores} of the cluster (leave "
                                  "hosts out of the file to let them grow with P, or give "
                                  "--hosts)")
            if p not in iterations:
                iterations[p] = workload.iterations_per_worker(p)
            pools = 1 if host.shared_cores else hosts          # Cluster.core_pools
            per_pool = -(-ranks // pools)
            work += p * iterations[p] * (per_pool / cores if per_pool > cores else 1.0)
            largest = max(largest, p * iterations[p])
    simulations = sum(len(counts) for _, counts in plan)
    return Cost(runs_each * simulations, runs_each * work, largest)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} minutes" if seconds >= 90 else f"{seconds:.0f} s"
