"""Predictions over worker counts: speedup and efficiency against the same scheme at P = 1.

``sweep`` runs ``simulate`` for every scheme and P and returns plain rows (one
dict per scheme and P) that ``report`` prints and ``plot`` draws. ``serial``
is predicted at P = 1 only. Speedup is ``epoch_s(P=1) / epoch_s(P)`` of the
same scheme (for ``ps_*``, P = 1 is one worker plus the server); efficiency
is ``speedup / P``.
"""
from __future__ import annotations

from .config import Cluster, Heterogeneity, SchemeConfig, Workload
from .profile import Profile
from .simulate import Result, simulate

COLUMNS = ("scheme", "workers", "epoch_s", "speedup", "efficiency", "time_s",
           "iterations_per_worker", "compute_s", "comm_s", "wait_s", "mean_staleness",
           "max_staleness", "engine", "fidelity")


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
        "staleness": {str(k): v for k, v in result.staleness.items()},
    }


def sweep(schemes: list[SchemeConfig], workers: list[int], workload: Workload,
          cluster: Cluster | None, profile: Profile, seed: int = 0,
          heterogeneity: Heterogeneity = Heterogeneity()) -> list[dict]:
    rows = []
    for cfg in schemes:
        counts = [1] if cfg.name == "serial" else workers
        base = None
        for p in sorted(set(counts) | {1}):
            r = simulate(cfg, p, workload, cluster, profile, seed, heterogeneity)
            base = base if base is not None else r.epoch_s
            if p in counts:
                rows.append(row(r, base))
    return rows
