"""Collectives message by message: what each rank sends, receives and adds up.

Every function is the generator of ONE rank: ``i`` is its index in ``ranks``,
``p2p`` gives ``isend(src, dst, n_bytes, tag)`` (event: delivered),
``recv(dst, src, tag)`` (event: arrived) and ``reduce(n_bytes)`` (event: the
gamma cost of adding ``n_bytes``). ``tag`` is unique per call; steps extend it.
Their contention-free times are the equations in ``simulator.model.comm.closed_forms``.

Each collective sends what its library sends, in the library's order; its
docstring names the library's file and function. MPICH's are in ``mpich``, gloo's
allreduce, gather and scatter in ``gloo``; this module holds a gather and a scatter by
rendezvous (the parameter server's), NCCL-style ones and ``ALLREDUCE``, every allreduce
by the name ``comm.choice`` resolves to.

Imports: simulator.model.comm.closed_forms, model.comm (gloo, mpich, nccl), model.network.
"""
from __future__ import annotations

from simulator.model.comm.closed_forms import tree_chunks, tree_rounds
from simulator.model.comm import gloo, mpich, nccl
from simulator.model.comm.mpich import binomial_bcast  # noqa: F401  (the broadcast of Comm.bcast)
from simulator.model.network import host_groups, host_index_groups


def gather(p2p, ranks, i, n_bytes, tag, root: int = 0):
    """A gather by rendezvous (``ps_sync``'s through MPI; gloo's is ``gloo.gather``): the
    root posts a receive from every rank at once, every other rank sends ``n_bytes`` to
    it and waits until it is sent (an incast on the root's port)."""
    me = ranks[i]
    if i != root:
        yield p2p.isend(me, ranks[root], n_bytes, tag)
        return
    posted = [p2p.recv(me, src, tag) for k, src in enumerate(ranks) if k != root]
    for ev in posted:
        yield ev


def scatter(p2p, ranks, i, n_bytes, tag, root: int = 0):
    """A scatter by rendezvous (gloo's is ``gloo.scatter``): the root posts a send of
    ``n_bytes`` to every rank at once and waits for all (they share the root's port)."""
    me = ranks[i]
    if i != root:
        yield p2p.recv(me, ranks[root], tag)
        return
    sends = [p2p.isend(me, dst, n_bytes, tag) for k, dst in enumerate(ranks) if k != root]
    for ev in sends:
        yield ev


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


def hierarchical_allreduce(p2p, ranks, i, n_bytes, tag):
    """Horovod 0.15+'s ``HOROVOD_HIERARCHICAL_ALLREDUCE`` (``horovod/common/ops/
    nccl_operations.cc``, ``NCCLHierarchicalAllreduce::Execute``): ``ncclReduceScatter``
    inside each host (a ring of its L ranks, n/L blocks), an allreduce of each rank's
    1/L with the ranks of the same place on the other hosts (``cross_comm``), then
    ``ncclAllGather`` inside each host. Hosts must hold as many ranks each (Horovod's
    homogeneous case; it pads the fused buffer to a multiple of L). Horovod runs the
    middle step as ``MPI_Allreduce`` on host memory between two copies; here it is a
    ring on the devices' links (``benchmarks.dle.multinode`` takes it for NCCL's
    channels, one ring a NIC), the copies and MPI's choice not modelled."""
    groups, even = host_groups(p2p.routes.placement, ranks)
    if not even:
        raise ValueError("hierarchical allreduce needs as many ranks on every host")
    me = ranks[i]
    local = next(g for g in groups if me in g)
    li, size = local.index(me), len(local)
    across = [g[li] for g in groups]
    yield from _ring_phase(p2p, local, li, n_bytes / size, size - 1, (tag, "rs"), True)
    yield from mpich.ring_allreduce(p2p, tuple(across), across.index(me), n_bytes / size,
                                    (tag, "ar"))
    yield from _ring_phase(p2p, local, li, n_bytes / size, size - 1, (tag, "ag"), False)


def tree_allreduce(p2p, ranks, i, n_bytes, tag):
    """NCCL's double binary tree (``closed_forms.double_tree``: a chain inside each host,
    NCCL's two trees between hosts), each half of the data in pipelined chunks, round by
    round as ``closed_forms.tree_rounds`` schedules it: in a round a rank sends its chunks
    and takes the ones sent to it at once. NCCL adds up as it copies (in the copy
    kernel, at device memory speed): no separate reduction is charged."""
    k = tree_chunks(n_bytes)
    chunk = n_bytes / 2 / k
    me = ranks[i]
    groups = host_index_groups(p2p.routes.placement, ranks)
    for rnd, (kind, pairs) in enumerate(tree_rounds(groups, k)):
        sends = [p2p.isend(me, ranks[d], chunk, (tag, rnd, m))
                 for m, (s, d) in enumerate(pairs) if s == i]
        recvs = [p2p.recv(me, ranks[s], (tag, rnd, m)) for m, (s, d) in enumerate(pairs) if d == i]
        for ev in sends + recvs:
            yield ev


ALLREDUCE = {
    "ring": mpich.ring_allreduce,
    "recursive_doubling": mpich.recursive_doubling_allreduce,
    "reduce_scatter_allgather": mpich.rabenseifner_allreduce,
    "release_gather": mpich.release_gather_allreduce,
    "smp": mpich.smp_allreduce,
    "gloo_ring": gloo.ring_allreduce,
    "gloo_ring_host": gloo.host_ring_allreduce,
    "reduce_broadcast_mpi": nccl.reduce_broadcast_mpi,
    "reduce_broadcast_gloo": nccl.reduce_broadcast_gloo,
    "hierarchical": hierarchical_allreduce,
    "tree": tree_allreduce,
}
