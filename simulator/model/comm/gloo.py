"""gloo's allreduce as torch.distributed calls it, message by message.

torch 2.13's ``ProcessGroupGloo::allreduce`` runs ``AsyncAllreduceWork``
(``torch/csrc/distributed/c10d/gloo/ProcessGroupGlooDetail.hpp``) on a CPU tensor:
``gloo::allreduce(opts)`` with no algorithm set, which ``gloo/allreduce.cc`` runs as
``ring`` (``AllreduceOptionsImpl::UNSPECIFIED``). gloo's older algorithms
(``allreduce_ring.h``, ``allreduce_ring_chunked.h``, ``allreduce_halving_doubling.h``,
``allreduce_bcube.h``) are Caffe2's and not called by torch for CPU tensors. A CUDA
tensor goes through host memory (``host_ring_allreduce``).

The generator is ONE rank's (the interface of ``comm.collectives``).

Imports: ``libraries.gloo``.
"""
from __future__ import annotations

from libraries.gloo import GLOO_RING_FRAMING_BYTES, gloo_ring_lengths


def ring_allreduce(p2p, ranks, i, n_bytes, tag):
    """``gloo/allreduce.cc``, ``ring``: each rank sends to ``rank - 1`` and receives from
    ``rank + 1``. The buffer is cut into ``S`` segments as gloo cuts them
    (``libraries.gloo.gloo_ring_lengths``: at least two per rank, at most 1 MiB each, a
    multiple of P, whole elements, the last ones short or empty: what ``real.records.wire``
    counts) and each phase runs ``S - S/P`` iterations with two in flight: iteration k
    waits for segment k-2's receive (and reduces it, in the reduce-scatter) and its send,
    then posts the receive and send of segment k; an empty segment is neither sent nor
    waited for. The reduce-scatter sends rank ``r + 1``'s segments first, the allgather
    rank ``r``'s (``computeReduceScatterOffsets``, ``computeAllgatherOffsets``). A
    message between hosts carries gloo's TCP framing (``GLOO_RING_FRAMING_BYTES``: the
    sender's two preambles and the receiver's notification; a ring crosses out of a host
    as often as into it, so each host's network card sends the notifications of as many
    messages as it sends). Inside a host the profile's gloo transport was fitted to
    gloo's own messages, framing and all. Between hosts a message's CPU lies on the
    ring's path (``message_cpu_s``): iteration k handles the receive of k - 2 and the
    send of k before it posts them."""
    p = len(ranks)
    if p == 1:
        return
    me, send_to, recv_from = ranks[i], ranks[(i - 1) % p], ranks[(i + 1) % p]
    placement = p2p.routes.placement
    framing = GLOO_RING_FRAMING_BYTES if placement[me] != placement[send_to] else 0
    phases = gloo_ring_lengths(p, i, n_bytes)
    for (phase, reduce), lengths in zip((("rs", True), ("ag", False)), phases):
        sends = len(lengths)
        posted = []
        for k in range(sends + 2):
            cpu_s = 0.0
            if k >= 2:
                sent, arrived = posted[k - 2]
                received = lengths[k - 2][1]
                if received > 0:
                    yield arrived
                    if reduce:
                        yield p2p.reduce(received)
                    cpu_s += message_cpu_s(p2p.routes, me, recv_from, p, received)
                if sent is not None:
                    yield sent
            if k < sends and lengths[k][0] > 0:
                cpu_s += message_cpu_s(p2p.routes, send_to, me, p, lengths[k][0])
            if cpu_s > 0:
                yield p2p.env.timeout(cpu_s)
            if k < sends:
                send, receive = lengths[k]
                arrived = p2p.recv(me, recv_from, (tag, phase, k)) if receive > 0 else None
                sent = (p2p.isend(me, send_to, send + framing, (tag, phase, k)) if send > 0
                        else None)
                posted.append((sent, arrived))


def message_cpu_s(routes, a: int, b: int, p: int, n_bytes: float) -> float:
    """The CPU one gloo message of ``n_bytes`` between ranks ``a`` and ``b`` costs a rank
    on the ring's path: the link's ``c(n) = cpu_s_per_message + cpu_s_per_byte * n``
    (``calibrate.link``, from the process time of gloo's ping-pong) between hosts, 0 on
    one host; times ``max(1, P / cpu_shared_cores)`` where the hosts' messages share a
    machine's cores (``Link.cpu_shared_cores``: the emulated cluster's namespaces).

    Why it is on the path (``gloo/allreduce.cc``, ``ring``; ``gloo/transport/tcp``):
    iteration k of a phase waits in ``waitRecv`` for segment k - 2, which gloo's device
    thread read from the socket (``Loop::run``'s ``epoll_wait`` -> ``Pair::handleEvents``
    -> ``Pair::read`` -> the unbound buffer's completion, which wakes the waiting thread);
    only then does the caller reduce it and post the send of k (``Pair::send``:
    ``sendNotifySendReady`` and the payload's ``writev`` in the calling thread, or, if
    the peer's ``NOTIFY_RECV_READY`` comes later, from the device thread in
    ``handleRemotePendingRecv``). The send of k on rank i is what rank i - 1 waits for
    two iterations on, so every rank's handling of every segment lies on the chain, and
    where P ranks share C cores each iteration's CPU takes P / C of its time."""
    link = routes.link
    if link is None or routes.placement[a] == routes.placement[b]:
        return 0.0
    share = max(1.0, p / link.cpu_shared_cores) if link.cpu_shared_cores else 1.0
    return share * (link.cpu_s_per_message + link.cpu_s_per_byte * n_bytes)


def host_ring_allreduce(p2p, ranks, i, n_bytes, tag):
    """gloo on a CUDA tensor: torch's ``AsyncAllreduceCUDAHostWork``
    (``torch/csrc/distributed/c10d/gloo/ProcessGroupGlooCuda.cpp``, chosen where the
    transport has no GPUDirect, as gloo's TCP has none) copies the tensor to pinned host
    memory, runs ``ring_allreduce`` on the host over TCP (two ranks of a host too) and
    copies the sum back: ``stage`` each way."""
    yield p2p.stage(n_bytes)
    yield from ring_allreduce(p2p.on_host(), ranks, i, n_bytes, tag)
    yield p2p.stage(n_bytes)
