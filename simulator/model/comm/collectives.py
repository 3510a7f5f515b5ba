"""Collectives message by message: what each rank sends, receives and adds up.

Every function is the generator of ONE rank: ``i`` is its index in ``ranks``,
``p2p`` gives ``isend(src, dst, n_bytes, tag)`` (event: delivered),
``recv(dst, src, tag)`` (event: arrived) and ``reduce(n_bytes)`` (event: the
gamma cost of adding ``n_bytes``). ``tag`` is unique per call; steps extend it.
Their contention-free times are the equations in ``contracts.closed_forms``.

Imports: simulator.contracts.closed_forms.
"""
from __future__ import annotations

from simulator.contracts.closed_forms import RELEASE_GATHER_BCAST_RADIX as KB
from simulator.contracts.closed_forms import RELEASE_GATHER_REDUCE_RADIX as KR
from simulator.contracts.closed_forms import tree_chunks, tree_rounds


def _exchange(p2p, me: int, peer: int, n_bytes: float, tag):
    """Send to and receive from ``peer`` at once (MPI_Sendrecv)."""
    p2p.isend(me, peer, n_bytes, tag)
    yield p2p.recv(me, peer, tag)


def ring_allreduce(p2p, ranks, i, n_bytes, tag):
    """Reduce-scatter then allgather around the ring, in chunks of n/P."""
    p = len(ranks)
    if p == 1:
        return
    chunk = n_bytes / p
    right, left, me = ranks[(i + 1) % p], ranks[(i - 1) % p], ranks[i]
    for step in range(2 * (p - 1)):
        p2p.isend(me, right, chunk, (tag, step))
        yield p2p.recv(me, left, (tag, step))
        if step < p - 1:
            yield p2p.reduce(chunk)


def _fold_in(p2p, ranks, i, n_bytes, tag):
    """MPICH's step for P not a power of two: even ranks below 2*rem hand their data
    to the next rank and sit out. Returns the new index, or None for a rank that sits out."""
    p = len(ranks)
    q = 1 << (p.bit_length() - 1)
    rem = p - q
    if i < 2 * rem:
        if i % 2 == 0:
            yield p2p.isend(ranks[i], ranks[i + 1], n_bytes, (tag, "fold"))
            return None
        yield p2p.recv(ranks[i], ranks[i - 1], (tag, "fold"))
        yield p2p.reduce(n_bytes)
        return i // 2
    return i - rem


def _member(new_index: int, p: int) -> int:
    """Group index of the rank that holds ``new_index`` after folding."""
    q = 1 << (p.bit_length() - 1)
    rem = p - q
    return 2 * new_index + 1 if new_index < rem else new_index + rem


def _fold_out(p2p, ranks, i, n_bytes, tag):
    """Send the result back to the ranks that sat out."""
    p = len(ranks)
    rem = p - (1 << (p.bit_length() - 1))
    if i < 2 * rem:
        if i % 2 == 0:
            yield p2p.recv(ranks[i], ranks[i + 1], (tag, "unfold"))
        else:
            yield p2p.isend(ranks[i], ranks[i - 1], n_bytes, (tag, "unfold"))


def _power_of_two_core(p2p, ranks, i, n_bytes, tag, core):
    """Fold the ranks beyond the largest power of two q into partners, run ``core`` on q
    ranks (``core(j, q)`` with j this rank's index among them), unfold."""
    p = len(ranks)
    if p == 1:
        return
    q = 1 << (p.bit_length() - 1)
    j = yield from _fold_in(p2p, ranks, i, n_bytes, tag)
    if j is not None:
        yield from core(j, q)
    yield from _fold_out(p2p, ranks, i, n_bytes, tag)


def recursive_doubling_allreduce(p2p, ranks, i, n_bytes, tag):
    """log2(P) rounds; in round k exchange everything with the partner at distance 2^k."""
    p = len(ranks)

    def core(j, q):
        mask = 1
        while mask < q:
            peer = ranks[_member(j ^ mask, p)]
            yield from _exchange(p2p, ranks[i], peer, n_bytes, (tag, mask))
            yield p2p.reduce(n_bytes)
            mask <<= 1
    yield from _power_of_two_core(p2p, ranks, i, n_bytes, tag, core)


def rabenseifner_allreduce(p2p, ranks, i, n_bytes, tag):
    """Reduce-scatter by recursive halving, then allgather by recursive doubling."""
    p = len(ranks)

    def core(j, q):
        size, mask = n_bytes, q >> 1
        while mask >= 1:                       # halving: exchange half, keep half
            size /= 2
            peer = ranks[_member(j ^ mask, p)]
            yield from _exchange(p2p, ranks[i], peer, size, (tag, "rs", mask))
            yield p2p.reduce(size)
            mask >>= 1
        mask = 1
        while mask < q:                        # doubling: exchange what each has
            peer = ranks[_member(j ^ mask, p)]
            yield from _exchange(p2p, ranks[i], peer, size, (tag, "ag", mask))
            size *= 2
            mask <<= 1
    yield from _power_of_two_core(p2p, ranks, i, n_bytes, tag, core)


def release_gather_allreduce(p2p, ranks, i, n_bytes, tag):
    """MPICH's shared-memory allreduce: reduce up a k-ary tree (radix 4), each parent
    taking its children's buffers at once and adding them; then the root releases the
    result down a k-ary tree (radix 64)."""
    p, me = len(ranks), ranks[i]
    children = [ranks[c] for c in range(KR * i + 1, min(KR * i + KR, p - 1) + 1)]
    for ev in [p2p.recv(me, child, (tag, "up")) for child in children]:
        yield ev
    if children:
        yield p2p.reduce(len(children) * n_bytes)
    if i != 0:
        p2p.isend(me, ranks[(i - 1) // KR], n_bytes, (tag, "up"))
        yield p2p.recv(me, ranks[(i - 1) // KB], (tag, "down"))
    sends = [p2p.isend(me, ranks[c], n_bytes, (tag, "down"))
             for c in range(KB * i + 1, min(KB * i + KB, p - 1) + 1)]
    for ev in sends:
        yield ev


def gather(p2p, ranks, i, n_bytes, tag, root: int = 0):
    """Every rank sends ``n_bytes`` to the root at once (an incast on the root's port)."""
    me = ranks[i]
    if i != root:
        yield p2p.isend(me, ranks[root], n_bytes, tag)
        return
    posted = [p2p.recv(me, src, tag) for k, src in enumerate(ranks) if k != root]
    for ev in posted:
        yield ev


def scatter(p2p, ranks, i, n_bytes, tag, root: int = 0):
    """The root sends ``n_bytes`` to every rank at once (they share the root's port)."""
    me = ranks[i]
    if i != root:
        yield p2p.recv(me, ranks[root], tag)
        return
    sends = [p2p.isend(me, dst, n_bytes, tag) for k, dst in enumerate(ranks) if k != root]
    for ev in sends:
        yield ev


def binomial_bcast(p2p, ranks, i, n_bytes, tag, root: int = 0):
    """Binomial tree from the root: receive from the parent, then send to children in turn."""
    p = len(ranks)
    vr = (i - root) % p
    mask = 1
    while mask < p:
        if vr & mask:
            yield p2p.recv(ranks[i], ranks[(i - mask) % p], tag)
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:
        if vr + mask < p:
            yield p2p.isend(ranks[i], ranks[(i + mask) % p], n_bytes, tag)
        mask >>= 1


def _ring_phase(p2p, group, i, chunk, steps, tag, reduce: bool):
    """``steps`` steps of a ring among ``group``: send ``chunk`` right, take one from the
    left (and add it up when ``reduce``): a reduce-scatter or an allgather."""
    p = len(group)
    right, left, me = group[(i + 1) % p], group[(i - 1) % p], group[i]
    for step in range(steps):
        p2p.isend(me, right, chunk, (tag, step))
        yield p2p.recv(me, left, (tag, step))
        if reduce:
            yield p2p.reduce(chunk)


def host_groups(placement, ranks) -> tuple[list[list[int]], bool]:
    """Ranks by host, in rank order, and whether every host holds as many."""
    by_host: dict[int, list[int]] = {}
    for r in ranks:
        by_host.setdefault(placement[r], []).append(r)
    groups = list(by_host.values())
    return groups, len({len(g) for g in groups}) == 1


def hierarchical_allreduce(p2p, ranks, i, n_bytes, tag):
    """Reduce-scatter inside each host (ring of its L ranks), allreduce of each rank's
    1/L across the hosts (ring of the ranks with the same place on their hosts), then
    allgather inside each host. Hosts must hold as many ranks each."""
    groups, even = host_groups(p2p.routes.placement, ranks)
    if not even:
        raise ValueError("hierarchical allreduce needs as many ranks on every host")
    me = ranks[i]
    local = next(g for g in groups if me in g)
    li, size = local.index(me), len(local)
    across = [g[li] for g in groups]
    yield from _ring_phase(p2p, local, li, n_bytes / size, size - 1, (tag, "rs"), True)
    yield from ring_allreduce(p2p, tuple(across), across.index(me), n_bytes / size, (tag, "ar"))
    yield from _ring_phase(p2p, local, li, n_bytes / size, size - 1, (tag, "ag"), False)


def tree_allreduce(p2p, ranks, i, n_bytes, tag):
    """NCCL's double binary tree, each half of the data in pipelined chunks, round by
    round as ``closed_forms.tree_rounds`` schedules it: in a round a rank sends its chunks
    and takes the ones sent to it at once. NCCL adds up as it copies (in the copy
    kernel, at device memory speed): no separate reduction is charged."""
    p = len(ranks)
    k = tree_chunks(n_bytes)
    chunk = n_bytes / 2 / k
    me = ranks[i]
    for rnd, (kind, pairs) in enumerate(tree_rounds(p, k)):
        sends = [p2p.isend(me, ranks[d], chunk, (tag, rnd, m))
                 for m, (s, d) in enumerate(pairs) if s == i]
        recvs = [p2p.recv(me, ranks[s], (tag, rnd, m)) for m, (s, d) in enumerate(pairs) if d == i]
        for ev in sends + recvs:
            yield ev


ALLREDUCE = {
    "ring": ring_allreduce,
    "recursive_doubling": recursive_doubling_allreduce,
    "reduce_scatter_allgather": rabenseifner_allreduce,
    "release_gather": release_gather_allreduce,
    "hierarchical": hierarchical_allreduce,
    "tree": tree_allreduce,
}
