"""The plan of one run (what every rank does) and the setup (who does it).

``Plan`` is data derived from workload, scheme config, model and P: iterations,
message sizes, DDP buckets. ``Setup`` bundles the simulated collaborators
(workers, comm, recorder, server) handed to the scheme's rank processes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .comm import Comm
from .profile import ModelCost
from .recorder import Recorder
from .server import ParameterServer
from .worker import Worker


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

    @property
    def param_bytes(self) -> int:
        return 4 * self.param_count


def ddp_buckets(model: ModelCost, bucket_bytes: int) -> tuple[tuple[int, float], ...]:
    """Layers in reverse order, packed into buckets of at least ``bucket_bytes`` (the last
    one may be smaller). A layer's backward takes a share of the backward time equal to
    its share of the parameters (a simplification: convolutions cost more per parameter)."""
    buckets, size, share = [], 0, 0.0
    total = sum(model.layer_param_counts) or 1
    for params in reversed(model.layer_param_counts):
        size += 4 * params
        share += params / total
        if size >= bucket_bytes:
            buckets.append((size, share))
            size, share = 0, 0.0
    if size or not buckets:
        buckets.append((size, share))
    return tuple(buckets)


@dataclass
class Setup:
    plan: Plan
    workers: list[Worker]
    comm: Comm
    recorder: Recorder
    server: ParameterServer | None = None
    extra: dict = field(default_factory=dict)


def train_step(env, worker: Worker, recorder: Recorder, i: int, extra_s: float = 0.0):
    """One forward + backward + update on the worker's host, accounted as compute."""
    t0 = env.now
    yield worker.compute(worker.step_s[i] + extra_s)
    recorder.add(worker.rank, "compute", t0, env.now, "step")
