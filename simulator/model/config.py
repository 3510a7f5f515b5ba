"""What to simulate beyond the contracts: the scheme's knobs and the workers' speeds.

* ``SchemeConfig``: the scheme and its knobs, the fidelity of communication
  (``analytic`` closed forms or ``message`` by message) and the engine, the
  library that moves the gradients (``backend``) and how (``compression``,
  Horovod's fusion buffer and cycle time).
* ``Heterogeneity``: per-worker speed factors and stragglers.

The workload and the cluster are contracts between stages
(``contracts.workload``, ``contracts.cluster``).
Imports: ``contracts`` only.
"""
from __future__ import annotations

from dataclasses import dataclass

from contracts.checks import ConfigError, nonnegative, positive

FIDELITIES = ("auto", "analytic", "message")
ENGINES = ("auto", "des", "fast")
BACKENDS = ("gloo", "mpi", "nccl")
# the allreduce algorithms each library runs (``auto``: as the library picks)
BACKEND_ALGORITHMS = {"mpi": ("auto", "ring", "recursive_doubling", "reduce_scatter_allgather"),
                      "gloo": ("auto", "ring", "reduce_broadcast"),
                      "nccl": ("auto", "ring", "tree", "hierarchical", "reduce_broadcast")}
ALGORITHMS = tuple(dict.fromkeys(a for algs in BACKEND_ALGORITHMS.values() for a in algs))
COMPRESSIONS = ("none", "fp16")
HOROVOD_FUSION_BYTES = 64 * 2**20      # HOROVOD_FUSION_THRESHOLD default (operations.cc)
HOROVOD_CYCLE_S = 0.005                # the background loop's sleep (HOROVOD_CYCLE_TIME, 5 ms)


@dataclass(frozen=True)
class SchemeConfig:
    name: str
    avg_every: int = 0                 # psgd: average every K steps (0 = once, at the end);
                                       # async_avg: exchange with the holder every K steps
    algorithm: str = "auto"            # mpi_allreduce: ring | recursive_doubling | reduce_scatter_allgather | auto
    bucket_bytes: int = 25 * 2**20     # ddp bucket cap
    fidelity: str = "auto"             # communication: analytic (closed form) | message (per
                                       # message) | auto (analytic where it is the message model)
    engine: str = "auto"               # auto | des (SimPy) | fast (vectorised closed form, sync schemes)
    backend: str = ""                  # gloo | mpi | nccl ("": the scheme's own)
    compression: str = "none"          # gradients sent as: none (their dtype) | fp16
    fusion_bytes: int = HOROVOD_FUSION_BYTES   # horovod: tensor fusion buffer
    cycle_s: float = HOROVOD_CYCLE_S           # horovod: background loop's cycle time
    negotiation_s: float = 0.0                 # horovod: rank 0's time per other rank per
                                               # cycle (their requests, its responses)
    requests_ahead: bool = False               # horovod: the framework requests each gradient
                                               # before the GPU has computed it (TensorFlow):
                                               # fused by request, each buffer waits for its data
    horovod_groups: int = 0                    # horovod: num_groups (0.21's grouped allreduce):
                                               # the tensors in that many groups, each handed
                                               # over once all of it is computed (0: each alone)

    def __post_init__(self):
        if self.avg_every < 0:
            raise ConfigError(f"avg_every must not be negative (got {self.avg_every})")
        if self.algorithm not in ALGORITHMS:
            raise ConfigError(f"unknown algorithm {self.algorithm!r} (choose from {', '.join(ALGORITHMS)})")
        if self.fidelity not in FIDELITIES:
            raise ConfigError(f"unknown fidelity {self.fidelity!r} (choose from {', '.join(FIDELITIES)})")
        if self.engine not in ENGINES:
            raise ConfigError(f"unknown engine {self.engine!r} (choose from {', '.join(ENGINES)})")
        positive("bucket_bytes", self.bucket_bytes)
        positive("fusion_bytes", self.fusion_bytes)
        nonnegative("cycle_s", self.cycle_s)
        nonnegative("negotiation_s", self.negotiation_s)
        if self.horovod_groups < 0:
            raise ConfigError(f"horovod_groups must not be negative (got {self.horovod_groups})")
        if self.backend and self.backend not in BACKENDS:
            raise ConfigError(f"unknown backend {self.backend!r} (choose from {', '.join(BACKENDS)})")
        if self.compression not in COMPRESSIONS:
            raise ConfigError(f"unknown compression {self.compression!r} "
                              f"(choose from {', '.join(COMPRESSIONS)})")


@dataclass(frozen=True)
class Heterogeneity:
    """Per-worker speed factors (1.0 = the profile's speed; 0.5 = twice as slow).

    ``speed_factors`` given explicitly win; otherwise each worker draws a factor
    from a log-normal of coefficient of variation ``speed_cv`` (seeded), and the
    last ``stragglers`` ranks are further slowed down ``straggler_slowdown`` times.
    """
    speed_cv: float = 0.0
    stragglers: int = 0
    straggler_slowdown: float = 2.0
    speed_factors: tuple[float, ...] = ()

    def __post_init__(self):
        nonnegative("speed_cv", self.speed_cv)
        nonnegative("stragglers", self.stragglers)
        positive("straggler_slowdown", self.straggler_slowdown)
        for f in self.speed_factors:
            positive("speed factor", f)
