"""What to simulate, one frozen dataclass per layer: workload, cluster, scheme, heterogeneity.

* ``Workload``: the model, the **per-worker** batch (each of P workers takes
  ``batch_per_worker`` samples per step, so one synchronous step consumes
  ``P * batch_per_worker`` samples), the dataset size and how long to train.
  An epoch is ``ceil(dataset_samples / (P * batch_per_worker))`` iterations per
  worker for every data-parallel scheme (the dataset is split over the workers).
* ``Cluster``: hosts of ``cores_per_host`` cores; hosts talk over full-duplex
  links (``Link``) through a non-blocking switch; processes on one host talk
  through shared memory (the profile's transport of the scheme's backend).
  Ranks are placed ``round_robin`` (rank r on host r mod H) or ``packed``
  (fill a host's cores before the next one). ``shared_cores`` describes an
  *emulated* cluster (``real.cluster``: hosts are network namespaces of one
  machine): every host keeps its own link, but all processes of all hosts
  draw compute from ONE pool of ``cores_per_host`` cores.
* ``SchemeConfig``: the scheme and its knobs, and the fidelity of communication.
* ``Heterogeneity``: per-worker speed factors and stragglers.

The cluster can be read from a small TOML file (``load_cluster``)::

    [cluster]
    hosts = 16
    cores_per_host = 8
    placement = "round_robin"   # or "packed"
    shared_cores = false        # true: all hosts share one pool of cores_per_host cores
    [link]
    bandwidth = "10gbit"
    latency = "20us"
"""
from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path

from .units import parse_bandwidth, parse_duration

PLACEMENTS = ("round_robin", "packed")
FIDELITIES = ("analytic", "message")
ENGINES = ("auto", "des", "fast")
ALGORITHMS = ("auto", "ring", "recursive_doubling", "reduce_scatter_allgather")


class ConfigError(ValueError):
    """A configuration that cannot be simulated; the message names the value."""


@dataclass(frozen=True)
class Workload:
    model: str = "cnn"
    batch_per_worker: int = 64         # samples per step on EACH worker
    dataset_samples: int = 60000
    epochs: float = 1.0
    iterations: int | None = None      # per worker; overrides epochs when set
    threads_per_worker: int | None = 1   # None: cores // ranks on the host, as real.train does

    def __post_init__(self):
        _positive("batch_per_worker", self.batch_per_worker)
        _positive("dataset_samples", self.dataset_samples)
        _positive("epochs", self.epochs)
        if self.threads_per_worker is not None:
            _positive("threads_per_worker", self.threads_per_worker)
        if self.iterations is not None:
            _positive("iterations", self.iterations)

    def iterations_per_epoch(self, workers: int) -> int:
        return max(1, math.ceil(self.dataset_samples / (workers * self.batch_per_worker)))

    def iterations_per_worker(self, workers: int) -> int:
        if self.iterations is not None:
            return self.iterations
        return max(1, math.ceil(self.epochs * self.iterations_per_epoch(workers)))


@dataclass(frozen=True)
class Link:
    """One full-duplex host link: t_msg(n) = latency_s + n / bandwidth_bytes_per_s."""
    bandwidth_bytes_per_s: float
    latency_s: float

    def __post_init__(self):
        _positive("link bandwidth", self.bandwidth_bytes_per_s)
        if self.latency_s < 0:
            raise ConfigError(f"link latency must not be negative (got {self.latency_s})")


@dataclass(frozen=True)
class Cluster:
    hosts: int
    cores_per_host: int
    link: Link | None = None           # needed as soon as hosts > 1
    placement: str = "round_robin"
    shared_cores: bool = False         # True: one pool of cores_per_host cores for ALL hosts
                                       # (emulated hosts on one machine); links stay per host

    def __post_init__(self):
        _positive("hosts", self.hosts)
        _positive("cores_per_host", self.cores_per_host)
        if self.placement not in PLACEMENTS:
            raise ConfigError(f"unknown placement {self.placement!r} "
                              f"(choose from {', '.join(PLACEMENTS)})")
        if self.hosts > 1 and self.link is None:
            raise ConfigError("a cluster of several hosts needs a link (bandwidth and latency)")
        if not isinstance(self.shared_cores, bool):
            raise ConfigError(f"shared_cores must be true or false (got {self.shared_cores!r})")

    def host_of(self, rank: int) -> int:
        if self.placement == "packed":
            return (rank // self.cores_per_host) % self.hosts
        return rank % self.hosts

    def placement_of(self, ranks: int) -> tuple[int, ...]:
        return tuple(self.host_of(r) for r in range(ranks))

    def core_pool_of(self, host: int) -> int:
        """Which pool of cores a host computes on: its own, or the one shared pool (0)."""
        return 0 if self.shared_cores else host

    @property
    def core_pools(self) -> int:
        return 1 if self.shared_cores else self.hosts


def calibrated_cluster(cores: int) -> Cluster:
    """The machine the profile was measured on: one host, shared memory only."""
    return Cluster(hosts=1, cores_per_host=cores)


@dataclass(frozen=True)
class SchemeConfig:
    name: str
    avg_every: int = 0                 # psgd: average every K steps (0 = once, at the end);
                                       # async_avg: exchange with the holder every K steps
    algorithm: str = "auto"            # mpi_allreduce: ring | recursive_doubling | reduce_scatter_allgather | auto
    bucket_bytes: int = 25 * 2**20     # ddp bucket cap
    fidelity: str = "analytic"         # communication: analytic (closed form) | message (per message)
    engine: str = "auto"               # auto | des (SimPy) | fast (vectorised closed form, sync schemes)

    def __post_init__(self):
        if self.avg_every < 0:
            raise ConfigError(f"avg_every must not be negative (got {self.avg_every})")
        if self.algorithm not in ALGORITHMS:
            raise ConfigError(f"unknown algorithm {self.algorithm!r} (choose from {', '.join(ALGORITHMS)})")
        if self.fidelity not in FIDELITIES:
            raise ConfigError(f"unknown fidelity {self.fidelity!r} (choose from {', '.join(FIDELITIES)})")
        if self.engine not in ENGINES:
            raise ConfigError(f"unknown engine {self.engine!r} (choose from {', '.join(ENGINES)})")
        _positive("bucket_bytes", self.bucket_bytes)


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
        if self.speed_cv < 0:
            raise ConfigError(f"speed_cv must not be negative (got {self.speed_cv})")
        if self.stragglers < 0:
            raise ConfigError(f"stragglers must not be negative (got {self.stragglers})")
        _positive("straggler_slowdown", self.straggler_slowdown)
        for f in self.speed_factors:
            _positive("speed factor", f)


def _positive(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"{name} must be a positive number (got {value!r})")


# ---------------------------------------------------------------- cluster files

def load_cluster(path: str | Path) -> Cluster:
    """Read a cluster TOML file; a missing or bad value raises ConfigError naming it."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"cluster file {path} does not exist") from None
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"cluster file {path} cannot be read: {e}") from None
    try:
        return cluster_from_dict(raw)
    except ConfigError as e:
        raise ConfigError(f"cluster file {path}: {e}") from None


def cluster_from_dict(raw: dict) -> Cluster:
    c = raw.get("cluster")
    if not isinstance(c, dict):
        raise ConfigError("section [cluster] is missing")
    hosts = _int_field(c, "hosts", "cluster")
    cores = _int_field(c, "cores_per_host", "cluster")
    placement = c.get("placement", "round_robin")
    shared_cores = c.get("shared_cores", False)
    link = None
    if "link" in raw:
        lk = raw["link"]
        if not isinstance(lk, dict):
            raise ConfigError("[link] must be a table")
        for key in ("bandwidth", "latency"):
            if key not in lk:
                raise ConfigError(f"value link.{key} is missing")
        try:
            link = Link(parse_bandwidth(lk["bandwidth"]), parse_duration(lk["latency"]))
        except ValueError as e:
            raise ConfigError(f"link: {e}") from None
    elif hosts > 1:
        raise ConfigError("section [link] is missing (needed for more than one host)")
    return Cluster(hosts=hosts, cores_per_host=cores, link=link, placement=placement,
                   shared_cores=shared_cores)


def _int_field(d: dict, key: str, section: str) -> int:
    if key not in d:
        raise ConfigError(f"value {section}.{key} is missing")
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigError(f"value {section}.{key} must be a positive integer (got {v!r})")
    return v
