"""Predictions over worker counts: speedup and efficiency against the same scheme at P = 1.

``sweep`` runs ``simulate`` for every scheme and P and returns plain rows (one
dict per scheme and P) that ``output.tables`` prints and ``output.plots`` draws. ``serial``
is predicted at P = 1 only. Speedup is ``epoch_s(P=1) / epoch_s(P)`` of the
same scheme (for ``ps_*``, P = 1 is one worker plus the server); efficiency
is ``speedup / P``.

Imports: simulator.contracts, simulator.model (config, schemes), engine (result, run).
"""
from __future__ import annotations

import os
from typing import Callable

from simulator.contracts.cluster import Cluster
from simulator.contracts.profile import Profile
from simulator.contracts.workload import Workload
from simulator.engine.result import Result
from simulator.engine.run import simulate
from simulator.model.config import Heterogeneity, SchemeConfig
from simulator.model.schemes import SCHEMES

COLUMNS = ("scheme", "workers", "hosts", "epoch_s", "speedup", "efficiency", "time_s",
           "iterations_per_worker", "compute_s", "comm_s", "wait_s", "mean_staleness",
           "max_staleness", "engine", "fidelity", "simulated_iterations")


def row(result: Result, base_epoch_s: float) -> dict:
    speedup = base_epoch_s / result.epoch_s if result.epoch_s > 0 else float("nan")
    return {
        "scheme": result.scheme, "workers": result.workers, "epoch_s": result.epoch_s,
        "speedup": speedup, "efficiency": speedup / result.workers, "time_s": result.time_s,
        "iterations_per_worker": result.iterations_per_worker,
        "compute_s": result.compute_s, "comm_s": result.comm_s, "wait_s": result.wait_s,
        "mean_staleness": result.mean_staleness,
        "max_staleness": max(result.staleness, default=0),
        "engine": result.engine, "fidelity": result.fidelity,
        "simulated_iterations": result.simulated_iterations,
        "staleness": {str(k): v for k, v in result.staleness.items()},
    }


def sweep(schemes: list[SchemeConfig], workers: list[int], workload: Workload,
          cluster: Cluster | Callable[[int], Cluster] | None, profile: Profile, seed: int = 0,
          heterogeneity: Heterogeneity = Heterogeneity(), progress=None,
          jobs: int = 1, meanwhile: Callable[[], None] | None = None) -> list[dict]:
    """Rows for every scheme at every P of ``workers`` (and P = 1, the speedup's base).
    ``cluster`` may be a function of the number of ranks (hosts that grow with P);
    ``progress(n)`` is called after each prediction; ``jobs`` > 1 runs the predictions
    in that many processes (each is independent and seeded: the rows are the same);
    ``meanwhile()`` is called once they are under way (the caller's own work, done
    while the processes predict)."""
    points = []
    for cfg in schemes:
        counts = [1] if cfg.name == "serial" else workers
        extra = 1 if SCHEMES[cfg.name].extra_rank else 0
        for p in sorted(set(counts) | {1}):
            on = cluster(p + extra) if callable(cluster) else cluster
            points.append((cfg, p, workload, on, profile, seed, heterogeneity))
    results = _predict_all(points, jobs, progress, meanwhile)
    rows, base = [], {}
    for (cfg, p, _w, on, *_rest), r in zip(points, results):
        base.setdefault(cfg, r.epoch_s)                  # P = 1 comes first per scheme
        if p in workers or cfg.name == "serial":
            rows.append(row(r, base[cfg]) | {"hosts": on.hosts if on else 1})
    return rows


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
    # largest P first: the longest predictions start early and the pool ends together
    order = sorted(range(len(points)), key=lambda i: -points[i][1])
    out: list = [None] * len(points)
    with ProcessPoolExecutor(max_workers=jobs,
                             mp_context=multiprocessing.get_context("fork")) as pool:
        results = pool.map(_predict, [points[i] for i in order])   # (forked: all submitted)
        if meanwhile:
            meanwhile()
        for i, r in zip(order, results):
            out[i] = r
            if progress:
                progress(1)
    return out


def _predict(point: tuple) -> Result:
    cfg, p, workload, cluster, profile, seed, heterogeneity = point
    return simulate(cfg, p, workload, cluster, profile, seed, heterogeneity)
