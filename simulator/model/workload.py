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

Imports: numpy, ``contracts`` and ``model.config`` only.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from contracts.profile import ModelCost, StepFit
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
                                           # from the second iteration on
    avg_every: int                         # K: steps between exchanges of the weights, the
                                           # run's or its scheme's default (Scheme.averaging_every)
    algorithm: str
    hogwild_update_s: float                # extra memory cost of one lock-free update
    server_rank: int | None = None
    server_update_s: float = 0.0           # one update by the parameter server (ModelCost.server_s)
    server_idle_curve: tuple[tuple[float, float], ...] = ()  # (idle s, update s): the update
                                           # after the server slept that long (() = flat)
    mix_s: float = 0.0                     # async_avg: rank 0 mixes one set of weights in
    new_copy_s: float = 0.0                # the flat vector copied into a new tensor (flat_grads)
    kept_copy_s: float = 0.0               # ... into one kept (load_flat_grads, an in-place op)
    bytes_per_param: float = 4.0           # of the weights (float32)
    grad_bytes_per_param: float = 4.0      # of a gradient as sent (2 with fp16 compression)
    gradient_algorithm: str = "ring"       # allreduce of gradients (allreduce, ddp, horovod)
    ready_tensors: tuple[tuple[int, float], ...] = ()   # horovod: its requests, one a gradient
                                      # tensor in ready order: (bytes, share of the backward
                                      # before it is ready, on its layer's last tensor)
    fusion_bytes: int = 64 * 2**20         # horovod: tensor fusion threshold
    cycle_s: float = 0.005                 # horovod: background loop's cycle time
    negotiation_s: float = 0.0             # horovod: rank 0's time per other rank per cycle
    requests_ahead: bool = False           # horovod: requests precede the data (schemes.fusion)
    horovod_groups: int = 0                # horovod: num_groups of grouped allreduces (0: none)
    first_buckets: tuple[tuple[int, float], ...] = ()   # ddp's first iteration (() = buckets)
    precision: str = "fp32"                # the step's arithmetic (its slowdown beside NCCL)

    def worker_of(self, rank: int) -> int:
        """Which worker (0..P-1, its shard) ``rank`` is."""
        return rank - self.worker_ranks[0]

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


DDP_BUCKET_BYTES = 25 * 2**20          # torch: _DEFAULT_BUCKET_CAP_MB (bucket_cap_mb unset)
DDP_FIRST_BUCKET_BYTES = 2**20         # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES


def ready_tensors(model: ModelCost, bytes_per_param: float) -> tuple[tuple[int, float], ...]:
    """Parameter tensors in gradient-ready order: the layers in reverse, each layer's
    tensors in reverse (bias, then weight): (gradient bytes, share of the backward before
    it is ready, counted on the layer's last tensor). Layers whose tensors are not
    recorded count as one tensor."""
    layers = model.layer_param_counts
    tensors = list(model.tensor_param_counts)
    if sum(tensors) != sum(layers):
        tensors = list(layers)
    per_layer, k = [], 0
    for count in layers:                     # the tensors that make up each layer
        mine, total = [], 0
        while k < len(tensors) and total < count:
            mine.append(tensors[k])
            total += tensors[k]
            k += 1
        if total != count:                   # tensors that do not tile the layers
            per_layer = [[c] for c in layers]
            break
        per_layer.append(mine)
    out = []
    for mine, share in zip(reversed(per_layer), reversed(model.backward_shares())):
        out += [(int(bytes_per_param * t), 0.0) for t in reversed(mine[1:])]
        out.append((int(bytes_per_param * mine[0]), share))
    return tuple(out)


def ddp_buckets(model: ModelCost, bucket_bytes: int = DDP_BUCKET_BYTES,
                bytes_per_param: float = 4.0) -> tuple[tuple[int, float], ...]:
    """DDP's buckets from its second iteration on: ``Reducer::rebuild_buckets``
    (``torch/csrc/distributed/c10d/reducer.cpp``) packs the tensors in the order their
    gradients became ready (``ready_tensors``) with ``compute_bucket_assignment_by_size``:
    a bucket closes once it holds at least its limit, ``first_bucket_bytes_cap`` for the
    first (1 MiB, ``_DEFAULT_FIRST_BUCKET_BYTES``) and ``bucket_bytes_cap`` (25 MiB) for
    the others; a ``bucket_cap_mb`` of the user's sets both (``_BucketCapacityConfig`` in
    ``torch/nn/parallel/distributed.py``). (bytes, share of the backward before the
    bucket is ready), the last bucket may be smaller."""
    limit = DDP_FIRST_BUCKET_BYTES if bucket_bytes == DDP_BUCKET_BYTES else bucket_bytes
    buckets, size, share = [], 0, 0.0
    for tensor_bytes, tensor_share in ready_tensors(model, bytes_per_param):
        size += tensor_bytes
        share += tensor_share
        if size >= limit:
            buckets.append((size, share))
            size, share, limit = 0, 0.0, bucket_bytes
    if size or not buckets:
        buckets.append((size, share))
    return tuple(buckets)


def ddp_first_buckets(model: ModelCost, bytes_per_param: float = 4.0
                      ) -> tuple[tuple[int, float], ...]:
    """DDP's first iteration: with ``find_unused_parameters=False`` (the default, and
    ``real/schemes/ddp.py``'s) torch builds one bucket of every gradient
    (``compute_bucket_size_limits``: ``[sys.maxsize]``), all-reduced once the backward
    is over; its buckets are rebuilt after it (``ddp_buckets``)."""
    total = sum(b for b, _ in ready_tensors(model, bytes_per_param))
    return ((total, 1.0),)


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
    """Full-speed step times of one worker for ``iterations`` steps (read-only: a draw is
    kept and handed to every prediction that makes it again)."""
    mean_s = fit.step_s(batch) / speed
    if fit.spread_cv <= 0:
        return np.full(iterations, mean_s)
    shape = 1.0 / fit.spread_cv ** 2
    return _DRAWN.gamma(shape, mean_s / shape, iterations, seed + rank)


class _Draws:
    """Step times drawn so far, by their draw: every scheme of a sweep draws the same ones
    for the same P (one stream per rank). At most ``kept`` steps in all (then forgotten)."""

    def __init__(self, kept: int):
        self.kept, self.steps, self.arrays = kept, 0, {}

    def gamma(self, shape: float, scale: float, size: int, seed: int) -> np.ndarray:
        key = (shape, scale, size, seed)
        drawn = self.arrays.get(key)
        if drawn is None:
            drawn = np.random.default_rng(seed).gamma(shape, scale, size=size)
            drawn.flags.writeable = False        # (handed to every prediction that asks)
            if self.steps + size > self.kept:
                self.arrays, self.steps = {}, 0
            self.arrays[key] = drawn
            self.steps += size
        return drawn


_DRAWN = _Draws(kept=1_000_000)
