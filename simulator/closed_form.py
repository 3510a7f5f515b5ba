"""Closed forms of the collectives (Hockney alpha-beta-gamma), for P ranks and n bytes.

Each equation is the contention-free time of the algorithm that ``collectives``
runs message by message; the tests check that both agree. ``alpha_s`` is the
per-message latency, ``beta_s_per_byte`` the inverse bandwidth and
``gamma_s_per_byte`` the cost of adding one byte in a reduction. For P that is
not a power of two, recursive doubling and Rabenseifner first fold the
``rem = P - pof2`` extra ranks in and send the result back (MPICH)::

    ring                  2(P-1) a + 2(P-1)/P n b + (P-1)/P n g
    recursive doubling    log2(pof2) (a + n b + n g)              [+ 2a + 2nb + ng if rem]
    Rabenseifner          2 log2(pof2) a + 2(pof2-1)/pof2 n b + (pof2-1)/pof2 n g   [+ same]
    gather / scatter      a + (P-1) n b            (root's port carries all P-1 messages)
    binomial broadcast    ceil(log2 P) (a + n b)
"""
from __future__ import annotations

import math

MPICH_SHORT_ALLREDUCE_BYTES = 2048   # MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE


def choose_allreduce(algorithm: str, n_bytes: float, workers: int) -> str:
    """'auto' picks like MPICH: recursive doubling for short messages, Rabenseifner otherwise."""
    if algorithm != "auto":
        return algorithm
    if n_bytes <= MPICH_SHORT_ALLREDUCE_BYTES or workers < 2:
        return "recursive_doubling"
    return "reduce_scatter_allgather"


def _pof2(p: int) -> int:
    return 1 << (p.bit_length() - 1)


def _fold_s(p: int, n: float, a: float, b: float, g: float) -> float:
    """Extra steps for the ranks beyond the largest power of two: fold in, send back."""
    return 2 * a + 2 * n * b + n * g if p != _pof2(p) else 0.0


def ring_allreduce_s(p: int, n: float, a: float, b: float, g: float = 0.0) -> float:
    if p <= 1:
        return 0.0
    return 2 * (p - 1) * a + 2 * (p - 1) / p * n * b + (p - 1) / p * n * g


def recursive_doubling_allreduce_s(p: int, n: float, a: float, b: float, g: float = 0.0) -> float:
    if p <= 1:
        return 0.0
    q = _pof2(p)
    return math.log2(q) * (a + n * b + n * g) + _fold_s(p, n, a, b, g)


def rabenseifner_allreduce_s(p: int, n: float, a: float, b: float, g: float = 0.0) -> float:
    if p <= 1:
        return 0.0
    q = _pof2(p)
    return (2 * math.log2(q) * a + 2 * (q - 1) / q * n * b + (q - 1) / q * n * g
            + _fold_s(p, n, a, b, g))


def gather_s(p: int, n: float, a: float, b: float) -> float:
    return 0.0 if p <= 1 else a + (p - 1) * n * b


scatter_s = gather_s


def binomial_bcast_s(p: int, n: float, a: float, b: float) -> float:
    return 0.0 if p <= 1 else math.ceil(math.log2(p)) * (a + n * b)


ALLREDUCE = {
    "ring": ring_allreduce_s,
    "recursive_doubling": recursive_doubling_allreduce_s,
    "reduce_scatter_allgather": rabenseifner_allreduce_s,
}


def steps(kind: str, p: int, n: float, algorithm: str = "ring") -> float:
    """How many latencies (alphas) one call of the collective pays in a row."""
    return collective_s(kind, p, n, 1.0, 0.0, 0.0, algorithm)


def collective_s(kind: str, p: int, n: float, a: float, b: float, g: float,
                 algorithm: str = "ring") -> float:
    """The closed form of one collective ``kind`` (allreduce, gather, scatter, bcast)."""
    if kind == "allreduce":
        return ALLREDUCE[choose_allreduce(algorithm, n, p)](p, n, a, b, g)
    if kind == "gather":
        return gather_s(p, n, a, b)
    if kind == "scatter":
        return scatter_s(p, n, a, b)
    if kind == "bcast":
        return binomial_bcast_s(p, n, a, b)
    raise ValueError(f"unknown collective {kind!r}")
