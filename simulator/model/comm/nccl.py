"""NCCL's reduce and broadcast inside a host, and the hierarchical allreduces built on them.

``ncclReduce`` and ``ncclBcast`` run along NCCL's ring (``src/collectives/device/
reduce.h``, ``broadcast.h`` of NCCL 2.4): a reduce starts at the rank after the root
and ends at the root, each rank adding its data as it forwards; a broadcast starts
at the root. Both move the buffer in chunks of one step (``buffSize / NCCL_STEPS``:
4 MiB / 8 = 512 KiB, ``REDUCE_CHUNKSTEPS`` = ``BROADCAST_CHUNKSTEPS`` = 1); here a rank
sends a chunk once it has it and its previous chunk is through (NCCL keeps up to 8 in
flight), at most ``CHAIN_MAX_CHUNKS`` chunks (larger ones above 32 MiB).

Horovod (0.13.6 to 0.14, ``HOROVOD_HIERARCHICAL_ALLREDUCE=1``) ran an allreduce over
accelerator hosts as such a reduce to each host's first device, a copy to host memory,
MPI's allreduce among the hosts, a copy back and such a broadcast
(``reduce_broadcast_mpi``); Caffe2 with gloo reduced a host's GPUs in host memory and
ran gloo's ring among the hosts (``reduce_broadcast_gloo``).

Generators of ONE rank (the interface of ``comm.collectives``).
Imports: ``simulator.model.comm.closed_forms``, ``model.comm`` (gloo, mpich), ``model.network``.
"""
from __future__ import annotations

from simulator.model.comm.closed_forms import chain_chunks
from simulator.model.comm import gloo, mpich
from simulator.model.network import host_and_roots


def _chain(p2p, chain, j, n_bytes, tag, reduce: bool):
    """Position ``j`` of a pipelined chain: receive each chunk from ``chain[j-1]`` (and
    add it up), pass it to ``chain[j+1]`` once the previous chunk has gone through."""
    k = chain_chunks(n_bytes)
    chunk = n_bytes / k
    me, sent = chain[j], None
    for c in range(k):
        if j > 0:
            yield p2p.recv(me, chain[j - 1], (tag, c))
            if reduce:
                yield p2p.reduce(chunk)
        if j < len(chain) - 1:
            if sent is not None:
                yield sent
            sent = p2p.isend(me, chain[j + 1], chunk, (tag, c))
    if sent is not None:
        yield sent


def chain_reduce(p2p, ranks, i, n_bytes, tag):
    """``ncclReduce`` to index 0 (``reduce.h``: ``prevRank == root`` sends, the others
    receive, reduce and send, the root receives): the chain 1, 2, ..., P-1, 0."""
    chain = tuple(ranks[1:]) + (ranks[0],)
    yield from _chain(p2p, chain, (i - 1) % len(ranks), n_bytes, tag, True)


def chain_bcast(p2p, ranks, i, n_bytes, tag):
    """``ncclBcast`` from index 0 (``broadcast.h``): the chain 0, 1, ..., P-1."""
    yield from _chain(p2p, tuple(ranks), i, n_bytes, tag, False)


def _reduce_broadcast(p2p, ranks, i, n_bytes, tag, across):
    """Reduce in each host to its first rank; that rank copies the sum to host memory,
    runs ``across`` with the other hosts' first ranks on their CPUs, copies it back;
    then a broadcast in each host."""
    me = ranks[i]
    local, roots = host_and_roots(p2p.routes.placement, ranks, i)
    li = local.index(me)
    if len(local) > 1:
        yield from chain_reduce(p2p, tuple(local), li, n_bytes, (tag, "reduce"))
    if li == 0 and len(roots) > 1:
        yield p2p.stage(n_bytes)
        yield from across(p2p.on_host(), tuple(roots), roots.index(me), n_bytes, (tag, "roots"))
        yield p2p.stage(n_bytes)
    if len(local) > 1:
        yield from chain_bcast(p2p, tuple(local), li, n_bytes, (tag, "bcast"))


def reduce_broadcast_mpi(p2p, ranks, i, n_bytes, tag):
    """Horovod 0.13.6-0.14 with ``HOROVOD_HIERARCHICAL_ALLREDUCE=1``
    (``horovod/common/operations.cc``, ``PerformOperation``): ``ncclReduce`` to local
    rank 0, ``cudaMemcpyAsync`` to a host buffer, ``MPI_Allreduce`` on ``cross_comm``
    (the local rank 0 of every host; MPICH's choice, ``mpich.mpir_allreduce``), the copy
    back, ``ncclBcast``. (Horovod 0.15 on reduce-scatters and all-gathers instead:
    ``hierarchical``.)"""
    yield from _reduce_broadcast(p2p, ranks, i, n_bytes, tag, mpich.mpir_allreduce)


def reduce_broadcast_gloo(p2p, ranks, i, n_bytes, tag):
    """Caffe2 with gloo on hosts of several GPUs (``caffe2/python/data_parallel_model.py``,
    ``_AllReduceBlobsDistributed``: with the ``GLOO`` engine one ``Allreduce`` op over
    all of a host's GPU copies), which gloo runs as ``CudaAllreduceRing`` with a host
    workspace (``gloo/cuda_allreduce_ring.cc``, ``gloo/cuda_collectives_host.h``):
    every GPU copies its buffer to pinned host memory at once (``CudaLocalHostReduce``,
    one stream each), the CPU adds them up, gloo's ring runs among the hosts on the
    host, and every GPU copies the sum back (``CudaLocalHostBroadcast``). The host's
    first rank stands for the process; it tells the others the sum is ready with an
    empty message over the devices' link."""
    me = ranks[i]
    local, roots = host_and_roots(p2p.routes.placement, ranks, i)
    yield p2p.stage(n_bytes)
    if me != local[0]:
        yield p2p.recv(me, local[0], (tag, "ready"))
        yield p2p.stage(n_bytes)
        return
    if len(local) > 1:
        yield p2p.reduce((len(local) - 1) * n_bytes)
    if len(roots) > 1:
        yield from gloo.ring_allreduce(p2p.on_host(), tuple(roots), roots.index(me), n_bytes,
                                       (tag, "roots"))
    sends = [p2p.isend(me, other, 0.0, (tag, "ready")) for other in local[1:]]
    yield p2p.stage(n_bytes)
    for ev in sends:
        yield ev
