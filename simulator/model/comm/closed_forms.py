"""Closed forms of the collectives (Hockney alpha-beta-gamma), for P ranks and n bytes.

Each equation is the contention-free time of the algorithm that ``model.comm.collectives``
runs message by message; the tests check that both agree. ``alpha_s`` is the
per-message latency, ``beta_s_per_byte`` the inverse bandwidth and
``gamma_s_per_byte`` the cost of adding one byte in a reduction. For P that is
not a power of two, recursive doubling and Rabenseifner first fold the
``rem = P - pof2`` extra ranks in and send the result back (MPICH)::

    ring                  2(P-1) a + 2(P-1)/P n b + (P-1)/P n g
    gloo's ring           2 ceil(m/2) a + 2 m (s + F) b + m s g  [m = (P-1) S/P segments of s, F framing]
    recursive doubling    log2(pof2) (a + n b + n g)              [+ 2a + 2nb + ng if rem]
    Rabenseifner          2 log2(pof2) a + 2(pof2-1)/pof2 n b + (pof2-1)/pof2 n g   [+ same]
    release/gather        d_r (a + c n (b + g)) + d_b (a + c_b n b)     [MPICH's shared memory]
    gather / scatter      a + (P-1) n b            (root's port carries all P-1 messages)
    binomial broadcast    ceil(log2 P) (a + n b)
    binomial reduce       ceil(log2 P) (a + n b + n g)
    reduce-scatter/gather 2 log2(pof2) a + 2(pof2-1)/pof2 n b + (pof2-1)/pof2 n g  [+ a + nb + ng]
    scatter + allgather   ceil(log2 P) a + (P-1)/P n b + (P-1)(a + n/P b)   [ring; an upper bound]
    smp (MPICH, L a host) reduce(L) + allreduce(P/L, across) + broadcast(L)
    hand-off wait         (m-1)^2 q / (2m), averaged over the cores' m   [``handoff_s``]

Release/gather is MPICH's shared-memory allreduce (ch4's POSIX collectives): the
ranks reduce up a k-ary tree of radix 4 into shared memory (``d_r`` levels, a
parent reducing ``c = min(4, P-1)`` children) and the root releases the result
down a k-ary tree of radix 64 (``d_b`` levels, ``c_b = min(64, P-1)`` readers).
MPICH runs it only where MPI is single-threaded (``libraries.mpich.choose_allreduce``). The form
is exact for one-level trees (P <= 5) and an upper bound beyond (a level's
parents do not all wait for full subtrees). ``smp`` is MPICH's composition over
several hosts; which reduce, allreduce and broadcast it runs are MPICH's
MPIR-level choices (``libraries.mpich``: which algorithm MPICH runs is MPICH's decision,
shared with ``real.records.wire``; what it costs is the model's).

Imports: the standard library, ``libraries`` (gloo, mpich).
"""
from __future__ import annotations

import functools
import math

from libraries.gloo import gloo_ring_segments
from libraries.mpich import (
    RELEASE_GATHER_BCAST_RADIX,
    RELEASE_GATHER_REDUCE_RADIX,
    choose_allreduce,
    mpir_allreduce_choice,
    mpir_bcast_choice,
    mpir_reduce_choice,
)


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


def binomial_reduce_s(p: int, n: float, a: float, b: float, g: float = 0.0) -> float:
    """MPICH's binomial reduce to one root: ceil(log2 P) levels of a whole buffer each."""
    return 0.0 if p <= 1 else math.ceil(math.log2(p)) * (a + n * b + n * g)


def reduce_scatter_gather_s(p: int, n: float, a: float, b: float, g: float = 0.0) -> float:
    """Rabenseifner's reduce: the fold (odd ranks into even ones, no way back), a
    recursive-halving reduce-scatter and a binomial gather of what each holds."""
    if p <= 1:
        return 0.0
    q = _pof2(p)
    fold = a + n * b + n * g if p != q else 0.0
    return fold + 2 * math.log2(q) * a + 2 * (q - 1) / q * n * b + (q - 1) / q * n * g


def scatter_ring_bcast_s(p: int, n: float, a: float, b: float) -> float:
    """MPICH's broadcast by a binomial scatter of n/P blocks and a ring allgather (an
    upper bound: the ring's first steps start while the scatter still runs)."""
    if p <= 1:
        return 0.0
    return (math.ceil(math.log2(p)) * a + (p - 1) / p * n * b
            + (p - 1) * (a + n / p * b))


def scatter_doubling_bcast_s(p: int, n: float, a: float, b: float) -> float:
    """MPICH's broadcast by a binomial scatter and a recursive-doubling allgather (a power
    of two of ranks)."""
    if p <= 1:
        return 0.0
    return 2 * (math.log2(p) * a + (p - 1) / p * n * b)


MPIR_REDUCE = {"binomial": binomial_reduce_s, "reduce_scatter_gather": reduce_scatter_gather_s}


def mpir_bcast_s(p: int, n: float, a: float, b: float) -> float:
    return {"binomial": binomial_bcast_s, "scatter_ring_allgather": scatter_ring_bcast_s,
            "scatter_recursive_doubling_allgather": scatter_doubling_bcast_s}[
        mpir_bcast_choice(n, p)](p, n, a, b)


def smp_allreduce_s(p: int, n: float, local: int, a_intra: float, b_intra: float,
                    a_inter: float, b_inter: float, g: float = 0.0) -> float:
    """MPICH's composition alpha (``smp``) on ``p / local`` hosts of ``local`` ranks: the
    MPIR reduce inside a host, the MPIR allreduce among the hosts' first ranks, the MPIR
    broadcast inside a host, one after the other (contention free: each host's ranks on
    their own shared-memory endpoints, one first rank per NIC)."""
    if p <= 1:
        return 0.0
    local = max(1, min(local, p))
    hosts = -(-p // local)
    reduce_s = MPIR_REDUCE[mpir_reduce_choice(n, local)](local, n, a_intra, b_intra, g)
    across_s = ALLREDUCE[mpir_allreduce_choice(n, hosts)](hosts, n, a_inter, b_inter, g)
    return reduce_s + across_s + mpir_bcast_s(local, n, a_intra, b_intra)


def gloo_ring_allreduce_s(p: int, n: float, a: float, b: float, g: float = 0.0,
                          framing: float = 0.0) -> float:
    """gloo's ring, two segments in flight: each phase sends m = (P-1) S/P segments of s
    bytes, each with ``framing`` bytes (``GLOO_RING_FRAMING_BYTES`` between hosts; 0 on a
    transport fitted to gloo's own messages), a pair at a time (the pair shares the hop):
    ``ceil(m/2) (a) + m (s + F) b`` a phase, and the reduce-scatter adds ``m s g``. Exact
    without reductions (g = 0) where n is S segments of whole elements (no short or empty
    segment: ``gloo_ring_lengths``); with reductions an upper bound (gloo reduces one
    segment while the next is in flight). With two segments a rank and no framing, the
    ring's ``2(P-1) a + 2(P-1)/P n b + (P-1)/P n g``."""
    if p <= 1:
        return 0.0
    per_rank, seg = gloo_ring_segments(p, n)
    m = (p - 1) * per_rank
    return 2 * (math.ceil(m / 2) * a + m * (seg + framing) * b) + m * seg * g


NCCL_CHAIN_CHUNK_BYTES = 512 * 1024   # NCCL 2.4: buffSize 4 MiB / NCCL_STEPS 8, 1 step a chunk
CHAIN_MAX_CHUNKS = 64                  # pipeline depth cap (keeps the schedule small)


def chain_chunks(n_bytes: float) -> int:
    """Chunks NCCL's reduce or broadcast moves a buffer in (``comm.nccl``)."""
    return max(1, min(CHAIN_MAX_CHUNKS, math.ceil(n_bytes / NCCL_CHAIN_CHUNK_BYTES)))


def chain_s(p: int, n: float, a: float, b: float) -> float:
    """NCCL's reduce or broadcast along a chain of p ranks, k chunks pipelined, a rank
    passing a chunk on once its previous one is through: ``(k + p - 2)(a + n/k b)``."""
    if p <= 1:
        return 0.0
    k = chain_chunks(n)
    return (k + p - 2) * (a + n / k * b)


def reduce_broadcast_s(p: int, n: float, local: int, a_intra: float, b_intra: float,
                       a_inter: float, b_inter: float, stage_s: float) -> float:
    """Horovod's hierarchical allreduce of 0.13.6-0.14 (``comm.nccl``): a chain reduce
    inside each host of ``local`` ranks, a copy to the host, MPICH's allreduce among
    the hosts' first ranks, a copy back, a chain broadcast (contention free)."""
    if p <= 1:
        return 0.0
    hosts = -(-p // max(1, local))
    across = 0.0
    if hosts > 1:
        across = 2 * stage_s + ALLREDUCE[mpir_allreduce_choice(n, hosts)](hosts, n, a_inter,
                                                                          b_inter)
    return 2 * chain_s(local, n, a_intra, b_intra) + across


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
    "gloo_ring": gloo_ring_allreduce_s,
    "gloo_ring_host": gloo_ring_allreduce_s,     # (its copies to and from the host apart)
    "tree": lambda p, n, a, b, g=0.0: tree_allreduce_s(p, n, a, b, g),
}


def steps(kind: str, p: int, n: float, algorithm: str = "ring", local: int = 1) -> float:
    """How many latencies (alphas) one call of the collective pays in a row (``smp``:
    with ``local`` ranks on a host)."""
    if kind == "allreduce" and algorithm == "smp":
        return smp_allreduce_s(p, n, local, 1.0, 0.0, 1.0, 0.0)
    if kind == "allreduce" and algorithm in ("reduce_broadcast_mpi", "reduce_broadcast_gloo"):
        hosts = -(-p // max(1, local))       # the library's steps: its allreduce among hosts
        across = (gloo_ring_allreduce_s if algorithm.endswith("gloo")
                  else ALLREDUCE[mpir_allreduce_choice(n, hosts)])
        return across(hosts, n, 1.0, 0.0)
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


# ---------------------------------------------------------------- NCCL-style algorithms
#
#   nccl ring             as ring above (channels split a message, they share its links)
#   hierarchical          2(L-1)(a_i + n/L b_i) + 2(H-1)(a_n + n/(L H) b_n)
#                         + (L-1)/L n g + (H-1)/H n/L g
#                         (L ranks per host, H hosts: reduce-scatter inside each host,
#                         allreduce of each 1/L across hosts, allgather inside each host)
#   double binary tree    sum over rounds r of (a + m_r c b)  (see tree_rounds; NCCL adds
#                         up in its copy kernel: no g)
#
# Bus bandwidth as nccl-tests defines it: algbw = n / t, busbw = algbw * 2(P-1)/P for an
# allreduce (what each rank's link carries per second, comparable across P).

TREE_CHUNK_BYTES = 256 * 1024     # NCCL tuning.cc: Tree/Simple latency is that of a 256 kB chunk
TREE_MAX_CHUNKS = 32              # pipeline depth cap (keeps the schedule small)


def bus_bandwidth(n_bytes: float, time_s: float, p: int) -> float:
    """nccl-tests' bus bandwidth of an allreduce of ``n_bytes`` that took ``time_s``."""
    return 0.0 if p <= 1 or time_s <= 0 else n_bytes / time_s * 2 * (p - 1) / p


def hierarchical_allreduce_s(p: int, n: float, local: int, a_intra: float, b_intra: float,
                             a_inter: float, b_inter: float, g: float = 0.0) -> float:
    """Contention free: each host's L ranks and each cross-host ring on its own links."""
    if p <= 1:
        return 0.0
    hosts = p // local
    intra = 2 * (local - 1) * (a_intra + n / local * b_intra) + (local - 1) / local * n * g
    inter = 2 * (hosts - 1) * (a_inter + n / p * b_inter) + (hosts - 1) / hosts * n / local * g
    return intra + (inter if hosts > 1 else 0.0)


def tree_chunks(n_bytes: float) -> int:
    """Chunks each half of the data is pipelined in (NCCL's 256 kB, at most TREE_MAX_CHUNKS)."""
    return max(1, min(TREE_MAX_CHUNKS, math.ceil(n_bytes / 2 / TREE_CHUNK_BYTES)))


def nccl_btree(n: int, r: int) -> tuple[int, int]:
    """``ncclGetBtree`` (NCCL ``src/graph/trees.cc``): (parent, child type) of ``r`` among
    ``n``: rank 0 is the root, with one child, the largest power of two below n; the
    others form an in-order binary tree by their lowest set bit. Child type 0 for the
    smaller child of the parent, 1 for the larger (-1, 0 at the root)."""
    bit = 1
    while bit < n and not bit & r:
        bit <<= 1
    if r == 0:
        return -1, 0
    up = (r ^ bit) | (bit << 1)
    if up >= n:
        up = r ^ bit
    return up, 0 if r < up else 1


def nccl_dtree(n: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """``ncclGetDtree`` (``trees.cc``): the btree, and a second one mirrored (n even) or
    shifted by one (n odd); (parent, child type) of every rank in each."""
    first = [nccl_btree(n, r) for r in range(n)]
    if n % 2:
        move, back = (lambda r: (r + 1) % n), (lambda r: (r - 1) % n)   # noqa: E731
    else:
        move = back = lambda r: n - 1 - r                                  # noqa: E731
    second = []
    for r in range(n):
        up, kind = nccl_btree(n, back(r))
        second.append((-1 if up < 0 else move(up), kind))
    return first, second


def singletons(p: int) -> tuple[tuple[int, ...], ...]:
    """p ranks, each on a host of its own."""
    return tuple((r,) for r in range(p))


def double_tree(groups) -> tuple[list[int], list[int]]:
    """NCCL's two trees over the ranks (parents by index) of ``groups``, the ranks of
    each host in order, hosts in the order of their first rank (``comm->node``). Inside
    a host the ranks form a chain (``ncclTopoPreset`` in ``src/graph/connect.cc``:
    ``tree.up = treeIntra[i-1]``); between hosts ``nccl_dtree`` over the hosts, whose
    head rank (``treeIntra[0]``) attaches to its parent host's ``treeToChild0``
    (``treeIntra[1]``, NCCL's default ``NCCL_TOPO_PATTERN_BALANCED_TREE``) as child 0 or
    its ``treeToChild1`` (``treeIntra[0]``) as child 1 (``connectTrees``). With one rank a
    host these are NCCL's double binary trees: a rank is inside one and a leaf of the
    other (but for one rank when p is odd), and each link carries about n a phase."""
    groups = tuple(tuple(g) for g in groups)
    p = sum(len(g) for g in groups)
    trees = []
    for inter in nccl_dtree(len(groups)):
        parents = [-1] * p
        for node, g in enumerate(groups):
            for i in range(1, len(g)):
                parents[g[i]] = g[i - 1]
            up, kind = inter[node]
            if up >= 0:
                parent = groups[up]
                parents[g[0]] = parent[min(1, len(parent) - 1)] if kind == 0 else parent[0]
        trees.append(parents)
    return trees[0], trees[1]


def _heights(parents: list[int]) -> list[int]:
    height = [0] * len(parents)
    for r in range(len(parents)):
        h, x = 0, r
        while parents[x] >= 0:
            h += 1
            x = parents[x]
            height[x] = max(height[x], h)
    return height


def _depths(parents: list[int]) -> list[int]:
    out = []
    for r in range(len(parents)):
        d, x = 0, r
        while parents[x] >= 0:
            d, x = d + 1, parents[x]
        out.append(d)
    return out


@functools.lru_cache(maxsize=64)
def tree_rounds(groups, k: int) -> list[tuple[str, tuple[tuple[int, int], ...]]]:
    """The double binary tree's schedule over ``groups`` (``double_tree``; an int p:
    one rank a host): ("up" | "down", (src, dst) index pairs) per round, both trees
    together, each half of the data in ``k`` chunks. Up: a rank of height h sends chunk
    j to its parent in round j + h (its children's chunk j came in earlier rounds).
    Down: a rank at depth d sends chunk j to its children in round j + d. Every message
    is one chunk of n / (2k) bytes."""
    if isinstance(groups, int):
        groups = singletons(groups)
    trees = double_tree(groups)
    p = len(trees[0])
    rounds = []
    up = [(_heights(t), t) for t in trees]
    last_up = max(h[r] for h, t in up for r in range(p) if t[r] >= 0) + k - 1
    for rnd in range(last_up + 1):
        rounds.append(("up", tuple((r, t[r]) for h, t in up for r in range(p)
                                   if t[r] >= 0 and 0 <= rnd - h[r] < k)))
    down = [(_depths(t), t) for t in trees]
    senders = [(d[t[r]], t[r], r) for d, t in down for r in range(p) if t[r] >= 0]
    last_down = max(d for d, _, _ in senders) + k - 1
    for rnd in range(last_down + 1):
        rounds.append(("down", tuple((par, r) for d, par, r in senders if 0 <= rnd - d < k)))
    return [(kind, pairs) for kind, pairs in rounds if pairs]


def tree_allreduce_s(p: int, n: float, a: float, b: float, g: float = 0.0) -> float:
    """Contention free (every rank on its own host, full-duplex NICs: NCCL's trees over
    hosts, ``double_tree``): each round takes one latency and the chunks of its busiest
    NIC direction. NCCL adds up in its copy
    kernel, at device memory speed: ``g`` is not charged. Exact for P a power of two;
    otherwise subtrees of different heights let ranks run ahead of a round, and this is
    an upper bound (within 10% in the tests)."""
    if p <= 1:
        return 0.0
    k = tree_chunks(n)
    c = n / 2 / k
    total = 0.0
    for _kind, pairs in tree_rounds(p, k):
        outs, ins = _count([s for s, _ in pairs]), _count([d for _, d in pairs])
        total += a + max(max(outs.values()), max(ins.values())) * c * b
    return total


def _count(items) -> dict:
    out: dict = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out


def handoff_s(runnable: int, cores: int, quantum_s: float) -> float:
    """Mean wait of a message for its receiver's turn on a core (seconds), when the
    ``runnable`` busy processes share ``cores`` round-robin in whole quanta
    (``model.hardware.timeslice``)."""
    if quantum_s <= 0 or runnable <= cores or cores < 1:
        return 0.0
    low, extra = divmod(runnable, cores)          # `extra` cores hold low + 1 processes
    total = 0.0
    for m, n_cores in ((low + 1, extra), (low, cores - extra)):
        if m > 1:
            total += n_cores * m * (m - 1) ** 2 * quantum_s / (2 * m)
    return total / runnable
