"""Where each rank runs, and what a message to it waits for its turn on a core.

Both engines need these: the SimPy model to build its hosts and routes, the
fast path to price its collectives the same way.

Imports: numpy, simulator.contracts (cluster, profile), simulator.model (hardware.timeslice,
schemes).
"""
from __future__ import annotations

import numpy as np

from simulator.contracts.cluster import Cluster
from simulator.contracts.profile import Profile
from simulator.model.hardware.timeslice import handoff_s
from simulator.model.schemes import Scheme


def placement_of_ranks(spec: Scheme, cluster: Cluster, workers: int) -> tuple[int, ...]:
    placement = cluster.placement_of(workers)
    if spec.extra_rank:
        return placement + (cluster.host_of(workers),)
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
