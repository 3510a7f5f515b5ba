"""Where each rank runs, and how its messages go: a run's layout, derived once.

``layout(spec, cfg, workers, cluster, profile)`` resolves a prediction's cluster
before either engine runs: the library the scheme runs on there, the profile with
what the cluster's hardware decides instead (``machine.on_hardware``), the host and
core pool of every rank, the wait of a message to each rank for its turn on a core,
and the routes between them. The SimPy model builds its hosts and network from it,
the fast path prices its collectives on it, ``run`` picks the engine and fidelity
from it: nothing is derived twice.

Imports: numpy, contracts (cluster, profile), simulator.model (config,
hardware.timeslice, fabric, network, schemes), engine.machine.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from contracts.checks import ConfigError
from contracts.cluster import Cluster
from contracts.profile import Profile, Transport
from simulator.engine.machine import on_hardware, resolve_backend
from simulator.model.config import SchemeConfig
from simulator.model.fabric import make_routes
from simulator.model.hardware.timeslice import handoff_s
from simulator.model.network import Routes
from simulator.model.schemes import Scheme


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
    routes = make_routes(placement, cluster, profile.transport(spec.backend),
                         handoffs(spec, cluster, placement, workers, profile), pools)
    return Layout(spec, cluster, profile, workers, placement, pools, routes)


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
