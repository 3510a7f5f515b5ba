"""Predictions over worker counts, with one speedup baseline for every scheme.

``sweep(Sweep)`` runs ``simulate`` for every ``Point`` (a scheme, P and the cluster its
ranks take) of a sweep resolved beforehand (``simulator.question`` decides which points:
``serial`` at P = 1 only, a scheme that needs one host where its ranks fit on one) and
returns plain rows (one dict per point) that ``output.tables`` prints and ``output.plots``
draws. Speedup has one definition for the whole table: against the fastest scheme at the
baseline's worker count P0 (by default 1: the fastest single worker),
``speedup = epoch_s(baseline) / epoch_s``; efficiency is ``speedup * P0 / P`` (1 when P
workers are P / P0 times as fast as the baseline).

Imports: contracts, simulator.model.config, engine (result, run).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

from contracts.checks import ConfigError
from contracts.cluster import Cluster
from contracts.profile import Profile
from contracts.workload import Workload
from simulator.engine.result import Result
from simulator.engine.run import simulate
from simulator.model.config import Heterogeneity, SchemeConfig

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
    the profile on the cluster's hardware, one seed and heterogeneity, and the baseline's
    P0 (every point of P0 is a candidate for the baseline)."""
    points: tuple[Point, ...]
    workload: Workload
    profile: Profile
    seed: int = 0
    heterogeneity: Heterogeneity = Heterogeneity()
    baseline: int = 1


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
    points = job.points
    jobs = min(jobs, os.cpu_count() or 1, len(points))       # never more than the cores
    if jobs <= 1 or len(points) < 4:
        if meanwhile:
            meanwhile()
        out = []
        for point in points:
            out.append(_predict(job, point))
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
    return _predict(_FORKED_SWEEP, _FORKED_SWEEP.points[index])


def _predict(job: Sweep, point: Point) -> Result:
    return simulate(point.scheme, point.workers, job.workload, point.cluster, job.profile,
                    job.seed, job.heterogeneity)
