"""Which algorithm MPICH 5.0 runs for a collective: its own decision, read from its source.

MPICH picks an allreduce, reduce or broadcast algorithm from the message's size, the
number of ranks and how they sit on hosts (``maint/tuning/coll/mpir/generic.json`` and
``ch4/generic.json`` of the MPICH 5.0.1 tag; the wheel is 5.0.2). The choice is a fact
about the library, not a cost: the model prices the algorithm it names
(``simulator.model.comm``) and ``real.records.wire`` counts the bytes it puts on TCP,
so both read it here and agree by construction. An algorithm forced by
``MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM`` is named as such.

Imports: the standard library only.
"""
from __future__ import annotations

MPI_ELEMENT_BYTES = 4                # psgd and mpi_allreduce reduce float32 (MPI.FLOAT)
MPIR_ALLREDUCE_SHORT_BYTES = 8       # maint/tuning/coll/mpir/generic.json: avg_msg_size<=8
MPIR_REDUCE_SHORT_BYTES = 2048       # ... collective=reduce: avg_msg_size<=2048
MPIR_BCAST_SHORT_BYTES = 12288       # ... collective=bcast: avg_msg_size<=12288
MPIR_BCAST_MEDIUM_BYTES = 524288     # ... comm_size=pow2: avg_msg_size<=524288
MPIR_BCAST_SMALL_COMM = 8            # ... comm_size<8: binomial whatever the size


RELEASE_GATHER_REDUCE_RADIX = 4     # MPIR_CVAR_REDUCE_INTRANODE_TREE_KVAL (k-ary tree)
RELEASE_GATHER_BCAST_RADIX = 64     # MPIR_CVAR_BCAST_INTRANODE_TREE_KVAL


def choose_allreduce(algorithm: str, n_bytes: float, workers: int, hosts: int = 0) -> str:
    """The allreduce MPICH 5.0 runs for ``algorithm`` on ``workers`` ranks over ``hosts``
    hosts (0: unknown, taken as one rank per host).

    ``auto`` (``MPID_Allreduce`` in ``ch4/src/ch4_coll.h``, its choice of composition in
    ``maint/tuning/coll/ch4/generic.json``): a communicator of several hosts with
    several ranks on some runs ch4's composition alpha, ``smp`` (reduce in each host,
    allreduce among the hosts' first ranks, broadcast); one host (composition gamma)
    and one rank per host (beta) run the MPIR level's choice, ``mpir_allreduce_choice``.
    On one host gamma would take the shared-memory release/gather tree, but its
    selection requires ``is_multi_threaded=no`` and mpi4py initialises MPI with
    ``MPI_THREAD_MULTIPLE``: MPICH falls back to the MPIR level (measured: MPICH 5.0.2
    under mpi4py never maps release/gather's shared segments). A named algorithm is
    what ``MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM`` forces, but Rabenseifner's needs
    count >= pof2 (``coll_algorithms.txt``: ``size-ge-pof2``) and falls back to ``auto``
    otherwise."""
    if algorithm == "reduce_scatter_allgather" and _elements(n_bytes) < _pof2(max(1, workers)):
        return mpir_allreduce_choice(n_bytes, workers)
    if algorithm != "auto":
        return algorithm
    if 1 < hosts < workers:
        return "smp"
    return mpir_allreduce_choice(n_bytes, workers)


def _elements(n_bytes: float) -> float:
    return n_bytes / MPI_ELEMENT_BYTES


def mpir_allreduce_choice(n_bytes: float, workers: int) -> str:
    """``MPIR_Allreduce_impl``'s ``auto`` (``maint/tuning/coll/mpir/generic.json``):
    recursive doubling up to 8 bytes or for fewer elements than the largest power of
    two of ranks, Rabenseifner's reduce-scatter/allgather otherwise."""
    if n_bytes <= MPIR_ALLREDUCE_SHORT_BYTES or _elements(n_bytes) < _pof2(max(1, workers)):
        return "recursive_doubling"
    return "reduce_scatter_allgather"


def mpir_reduce_choice(n_bytes: float, ranks: int) -> str:
    """``MPIR_Reduce_impl``'s ``auto`` on a host's ranks (``generic.json``,
    ``collective=reduce``, ``comm_hierarchy=any``): binomial up to 2048 bytes or for
    fewer elements than the largest power of two of ranks, else Rabenseifner's
    reduce-scatter/gather."""
    if n_bytes <= MPIR_REDUCE_SHORT_BYTES or _elements(n_bytes) < _pof2(max(1, ranks)):
        return "binomial"
    return "reduce_scatter_gather"


def mpir_bcast_choice(n_bytes: float, ranks: int) -> str:
    """``MPIR_Bcast_impl``'s ``auto`` on a host's ranks (``generic.json``,
    ``collective=bcast``): binomial below 8 ranks or up to 12288 bytes; for a power of
    two of ranks a scatter and recursive-doubling allgather up to 512 KiB; otherwise a
    scatter and ring allgather."""
    if ranks < MPIR_BCAST_SMALL_COMM or n_bytes <= MPIR_BCAST_SHORT_BYTES:
        return "binomial"
    if ranks & (ranks - 1) == 0 and n_bytes <= MPIR_BCAST_MEDIUM_BYTES:
        return "scatter_recursive_doubling_allgather"
    return "scatter_ring_allgather"




def _pof2(p: int) -> int:
    return 1 << (p.bit_length() - 1)
