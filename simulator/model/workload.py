"""The workload inside the model: what each step costs and which tensors it sends when.

``Plan`` is data derived from the workload, the scheme's knobs, the model's
cost (``contracts.profile.ModelCost``) and P: iterations, message sizes, DDP
buckets. The step times are drawn here, up front, so every engine sees the
same numbers. A step (forward + backward + update) of a worker with
``threads`` threads on ``batch`` samples takes, at full speed, a draw of::

    t_step ~ Gamma(mean = (step_intercept_s + step_s_per_sample * batch) / speed,
                   cv   = spread_cv)

(``spread_cv = 0``: exactly the mean). ``speed`` is the worker's speed factor
(``Heterogeneity``); the draws come from ``numpy.random.default_rng(seed + rank)``.
How long a step then takes in simulated time depends on how many processes
share the host's cores (``model.hardware``).

Imports: numpy, ``simulator.contracts`` and ``model.config`` only.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.contracts.profile import ModelCost, StepFit
from simulator.model.config import Heterogeneity


@dataclass(frozen=True)
class Plan:
    workers: int
    iterations: int                        # per worker
    worker_ranks: tuple[int, ...]
    param_count: int
    tensor_bytes: tuple[int, ...]          # forward order, one per weight / bias tensor
    backward_fraction: float
    buckets: tuple[tuple[int, float], ...] # ddp: (bytes, share of backward before it is ready)
    avg_every: int
    algorithm: str
    hogwild_update_s: float                # extra memory cost of one lock-free update
    server_rank: int | None = None
    mix_s: float = 0.0                     # async_avg: rank 0 mixes one set of weights in
    bytes_per_param: float = 4.0           # of the weights (float32)
    grad_bytes_per_param: float = 4.0      # of a gradient as sent (2 with fp16 compression)
    gradient_algorithm: str = "ring"       # allreduce of gradients (allreduce, ddp, horovod)
    layers: tuple[tuple[int, float], ...] = ()   # gradient-ready order: (grad bytes, share of
                                                 # the backward before it is ready)
    fusion_bytes: int = 64 * 2**20         # horovod: tensor fusion threshold
    cycle_s: float = 0.005                 # horovod: background loop's cycle time
    negotiation_s: float = 0.0             # horovod: rank 0's time per other rank per cycle

    @property
    def cycle_period_s(self) -> float:
        """Horovod's loop: its sleep, then rank 0 hears every other rank and answers."""
        return self.cycle_s + (self.workers - 1) * self.negotiation_s

    @property
    def param_bytes(self) -> int:
        return int(self.bytes_per_param * self.param_count)

    @property
    def grad_bytes(self) -> int:
        return int(self.grad_bytes_per_param * self.param_count)


def ready_layers(model: ModelCost, bytes_per_param: float) -> tuple[tuple[int, float], ...]:
    """Layers in gradient-ready order (reverse of forward): (gradient bytes, share of the
    backward it takes). The share is the layer's measured (or FLOP) share from a workload
    file, else its share of the parameters (a simplification: convolutions cost more per
    parameter)."""
    return tuple((int(bytes_per_param * params), share) for params, share in
                 zip(reversed(model.layer_param_counts), reversed(model.backward_shares())))


def ddp_buckets(model: ModelCost, bucket_bytes: int,
                bytes_per_param: float = 4.0) -> tuple[tuple[int, float], ...]:
    """Layers in gradient-ready order, packed into buckets of at least ``bucket_bytes``
    (the last one may be smaller): (bytes, share of the backward before it is ready)."""
    buckets, size, share = [], 0, 0.0
    for layer_bytes, layer_share in ready_layers(model, bytes_per_param):
        size += layer_bytes
        share += layer_share
        if size >= bucket_bytes:
            buckets.append((size, share))
            size, share = 0, 0.0
    if size or not buckets:
        buckets.append((size, share))
    return tuple(buckets)


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
