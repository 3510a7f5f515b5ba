"""Predictions over worker counts, with one speedup baseline for every scheme.

``sweep`` runs ``simulate`` for every scheme and P and returns plain rows (one
dict per scheme and P) that ``output.tables`` prints and ``output.plots`` draws. ``serial``
is predicted at P = 1 only, and a scheme that needs one host (``hogwild``) only where its
ranks fit on one. Speedup has one definition for the whole table: against the fastest
scheme at the baseline's worker count P0 (by default 1: the fastest single worker),
``speedup = epoch_s(baseline) / epoch_s``; efficiency is ``speedup * P0 / P`` (1 when P
workers are P / P0 times as fast as the baseline).

Imports: contracts, simulator.model (config, schemes), engine (result, run).
"""
from __future__ import annotations

import os
from typing import Callable

from contracts.checks import ConfigError
from contracts.cluster import Cluster, GrowingCluster
from contracts.profile import Profile
from contracts.workload import Workload
from simulator.engine.result import Result
from simulator.engine.run import simulate
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


def sweep(schemes: list[SchemeConfig], workers: list[int], workload: Workload,
          cluster: Cluster | GrowingCluster | None, profile: Profile, seed: int = 0,
          heterogeneity: Heterogeneity = Heterogeneity(), progress=None,
          jobs: int = 1, meanwhile: Callable[[], None] | None = None,
          baseline: int = 1) -> list[dict]:
    """Rows for every scheme at every P of ``workers`` and at the baseline's P0
    (``baseline``). ``cluster`` may grow with P (``GrowingCluster``; None: the profile's
    machine); ``progress(n)`` is called after each prediction; ``jobs`` > 1 runs the
    predictions in that many processes (each is independent and seeded: the rows are the
    same); ``meanwhile()`` is called once they are under way (the caller's own work, done
    while the processes predict)."""
    points = [(cfg, p, workload, on, profile, seed, heterogeneity)
              for cfg in schemes for p, on in points_of(cfg, workers, cluster, baseline)]
    results = _predict_all(points, jobs, progress, meanwhile)
    at_base = [r.epoch_s for (_c, p, *_rest), r in zip(points, results) if p == baseline]
    if not at_base:
        raise ConfigError(f"no scheme asked for runs at the baseline's P = {baseline}")
    base = min(at_base)
    return [row(r, base, baseline) | {"hosts": on.hosts if on else 1}
            for (_c, _p, _w, on, *_rest), r in zip(points, results)]


def points_of(cfg: SchemeConfig, workers: list[int], cluster, baseline: int = 1) -> list[tuple]:
    """(P, the cluster at P) of every prediction of one scheme: ``workers`` and the baseline's
    P0, P = 1 alone for serial, and for a scheme that needs one host only where its ranks
    fit on one."""
    spec = SCHEMES[cfg.name]
    counts = [1] if spec.single_worker else sorted(set(workers) | {baseline})
    out = []
    for p in counts:
        on = cluster.at(spec.ranks(p)) if cluster is not None else None
        if spec.single_host and on is not None and on.hosts > 1:
            continue
        out.append((p, on))
    return out


def _predict_all(points: list[tuple], jobs: int, progress, meanwhile=None) -> list[Result]:
    """``simulate`` for every point, in ``jobs`` forked processes when there are several."""
    jobs = min(jobs, os.cpu_count() or 1, len(points))       # never more than the cores
    if jobs <= 1 or len(points) < 4:
        if meanwhile:
            meanwhile()
        out = []
        for point in points:
            out.append(_predict(point))
            if progress:
                progress(1)
        return out
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    global _FORKED_POINTS
    # largest P first: the longest predictions start early and the pool ends together
    order = sorted(range(len(points)), key=lambda i: -points[i][1])
    out: list = [None] * len(points)
    _FORKED_POINTS = points        # the forked processes find them here: only indices travel
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
        _FORKED_POINTS = None
    return out


# the points of the sweep under way, as the processes forked for it inherit them (a point
# pickled is its profile, ~20 kB: unpickled once a point, 0.17 CPU s at --workers 16)
_FORKED_POINTS: list[tuple] | None = None


def _predict_forked(index: int) -> Result:
    return _predict(_FORKED_POINTS[index])


def _predict(point: tuple) -> Result:
    cfg, p, workload, cluster, profile, seed, heterogeneity = point
    return simulate(cfg, p, workload, cluster, profile, seed, heterogeneity)
