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
    release/gather        d_r (a + c n (b + g)) + d_b (a + c_b n b)     [MPICH's shared memory]
    gather / scatter      a + (P-1) n b            (root's port carries all P-1 messages)
    binomial broadcast    ceil(log2 P) (a + n b)

Release/gather is what MPICH's ``auto`` runs when every rank is on one host
(ch4's POSIX collectives): the ranks reduce up a k-ary tree of radix 4 into
shared memory (``d_r`` levels, a parent reducing ``c = min(4, P-1)`` children)
and the root releases the result down a k-ary tree of radix 64 (``d_b``
levels, ``c_b = min(64, P-1)`` readers). Its latency is a few *levels*, not
the log2 P or 2(P-1) message steps of the point-to-point algorithms, which
matters where each step waits for a rank's turn on a core. The form is exact
for one-level trees (P <= 5) and an upper bound beyond (a level's parents do
not all wait for full subtrees).
"""
from __future__ import annotations

import math

MPICH_SHORT_ALLREDUCE_BYTES = 2048   # MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE


RELEASE_GATHER_REDUCE_RADIX = 4     # MPIR_CVAR_REDUCE_INTRANODE_TREE_KVAL (k-ary tree)
RELEASE_GATHER_BCAST_RADIX = 64     # MPIR_CVAR_BCAST_INTRANODE_TREE_KVAL


def choose_allreduce(algorithm: str, n_bytes: float, workers: int, one_host: bool = False) -> str:
    """'auto' picks like MPICH: release/gather in shared memory when all ranks share a
    host (ch4's POSIX collective selection); across hosts, recursive doubling for short
    messages and Rabenseifner otherwise."""
    if algorithm != "auto":
        return algorithm
    if one_host and workers >= 2:
        return "release_gather"
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


def kary_depth(p: int, k: int) -> int:
    """Levels below the root of a k-ary tree of p ranks (rank i's parent is (i-1)//k)."""
    depth, last = 0, 0                  # ``last``: the highest rank within ``depth`` levels
    while last < p - 1:
        last = last * k + k
        depth += 1
    return depth


def release_gather_allreduce_s(p: int, n: float, a: float, b: float, g: float = 0.0) -> float:
    if p <= 1:
        return 0.0
    c, c_b = min(RELEASE_GATHER_REDUCE_RADIX, p - 1), min(RELEASE_GATHER_BCAST_RADIX, p - 1)
    return (kary_depth(p, RELEASE_GATHER_REDUCE_RADIX) * (a + c * n * (b + g))
            + kary_depth(p, RELEASE_GATHER_BCAST_RADIX) * (a + c_b * n * b))


def gather_s(p: int, n: float, a: float, b: float) -> float:
    return 0.0 if p <= 1 else a + (p - 1) * n * b


scatter_s = gather_s


def binomial_bcast_s(p: int, n: float, a: float, b: float) -> float:
    return 0.0 if p <= 1 else math.ceil(math.log2(p)) * (a + n * b)


ALLREDUCE = {
    "ring": ring_allreduce_s,
    "recursive_doubling": recursive_doubling_allreduce_s,
    "reduce_scatter_allgather": rabenseifner_allreduce_s,
    "release_gather": release_gather_allreduce_s,
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
