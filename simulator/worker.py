"""Workers: how long each training step takes, and who is slower than whom.

A step (forward + backward + update) of a worker with ``threads`` threads on
``batch`` samples takes, at full speed, a draw of::

    t_step ~ Gamma(mean = (step_intercept_s + step_s_per_sample * batch) / speed,
                   cv   = spread_cv)

(``spread_cv = 0``: exactly the mean). ``speed`` is the worker's speed factor
(``Heterogeneity``); the draws come from ``numpy.random.default_rng(seed + rank)``,
all drawn up front so every engine sees the same numbers. How long a step then
takes in simulated time depends on how many processes share the host's cores.
"""
from __future__ import annotations

import numpy as np

from .config import Heterogeneity
from .host import Host
from .profile import StepFit


def speed_factors(workers: int, het: Heterogeneity, seed: int) -> np.ndarray:
    """One speed factor per worker rank (1.0 = as profiled)."""
    if het.speed_factors:
        f = np.resize(np.asarray(het.speed_factors, dtype=float), workers)
    elif het.speed_cv > 0:
        sigma = np.sqrt(np.log1p(het.speed_cv ** 2))
        rng = np.random.default_rng([seed, 7919])       # apart from the per-rank step streams
        f = rng.lognormal(-sigma ** 2 / 2, sigma, size=workers)
    else:
        f = np.ones(workers)
    if het.stragglers:
        f[max(0, workers - het.stragglers):] /= het.straggler_slowdown
    return f


def draw_step_times(fit: StepFit, batch: int, speed: float, iterations: int,
                    seed: int, rank: int) -> np.ndarray:
    """Full-speed step times of one worker for ``iterations`` steps."""
    mean_s = fit.step_s(batch) / speed
    if fit.spread_cv <= 0:
        return np.full(iterations, mean_s)
    shape = 1.0 / fit.spread_cv ** 2
    rng = np.random.default_rng(seed + rank)
    return rng.gamma(shape, mean_s / shape, size=iterations)


class Worker:
    """One training process: its rank, host, threads and pre-drawn step times."""

    def __init__(self, rank: int, host: Host, threads: int, step_s: np.ndarray,
                 polls: bool = False):
        self.rank = rank
        self.host = host
        self.threads = threads
        self.step_s = step_s.tolist()      # plain floats: cheaper per access in the loop
        self.polls = polls                 # busy-waits between steps (see ``Host``)
        if polls:
            host.start_polling(rank)

    def compute(self, work_s: float):
        """Event: ``work_s`` seconds of full-speed work done on the (shared) host."""
        return self.host.compute(work_s, self.threads, self.polls, self.rank)
