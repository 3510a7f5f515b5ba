"""MPICH's collectives message by message, as MPICH 5.0 runs them (``src/mpi/coll/``).

Every function is the generator of ONE rank (the interface of ``comm.collectives``):
``i`` is its index in ``ranks``, ``p2p`` gives ``isend``, ``recv`` and ``reduce``.
Sizes are bytes of the whole buffer ``n``; MPICH splits a buffer in elements (its
blocks differ by at most one element), here in equal shares of ``n``.

Which of them an ``MPI_Allreduce`` runs is ``mpir_allreduce`` (the MPIR level's JSON
selection, ``libraries.mpich``) and ``smp_allreduce`` (ch4's composition for a
communicator that spans hosts with several ranks on some); ``comm.choice`` decides
between them.
Sources: the MPICH 5.0.1 tag of github.com/pmodels/mpich (the wheel is 5.0.2).

Imports: ``libraries.mpich``, ``model.network``.
"""
from __future__ import annotations

from libraries.mpich import RELEASE_GATHER_BCAST_RADIX as KB
from libraries.mpich import RELEASE_GATHER_REDUCE_RADIX as KR
from libraries.mpich import mpir_allreduce_choice, mpir_bcast_choice, mpir_reduce_choice
from simulator.model.network import host_and_roots


def exchange(p2p, me: int, peer: int, n_bytes: float, tag):
    """Send to and receive from ``peer`` at once (``MPIC_Sendrecv``)."""
    p2p.isend(me, peer, n_bytes, tag)
    yield p2p.recv(me, peer, tag)


def _pof2(p: int) -> int:
    return 1 << (p.bit_length() - 1)


def init_peers(rank: int, n_ranks: int) -> frozenset[int]:
    """The ranks whose connection to ``rank`` MPI_Init opens in the network module:
    ``rank +- 2^k`` (mod ``n_ranks``) for every ``2^k < n_ranks``, a dissemination
    exchange's partners. Every other pair opens its connection on its first message
    (libfabric's tcp provider connects on demand: ``xnet_get_conn``). Measured, not read
    from MPICH's source: ``strace`` of ranks that only call ``MPI_Init`` (ofi netmod, tcp
    provider over loopback, ``MPIR_CVAR_NOLOCAL=1``) shows rank 0 connected to exactly
    these 6 / 8 / 8 peers of 8 / 12 / 16 at 9 / 13 / 17 ranks and to every peer at 4, and
    ``benchmarks/first_contact.py`` lists them in every run. Which of MPI_Init's own
    collectives on the world (the ofi netmod's, ``ch4/netmod/ofi/ofi_addr_exchange.c``)
    pairs them is not pinned down: the barrier, allreduce and allgather algorithm CVARs do
    not change them. The runs' own collectives
    before training (the runner's barriers, ``allgather`` and ``bcast``: dissemination,
    Bruck's, recursive doubling or a binomial tree at these sizes) pair rank 0 with no
    other rank: at 13 ranks rank 0's first sends after them open exactly 3, 6, 7 and 10."""
    peers, step = set(), 1
    while step < n_ranks:
        peers.update({(rank + step) % n_ranks, (rank - step) % n_ranks})
        step *= 2
    peers.discard(rank)
    return frozenset(peers)


def unopened_peers(routes, rank: int, others) -> set[int]:
    """The ranks of ``others`` (the world but ``rank``) whose connection to ``rank`` their
    first message opens: on another host and not among the peers MPI_Init connects it to
    (``init_peers``); none without a network between hosts."""
    if routes.link is None:
        return set()
    peers = init_peers(rank, len(others) + 1)
    return {r for r in others
            if routes.placement[r] != routes.placement[rank] and r not in peers}


# ---------------------------------------------------------------- allreduce

def ring_allreduce(p2p, ranks, i, n_bytes, tag):
    """``MPIR_Allreduce_intra_ring`` (``allreduce/allreduce_intra_ring.c``): P-1 steps
    of reduce-scatter (send block ``rank-1-k`` to ``rank+1``, receive block ``rank-2-k``
    from ``rank-1``, ``Waitall``, reduce), then ``MPIR_Allgatherv_intra_ring``'s P-1
    steps: blocks of n/P, any P."""
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
    """The allreduces' step for P not a power of two: the even ranks below 2*rem send
    everything to ``rank+1`` and sit out. Returns the new index, or None for a rank
    that sits out."""
    p = len(ranks)
    rem = p - _pof2(p)
    if i < 2 * rem:
        if i % 2 == 0:
            yield p2p.isend(ranks[i], ranks[i + 1], n_bytes, (tag, "fold"))
            return None
        yield p2p.recv(ranks[i], ranks[i - 1], (tag, "fold"))
        yield p2p.reduce(n_bytes)
        return i // 2
    return i - rem


def _member(new_index: int, p: int) -> int:
    """Group index of the rank that holds ``new_index`` after the allreduces' fold."""
    rem = p - _pof2(p)
    return 2 * new_index + 1 if new_index < rem else new_index + rem


def _fold_out(p2p, ranks, i, n_bytes, tag):
    """The odd ranks below 2*rem send the result back to the even ones that sat out."""
    rem = len(ranks) - _pof2(len(ranks))
    if i < 2 * rem:
        if i % 2 == 0:
            yield p2p.recv(ranks[i], ranks[i + 1], (tag, "unfold"))
        else:
            yield p2p.isend(ranks[i], ranks[i - 1], n_bytes, (tag, "unfold"))


def _power_of_two_core(p2p, ranks, i, n_bytes, tag, core):
    """Fold the ranks beyond the largest power of two q into partners, run ``core`` on q
    ranks (``core(j, q)`` with j this rank's index among them), unfold."""
    if len(ranks) == 1:
        return
    q = _pof2(len(ranks))
    j = yield from _fold_in(p2p, ranks, i, n_bytes, tag)
    if j is not None:
        yield from core(j, q)
    yield from _fold_out(p2p, ranks, i, n_bytes, tag)


def recursive_doubling_allreduce(p2p, ranks, i, n_bytes, tag):
    """``MPIR_Allreduce_intra_recursive_doubling``
    (``allreduce/allreduce_intra_recursive_doubling.c``): the fold, then log2 q rounds
    with mask 1, 2, 4, ...: exchange everything with ``newrank ^ mask`` and reduce."""
    p = len(ranks)

    def core(j, q):
        mask = 1
        while mask < q:
            peer = ranks[_member(j ^ mask, p)]
            yield from exchange(p2p, ranks[i], peer, n_bytes, (tag, mask))
            yield p2p.reduce(n_bytes)
            mask <<= 1
    yield from _power_of_two_core(p2p, ranks, i, n_bytes, tag, core)


def rabenseifner_allreduce(p2p, ranks, i, n_bytes, tag):
    """``MPIR_Allreduce_intra_reduce_scatter_allgather``
    (``allreduce/allreduce_intra_reduce_scatter_allgather.c``, Rabenseifner's): the
    fold, then a reduce-scatter by recursive halving that *begins with the nearest
    partner* (mask 1: exchange n/2, then n/4 with mask 2, ...) and an allgather by
    recursive doubling that *ends with it* (mask q/2 first with n/q, mask 1 last with
    n/2). On hosts of consecutive ranks the largest messages stay inside the host."""
    p = len(ranks)

    def core(j, q):
        size, mask = n_bytes, 1
        while mask < q:                        # halving: exchange half, keep half
            size /= 2
            peer = ranks[_member(j ^ mask, p)]
            yield from exchange(p2p, ranks[i], peer, size, (tag, "rs", mask))
            yield p2p.reduce(size)
            mask <<= 1
        mask = q >> 1
        while mask >= 1:                       # doubling: exchange what each has
            peer = ranks[_member(j ^ mask, p)]
            yield from exchange(p2p, ranks[i], peer, size, (tag, "ag", mask))
            size *= 2
            mask >>= 1
    yield from _power_of_two_core(p2p, ranks, i, n_bytes, tag, core)


def mpir_allreduce(p2p, ranks, i, n_bytes, tag):
    """``MPIR_Allreduce_impl`` with ``MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM=auto``: the
    choice of ``maint/tuning/coll/mpir/generic.json`` (``mpir_allreduce_choice``)."""
    run = {"recursive_doubling": recursive_doubling_allreduce,
           "reduce_scatter_allgather": rabenseifner_allreduce}
    yield from run[mpir_allreduce_choice(n_bytes, len(ranks))](p2p, ranks, i, n_bytes, tag)


def release_gather_allreduce(p2p, ranks, i, n_bytes, tag):
    """``MPIDI_POSIX_mpi_allreduce_release_gather`` (``ch4/shm/posix/
    posix_coll_release_gather.h``): reduce up a k-ary tree (radix 4), each parent
    taking its children's buffers at once and adding them; then the root releases
    the result down a k-ary tree (radix 64). MPICH runs it on one host only when MPI
    was initialised without ``MPI_THREAD_MULTIPLE`` (its selection requires
    ``is_multi_threaded=no``); mpi4py asks for ``MULTIPLE``, so the project's runs
    never take it (``choose_allreduce`` does not)."""
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


def smp_allreduce(p2p, ranks, i, n_bytes, tag):
    """ch4's ``MPIDI_Allreduce_intra_composition_alpha`` (``ch4/src/ch4_coll_impl.h``),
    what ``MPI_Allreduce`` runs on a communicator of several hosts with several ranks
    on some (``maint/tuning/coll/ch4/generic.json``: ``comm_hierarchy=parent``): a
    reduce to local rank 0 of each host (``node_comm``), an allreduce among those
    roots (``node_roots_comm``, ordered by host), a broadcast from local rank 0. Each
    part is the MPIR level's own choice (the shared-memory release/gather ones need
    ``MPI_THREAD_SINGLE``, see ``release_gather_allreduce``)."""
    me = ranks[i]
    local, roots = host_and_roots(p2p.routes.placement, ranks, i)
    li = local.index(me)
    if len(local) > 1:
        yield from mpir_reduce(p2p, tuple(local), li, n_bytes, (tag, "reduce"))
    if li == 0 and len(roots) > 1:
        yield from mpir_allreduce(p2p, tuple(roots), roots.index(me), n_bytes, (tag, "roots"))
    if len(local) > 1:
        yield from mpir_bcast(p2p, tuple(local), li, n_bytes, (tag, "bcast"))


# ---------------------------------------------------------------- reduce (to index 0)

def mpir_reduce(p2p, ranks, i, n_bytes, tag):
    """``MPIR_Reduce_impl`` to index 0 with ``auto``: ``mpir_reduce_choice``."""
    run = {"binomial": binomial_reduce, "reduce_scatter_gather": reduce_scatter_gather}
    yield from run[mpir_reduce_choice(n_bytes, len(ranks))](p2p, ranks, i, n_bytes, tag)


def binomial_reduce(p2p, ranks, i, n_bytes, tag):
    """``MPIR_Reduce_intra_binomial`` (``reduce/reduce_intra_binomial.c``) to index 0,
    commutative: with mask 1, 2, 4, ... a rank receives from ``i | mask`` and adds it
    up while that bit of ``i`` is clear, and sends everything to ``i - mask`` at the
    first bit that is set."""
    p, me, mask = len(ranks), ranks[i], 1
    while mask < p:
        if i & mask:
            yield p2p.isend(me, ranks[i - mask], n_bytes, (tag, mask))
            return
        if i | mask < p:
            yield p2p.recv(me, ranks[i | mask], (tag, mask))
            yield p2p.reduce(n_bytes)
        mask <<= 1


def reduce_scatter_gather(p2p, ranks, i, n_bytes, tag):
    """``MPIR_Reduce_intra_reduce_scatter_gather`` (``reduce/
    reduce_intra_reduce_scatter_gather.c``, Rabenseifner's reduce) to index 0: the odd
    ranks below 2*rem send everything to ``rank-1`` and sit out (the opposite of the
    allreduces' fold); a reduce-scatter by recursive halving from the nearest partner
    (n/2, n/4, ...); then a binomial gather to index 0 from the farthest (mask q/2
    first: each sender passes what it holds, n/(2 mask), and leaves)."""
    p, me = len(ranks), ranks[i]
    if p == 1:
        return
    q = _pof2(p)
    rem = p - q
    real = lambda new: ranks[2 * new if new < rem else new + rem]   # noqa: E731
    if i < 2 * rem:
        if i % 2:
            yield p2p.isend(me, ranks[i - 1], n_bytes, (tag, "fold"))
            return
        yield p2p.recv(me, ranks[i + 1], (tag, "fold"))
        yield p2p.reduce(n_bytes)
        j = i // 2
    else:
        j = i - rem
    size, mask = n_bytes, 1
    while mask < q:
        size /= 2
        yield from exchange(p2p, me, real(j ^ mask), size, (tag, "rs", mask))
        yield p2p.reduce(size)
        mask <<= 1
    mask = q >> 1
    while mask >= 1:                           # the gather: a binomial tree to 0
        peer = real(j ^ mask)
        if j & mask:
            yield p2p.isend(me, peer, size, (tag, "gather", mask))
            return
        yield p2p.recv(me, peer, (tag, "gather", mask))
        size *= 2
        mask >>= 1


# ---------------------------------------------------------------- broadcast (from index 0)

def mpir_bcast(p2p, ranks, i, n_bytes, tag):
    """``MPIR_Bcast_impl`` from index 0 with ``auto``: ``mpir_bcast_choice``."""
    run = {"binomial": binomial_bcast,
           "scatter_recursive_doubling_allgather": scatter_doubling_bcast,
           "scatter_ring_allgather": scatter_ring_bcast}
    yield from run[mpir_bcast_choice(n_bytes, len(ranks))](p2p, ranks, i, n_bytes, tag)


def binomial_bcast(p2p, ranks, i, n_bytes, tag, root: int = 0):
    """``MPIR_Bcast_intra_binomial`` (``bcast/bcast_intra_binomial.c``): receive from
    the parent (``i - mask`` at the lowest set bit), then send to the children
    ``i + mask`` with the mask falling."""
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


def _scattered(n_bytes: float, p: int, first: int, count: int) -> float:
    """Bytes of blocks ``first .. first+count-1`` of ``n`` cut in blocks of ceil(n/P)."""
    block = n_bytes / p
    return max(0.0, min(n_bytes, (first + count) * block) - first * block)


def _scatter_for_bcast(p2p, ranks, i, n_bytes, tag):
    """``MPII_Scatter_for_bcast`` (``bcast/bcast_utils.c``): a binomial scatter from
    index 0, rank ``i`` ending with block i; a parent passes a child the blocks of
    its subtree (``i .. i + lowbit(i) - 1``), the largest subtree first."""
    p, me = len(ranks), ranks[i]
    mask = 1
    while mask < p:
        if i & mask:
            if _scattered(n_bytes, p, i, mask) > 0:
                yield p2p.recv(me, ranks[i - mask], (tag, "scatter"))
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:
        if i + mask < p:
            size = _scattered(n_bytes, p, i + mask, mask)
            if size > 0:
                yield p2p.isend(me, ranks[i + mask], size, (tag, "scatter"))
        mask >>= 1


def scatter_ring_bcast(p2p, ranks, i, n_bytes, tag):
    """``MPIR_Bcast_intra_scatter_ring_allgather`` (``bcast/
    bcast_intra_scatter_ring_allgather.c``): the binomial scatter, then P-1 ring steps,
    each sending block ``j`` to ``i+1`` and taking block ``j-1`` from ``i-1``."""
    p, me = len(ranks), ranks[i]
    yield from _scatter_for_bcast(p2p, ranks, i, n_bytes, tag)
    right, left = ranks[(i + 1) % p], ranks[(i - 1) % p]
    j = i
    for step in range(1, p):
        p2p.isend(me, right, _scattered(n_bytes, p, j, 1), (tag, "ring", step))
        yield p2p.recv(me, left, (tag, "ring", step))
        j = (j - 1) % p


def scatter_doubling_bcast(p2p, ranks, i, n_bytes, tag):
    """``MPIR_Bcast_intra_scatter_recursive_doubling_allgather`` (``bcast/
    bcast_intra_scatter_recursive_doubling_allgather.c``), which MPICH selects for a
    power of two of ranks only: the binomial scatter, then with mask 1, 2, ... an
    exchange of the ``mask`` blocks each holds with ``i ^ mask``."""
    p, me = len(ranks), ranks[i]
    yield from _scatter_for_bcast(p2p, ranks, i, n_bytes, tag)
    mask = 1
    while mask < p:
        mine = (i // mask) * mask
        yield from exchange(p2p, me, ranks[i ^ mask], _scattered(n_bytes, p, mine, mask),
                            (tag, "doubling", mask))
        mask <<= 1
