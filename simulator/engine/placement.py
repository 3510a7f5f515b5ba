"""Where each rank runs, and how its messages go: a run's layout, derived once.

``layout(spec, cfg, workers, cluster, profile)`` resolves a prediction's cluster
before either engine runs, in this one file: the library the scheme runs on there
(``resolve_backend``), the profile with what the cluster's hardware decides instead
(``on_hardware``), the host and core pool of every rank, the wait of a message to each
rank for its turn on a core, the routes between them (``model.fabric``) and the threads
a worker computes with where the workload leaves them open. The SimPy model builds its
hosts and network from it, the fast path prices its collectives on it, ``run`` picks
the engine and fidelity from it: nothing is derived twice. ``runnable`` admits the
schemes that can run on a prediction's cluster before its sweep is made.

A profile holds what ``calibrate`` measured on one machine: its cores' step times, how
they share, its shared-memory transports, its scheduler. A cluster with accelerators
(``Cluster.hardware.device``) replaces every one of those that the hardware decides:

* each device is a compute slot of its host, one rank each: no core sharing,
  no scheduler delays (``sharing_slowdown``, quantum, balance and wake delays
  are dropped);
* messages inside a host cross the cluster's intra-host link, between hosts
  its NICs (``model.fabric``); the ``nccl`` and ``mpi`` transports are built
  from those links, with NCCL's call latency; the reduction is the device's
  (not modelled: ``gamma = 0``); ``gloo`` keeps the profile's measured costs: torch
  runs it on the host's CPU over TCP, each tensor copied from the device and back
  over the cluster's ``host_link`` (``Scheme.gloo_on_devices``: allreduce and ddp).

Imports: numpy, contracts (cluster, profile), simulator.model (config,
hardware.timeslice, fabric, schemes).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, replace

import numpy as np

from contracts.checks import ConfigError
from contracts.cluster import Cluster
from contracts.profile import Profile, Transport
from simulator.model.config import BACKEND_ALGORITHMS, SchemeConfig
from simulator.model.fabric import make_routes
from simulator.model.hardware.timeslice import handoff_s
from simulator.model.network import Routes
from simulator.model.schemes import SCHEMES, Scheme


@dataclass(frozen=True)
class Layout:
    """One run's resolved cluster: every engine reads these and derives none again."""
    spec: Scheme                  # with the backend it runs on this cluster
    cluster: Cluster
    profile: Profile              # adjusted to the cluster's hardware, once
    workers: int
    placement: tuple[int, ...]    # host of each rank (a server is rank 0)
    pools: tuple[int, ...]        # pool of cores each rank computes on
    routes: Routes
    threads: int                  # of each worker where the workload leaves them open

    @property
    def transport(self) -> Transport:
        return self.profile.transport(self.spec.backend)

    @property
    def worker_ranks(self) -> tuple[int, ...]:
        return self.spec.worker_ranks(self.workers)

    @property
    def worker_hosts(self) -> np.ndarray:
        return np.asarray([self.placement[r] for r in self.worker_ranks])

    @property
    def worker_pools(self) -> np.ndarray:
        return np.asarray([self.pools[r] for r in self.worker_ranks])

    def busiest_pool(self) -> int:
        """Ranks on the pool of cores with the most (the server too)."""
        return int(np.bincount(self.pools).max())


def layout(spec: Scheme, cfg: SchemeConfig, workers: int, cluster: Cluster,
           profile: Profile) -> Layout:
    spec = resolve_backend(spec, cfg, cluster)
    profile = on_hardware(profile, cluster)
    check(spec, workers, cluster)
    placement = placement_of_ranks(spec, cluster, workers)
    pools = tuple(cluster.core_pool_of(h) for h in placement)
    waits = handoffs(spec, cluster, placement, workers, profile)
    routes = make_routes(placement, cluster, profile.transport(spec.backend), waits, pools)
    return Layout(spec, cluster, profile, workers, placement, pools, routes,
                  default_threads(spec, cluster, workers))


def resolve_backend(spec, cfg: SchemeConfig, cluster: Cluster | None):
    """The scheme with the library that moves its data: the user's choice for the
    gradient schemes (``nccl`` by default on accelerator hosts), else its own."""
    on_devices = cluster is not None and cluster.device is not None
    backend = cfg.backend or ("nccl" if on_devices and spec.chosen_backend else spec.backend)
    if cfg.backend and cfg.backend != spec.backend and not spec.chosen_backend:
        chosen = (name for name, s in SCHEMES.items() if s.chosen_backend)
        raise ConfigError(f"scheme {spec.name!r} runs on {spec.backend} only "
                          f"(--backend applies to {', '.join(chosen)})")
    if backend == "nccl" and not on_devices:
        raise ConfigError(f"{spec.name} with nccl needs accelerator hosts: describe them "
                          "(devices_per_host and [device] in a cluster file, or a --preset)")
    if on_devices and backend == "gloo" and not spec.gloo_on_devices:
        raise ConfigError(f"{spec.name} with gloo on accelerator hosts is not modelled: "
                          "use --backend nccl")
    if on_devices and backend == "gloo" and cluster.hardware.host_link is None:
        raise ConfigError(f"{spec.name} with gloo on accelerator hosts copies every gradient "
                          "to host memory and back: give the copy's rate ([host_link] "
                          "bandwidth in the cluster file, e.g. CUDA's bandwidthTest pinned)")
    if on_devices and not spec.on_devices:
        raise ConfigError(f"scheme {spec.name!r} shares CPU memory and does not run on "
                          "accelerator hosts")
    if cfg.algorithm == "reduce_broadcast" and not on_devices:
        raise ConfigError("reduce_broadcast reduces a host's accelerators (Horovod's and "
                          "Caffe2's hierarchical allreduce): describe accelerator hosts")
    if cfg.algorithm == "reduce_broadcast" and cluster.hardware.host_link is None:
        raise ConfigError("reduce_broadcast copies the sum to host memory and back: give "
                          "the copy's rate ([host_link] bandwidth in the cluster file)")
    valid = BACKEND_ALGORITHMS[backend]
    if cfg.algorithm not in valid:
        raise ConfigError(f"{backend} has no allreduce algorithm {cfg.algorithm!r} "
                          f"(choose from {', '.join(valid)})")
    return replace(spec, backend=backend, polls=spec.polls and not on_devices)


def on_hardware(profile: Profile, cluster: Cluster) -> Profile:
    """The profile with what the cluster's accelerator hosts decide instead (see above)."""
    hw = cluster.hardware
    if hw is None or hw.device is None:
        return profile
    if hw.intra is None:
        raise ConfigError("accelerator hosts need the link between their devices: "
                          "add an [intra] section (bandwidth, latency)")
    alpha, beta = hw.intra.latency_s, 1.0 / hw.intra.bandwidth_bytes_per_s
    transports = (Transport("nccl", alpha, beta, 0.0, call_latency_s=hw.call_latency_s),
                  Transport("mpi", alpha, beta, 0.0))
    # gloo runs on the host's CPU over TCP: its costs on the profile's host stay
    transports += tuple(t for t in profile.transports if t.backend == "gloo")
    return replace(profile, cores=cluster.cores_per_host, transports=transports,
                   sharing_slowdown={}, scheduler_quantum_s=0.0, balance_delay_s=0.0,
                   wake_wait_s=0.0, balance_delays_s=())


def check(spec: Scheme, workers: int, cluster: Cluster) -> None:
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"workers must be an integer of at least 1 (got {workers!r})")
    if spec.single_worker and workers != 1:
        raise ConfigError(f"scheme {spec.name!r} runs on exactly 1 worker (got {workers})")
    if spec.single_host and cluster.hosts > 1:
        raise ConfigError(f"scheme {spec.name!r} needs shared memory on one host, "
                          f"but the cluster has {cluster.hosts} hosts")


def placement_of_ranks(spec: Scheme, cluster: Cluster, workers: int) -> tuple[int, ...]:
    """The host of each rank: the workers' as the cluster places P ranks, a server (rank 0)
    on the host the cluster gives the next rank (one of its own where hosts = P + 1)."""
    placement = cluster.placement_of(workers)
    if spec.server:
        return (cluster.host_of(workers),) + placement
    return placement


def handoffs(spec: Scheme, cluster: Cluster, placement: tuple[int, ...], workers: int,
             profile: Profile) -> tuple[float, ...]:
    """Per rank: the mean wait of a message to it for its turn on a core (``timeslice``).
    Only a polling receiver waits: it is runnable already and queues behind the busy
    processes of its core, each of which counts (MPI ranks poll between steps). A
    receiver that sleeps (gloo) is woken by the message and, inside a call where
    its peers sleep too, gets a core at once; what it pays is the CPU its calls
    need (``Transport.cpu_fraction``, shared like compute), and, leaving a call
    while every core computes, its wait for the scheduler (``CoreHost.wake``)."""
    if not spec.polls:
        return (0.0,) * len(placement)
    pools = [cluster.core_pool_of(h) for h in placement]
    per_pool = np.bincount(pools)
    return tuple(handoff_s(int(per_pool[p]), cluster.cores_per_host, profile.scheduler_quantum_s)
                 for p in pools)


def default_threads(spec: Scheme, cluster: Cluster, workers: int) -> int:
    """floor(cores / ranks on the busiest host), at least 1: what real.train picks."""
    ranks = spec.ranks(workers)                      # the parameter server is a rank too
    per_host = ranks if cluster.shared_cores else max(np.bincount(cluster.placement_of(ranks)))
    return max(1, cluster.cores_per_host // int(per_host))


def runnable(cfgs: list[SchemeConfig], cluster, explicit: bool, top: int) -> list[SchemeConfig]:
    """The schemes that can run on the cluster: one that needs a single host where one P
    fits on one (the sweep leaves out its larger P), every other at the largest P ``top``;
    a scheme the user named that cannot is an error, one that ``all`` brought in is skipped
    with a note."""
    keep = []
    for cfg in cfgs:
        spec = SCHEMES[cfg.name]
        on = cluster.at(1 if spec.single_host else spec.ranks(top))
        try:
            check(spec, 1, on)
            resolve_backend(spec, cfg, on)
        except ConfigError:
            if explicit:
                raise
            print(f"predict: note: {cfg.name} skipped (cannot run on this cluster)",
                  file=sys.stderr)
            continue
        keep.append(cfg)
    return keep
