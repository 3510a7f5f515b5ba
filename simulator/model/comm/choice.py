"""Which allreduce a library runs: MPICH's choice, gloo's ring, NCCL's tuner.

Imports: ``contracts`` (closed_forms, profile), ``comm.collectives`` (host groups),
``model.network``.
"""
from __future__ import annotations

import functools

from simulator.contracts.closed_forms import choose_allreduce, ring_allreduce_s, tree_allreduce_s
from simulator.contracts.profile import Transport
from simulator.model.comm.collectives import host_groups
from simulator.model.network import Routes


def resolve_algorithm(backend: str, algorithm: str, ranks: tuple[int, ...], n_bytes: float,
                      routes: Routes) -> str:
    """The allreduce a library runs for ``algorithm``: MPICH's choice for mpi (and gloo's
    ring), NCCL's for nccl: ``auto`` takes the faster of ring and double binary tree by
    their contention-free closed forms on the group's slowest path (NCCL's tuner does
    the same with its own model); ``hierarchical`` needs as many ranks on every host and
    is a ring otherwise; a ring runs NCCL's LL protocol (``ring_ll``) where
    ``_nccl_protocol`` says so."""
    if backend != "nccl":
        return choose_allreduce(algorithm, n_bytes, len(ranks), routes.one_host(ranks))
    if algorithm == "hierarchical":
        return "hierarchical" if host_groups(routes.placement, ranks)[1] else "ring"
    if algorithm != "auto" or len(ranks) <= 2:
        chosen = "ring" if algorithm == "auto" else algorithm
    else:
        a, b = routes.group_params(ranks)
        chosen = _nccl_auto(len(ranks), float(n_bytes), a, b)
    return _nccl_protocol(chosen, ranks, float(n_bytes), routes) if chosen == "ring" else chosen


def _nccl_protocol(algorithm: str, ranks: tuple[int, ...], n: float, routes: Routes) -> str:
    """``ring_ll`` where NCCL runs this ring allreduce with its LL protocol: always with
    ``protocol = "ll"``; by the release's size rule with ``nccl-2.2`` and ``nccl-2.3``
    (``Hardware.ll_by_size``); with ``auto`` where the LL call's contention-free closed
    form (its call and step latencies, ``n / bandwidth_share`` bytes) is the shorter, as
    NCCL 2.5's tuner compares its own; else ``ring`` (Simple). Where the tuner's ``auto``
    picked the double binary tree it ran that with Simple (LL trees are not modelled)."""
    hw, ll_routes = routes.hardware, routes.ll_routes
    if ll_routes is None or hw.protocol == "simple":
        return algorithm
    if hw.protocol == "ll":
        return "ring_ll"
    p = len(ranks)
    if hw.protocol in ("nccl-2.2", "nccl-2.3"):
        return "ring_ll" if hw.ll_by_size(n, p, not routes.one_host(ranks)) else "ring"
    a, b = routes.group_params(ranks)
    a_ll, _ = ll_routes.group_params(ranks)
    simple_s = hw.call_latency_s + ring_allreduce_s(p, n, a, b)
    ll_s = hw.ll.call_latency_s + ring_allreduce_s(p, n / hw.ll.bandwidth_share, a_ll, b)
    return "ring_ll" if ll_s < simple_s else "ring"


def call_latency_s(transport: Transport, routes: Routes, algorithm: str) -> float:
    """The library's fixed latency per collective call: the transport's (NCCL's base
    latency of the Simple protocol), or the LL protocol's for ``ring_ll``."""
    if algorithm == "ring_ll":
        return routes.hardware.ll.call_latency_s
    return transport.call_latency_s


@functools.lru_cache(maxsize=4096)
def _nccl_auto(p: int, n: float, a: float, b: float) -> str:
    return "tree" if tree_allreduce_s(p, n, a, b) < ring_allreduce_s(p, n, a, b) else "ring"
