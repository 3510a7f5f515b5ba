"""Which allreduce a library runs: MPICH's choice, gloo's ring, NCCL's tuner.

Imports: ``contracts.closed_forms``, ``comm.collectives`` (host groups), ``model.network``.
"""
from __future__ import annotations

import functools

from simulator.contracts.closed_forms import choose_allreduce, ring_allreduce_s, tree_allreduce_s
from simulator.model.comm.collectives import host_groups
from simulator.model.network import Routes


def resolve_algorithm(backend: str, algorithm: str, ranks: tuple[int, ...], n_bytes: float,
                      routes: Routes) -> str:
    """The allreduce a library runs for ``algorithm``: MPICH's choice for mpi (and gloo's
    ring), NCCL's for nccl: ``auto`` takes the faster of ring and double binary tree by
    their contention-free closed forms on the group's slowest path (NCCL's tuner does
    the same with its own model); ``hierarchical`` needs as many ranks on every host and
    is a ring otherwise."""
    if backend != "nccl":
        return choose_allreduce(algorithm, n_bytes, len(ranks), routes.one_host(ranks))
    if algorithm == "hierarchical":
        return "hierarchical" if host_groups(routes.placement, ranks)[1] else "ring"
    if algorithm != "auto" or len(ranks) <= 2:
        return "ring" if algorithm == "auto" else algorithm
    a, b = routes.group_params(ranks)
    return _nccl_auto(len(ranks), float(n_bytes), a, b)


@functools.lru_cache(maxsize=4096)
def _nccl_auto(p: int, n: float, a: float, b: float) -> str:
    return "tree" if tree_allreduce_s(p, n, a, b) < ring_allreduce_s(p, n, a, b) else "ring"
