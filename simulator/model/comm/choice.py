"""Which allreduce a library runs on the model's routes: MPICH's choice
(``libraries.mpich``), gloo's ring, NCCL's tuner.

Imports: contracts.profile, libraries (mpich, nccl), simulator.model.comm.closed_forms,
``model.network`` (routes, host groups).
"""
from __future__ import annotations

import functools

from libraries.mpich import choose_allreduce
from libraries.nccl import ring_kernel_bytes
from simulator.model.comm.closed_forms import ring_allreduce_s, tree_allreduce_s
from contracts.profile import Transport
from simulator.model.network import Routes, host_groups


def resolve_algorithm(backend: str, algorithm: str, ranks: tuple[int, ...], n_bytes: float,
                      routes: Routes) -> str:
    """The allreduce a library runs for ``algorithm``: MPICH's choice for mpi, gloo's
    segmented ring (``gloo_ring``; through host memory on accelerator hosts,
    ``gloo_ring_host``) for gloo, NCCL's for nccl: ``auto`` takes the faster
    of ring and double binary tree by their contention-free closed forms on the group's
    slowest path (NCCL's tuner does the same with its own model); ``hierarchical``
    needs as many ranks on every host and is a ring otherwise; a ring runs NCCL's LL
    protocol (``ring_ll``) where ``_nccl_protocol`` says so; ``reduce_broadcast`` is
    Horovod's (nccl) or Caffe2's (gloo) hierarchy (``comm.nccl``)."""
    if algorithm == "reduce_broadcast":   # Horovod 0.13.6-0.14's and Caffe2's hierarchy
        return "reduce_broadcast_gloo" if backend == "gloo" else "reduce_broadcast_mpi"
    if backend == "gloo":               # torch's ProcessGroupGloo: gloo's ring, segmented
        if algorithm not in ("auto", "ring"):
            return algorithm
        on_devices = routes.hardware is not None and routes.hardware.device is not None
        return "gloo_ring_host" if on_devices else "gloo_ring"
    if backend != "nccl":
        return choose_allreduce(algorithm, n_bytes, len(ranks), routes.hosts(ranks))
    if algorithm == "hierarchical":
        return "hierarchical" if host_groups(routes.placement, ranks)[1] else "ring"
    if algorithm != "auto" or len(ranks) <= 2:
        chosen = "ring" if algorithm == "auto" else algorithm
    else:
        a, b = routes.group_params(ranks)
        chosen = _nccl_auto(len(ranks), float(n_bytes), a, b,
                            plateau_factor(routes, ranks, float(n_bytes)))
    return _nccl_protocol(chosen, ranks, float(n_bytes), routes) if chosen == "ring" else chosen


LOW_LATENCY = {"ring_ll": "ll", "ring_ll128": "ll128"}    # algorithm -> NCCL protocol


def low_latency(routes: Routes, algorithm: str):
    """(the protocol's costs, the routes it runs over) of a ``ring_ll`` or ``ring_ll128``
    call."""
    name = LOW_LATENCY[algorithm]
    return getattr(routes.hardware, name), getattr(routes, f"{name}_routes")


def protocol_share(routes: Routes, ranks: tuple[int, ...], algorithm: str) -> float:
    """The share of the bus bandwidth a ``ring_ll``/``ring_ll128`` call moves data at on
    these ranks' slowest path: the protocol's share, at most its cap (``LowLatency``)."""
    ll, _ = low_latency(routes, algorithm)
    _, b = routes.group_params(ranks)
    return ll.share_at(1.0 / b if b else 0.0)


def kernel_bytes(routes: Routes, ranks: tuple[int, ...], n_bytes: float,
                 algorithm: str) -> float:
    """The bytes a ``ring_ll``/``ring_ll128`` allreduce is priced at: ``n_bytes``, or on
    one host of a preset that gives NCCL's ``kernel_channels`` the bytes the kernel's
    channels and chunks move as long as (``libraries.nccl.ring_kernel_bytes``). The
    tuner's choice (``_nccl_protocol``) still compares its own closed forms."""
    hw = routes.hardware
    if hw is None or hw.kernel_channels <= 0 or not routes.one_host(ranks):
        return n_bytes
    return ring_kernel_bytes(n_bytes, len(ranks), LOW_LATENCY[algorithm], hw.kernel_channels,
                             hw.release)


def _nccl_protocol(algorithm: str, ranks: tuple[int, ...], n: float, routes: Routes) -> str:
    """``ring_ll`` or ``ring_ll128`` where NCCL runs this ring allreduce with its LL or
    LL128 protocol: always with ``protocol = "ll"`` or ``"ll128"``; by the release's
    size rule with ``nccl-2.2`` and ``nccl-2.3`` (``Hardware.ll_by_size``: LL or
    Simple); with ``auto`` the protocol whose contention-free closed form (its call and
    step latencies, ``n / share`` bytes) is the shortest, as NCCL's tuner compares its
    own (``src/graph/tuning.cc``, ``src/enqueue.cc``); else ``ring`` (Simple). Where the
    tuner's ``auto`` picked the double binary tree it ran that with Simple (LL trees
    are not modelled)."""
    hw = routes.hardware
    priced = [alg for alg, name in LOW_LATENCY.items() if getattr(hw, name) is not None]
    if not priced or hw.protocol == "simple":
        return algorithm
    if hw.protocol in ("ll", "ll128"):
        return "ring_" + hw.protocol
    p = len(ranks)
    if hw.protocol in ("nccl-2.2", "nccl-2.3"):
        return "ring_ll" if hw.ll_by_size(n, p, not routes.one_host(ranks)) else "ring"
    a, b = routes.group_params(ranks)
    plateau = plateau_factor(routes, ranks, n)
    best, best_s = "ring", hw.call_latency_s + ring_allreduce_s(p, n, a, b) + (
        (plateau - 1.0) * 2 * (p - 1) * a)
    for alg in priced:
        ll, proto_routes = low_latency(routes, alg)
        a_ll, _ = proto_routes.group_params(ranks)
        t = ll.call_latency_s + ring_allreduce_s(p, n / protocol_share(routes, ranks, alg),
                                                 a_ll, b)
        if t < best_s:
            best, best_s = alg, t
    return best


def ranks_per_host(routes: Routes, ranks: tuple[int, ...]) -> int:
    """The most ranks of ``ranks`` on one host (MPICH's composition reduces among them)."""
    counts: dict[int, int] = {}
    for r in ranks:
        counts[routes.placement[r]] = counts.get(routes.placement[r], 0) + 1
    return max(counts.values(), default=1)


def call_latency_s(transport: Transport, routes: Routes, algorithm: str) -> float:
    """The library's fixed latency per collective call: the transport's (NCCL's base
    latency of the Simple protocol), or the LL or LL128 protocol's."""
    if algorithm in LOW_LATENCY:
        return low_latency(routes, algorithm)[0].call_latency_s
    return transport.call_latency_s


def plateau_factor(routes: Routes, ranks: tuple[int, ...], n_bytes: float) -> float:
    """NCCL's "plateau effect of ring" on a Simple ring allreduce of these ranks: the
    preset's ``ring_plateau`` across hosts from ``ring_plateau_bytes`` a rank on, else 1
    (``costs.plateau_s`` prices it; the tuner's choice compares with it, as NCCL's)."""
    hw = routes.hardware
    if (hw is None or hw.ring_plateau <= 1.0 or not getattr(routes, "nccl", False)
            or n_bytes < hw.ring_plateau_bytes * len(ranks) or routes.one_host(ranks)):
        return 1.0
    return hw.ring_plateau


@functools.lru_cache(maxsize=4096)
def _nccl_auto(p: int, n: float, a: float, b: float, plateau: float = 1.0) -> str:
    ring_s = ring_allreduce_s(p, n, a, b) + (plateau - 1.0) * 2 * (p - 1) * a
    return "tree" if tree_allreduce_s(p, n, a, b) < ring_s else "ring"
