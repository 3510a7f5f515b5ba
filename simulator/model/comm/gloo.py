"""gloo's allreduce, gather and scatter as torch.distributed calls them, message by message.

torch 2.13's ``ProcessGroupGloo::allreduce`` runs ``AsyncAllreduceWork``
(``torch/csrc/distributed/c10d/gloo/ProcessGroupGlooDetail.hpp``) on a CPU tensor:
``gloo::allreduce(opts)`` with no algorithm set, which ``gloo/allreduce.cc`` runs as
``ring`` (``AllreduceOptionsImpl::UNSPECIFIED``). gloo's older algorithms
(``allreduce_ring.h``, ``allreduce_ring_chunked.h``, ``allreduce_halving_doubling.h``,
``allreduce_bcube.h``) are Caffe2's and not called by torch for CPU tensors. A CUDA
tensor goes through host memory (``host_ring_allreduce``). ``dist.gather`` and
``dist.scatter`` run ``AsyncGatherWork`` and ``AsyncScatterWork``
(``torch/csrc/distributed/c10d/ProcessGroupGloo.cpp``): ``gloo::gather`` and
``gloo::scatter`` over the pairs' TCP sockets (``gather``, ``scatter``).

The generator is ONE rank's (the interface of ``comm.collectives``).

Imports: ``libraries.gloo``.
"""
from __future__ import annotations

from libraries.gloo import GLOO_PREAMBLE_BYTES, GLOO_RING_FRAMING_BYTES, gloo_ring_lengths


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
    on the ring's path: the link's ``c(n)`` (``Link.message_cpu_s``: per message, byte and wake-up)
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
    if not routes.crosses(a, b):
        return 0.0
    return cpu_share(routes.link, p) * routes.link.message_cpu_s(n_bytes)


def cpu_share(link, p: int) -> float:
    """How much longer a message's CPU takes where ``p`` ranks share the link's
    ``cpu_shared_cores``: ``max(1, P / C)``; 1 where each rank has a core of its own."""
    return max(1.0, p / link.cpu_shared_cores) if link.cpu_shared_cores else 1.0


def host_ring_allreduce(p2p, ranks, i, n_bytes, tag):
    """gloo on a CUDA tensor: torch's ``AsyncAllreduceCUDAHostWork``
    (``torch/csrc/distributed/c10d/gloo/ProcessGroupGlooCuda.cpp``, chosen where the
    transport has no GPUDirect, as gloo's TCP has none) copies the tensor to pinned host
    memory, runs ``ring_allreduce`` on the host over TCP (two ranks of a host too) and
    copies the sum back: ``stage`` each way."""
    yield p2p.stage(n_bytes)
    yield from ring_allreduce(p2p.on_host(), ranks, i, n_bytes, tag)
    yield p2p.stage(n_bytes)


# ``kMaxSendBufferSize`` (``gloo/transport/tcp/pair.cc``): ``Pair::send`` sizes the socket's
# send buffer to a message up to this, so that its ``writev`` completes at once.
GLOO_SEND_BUFFER_MAX_BYTES = 32 * 2**20


def scatter(p2p, ranks, i, n_bytes, tag, root: int = 0):
    """gloo's ``scatter`` (``gloo/scatter.cc``) as torch's ``ProcessGroupGloo`` runs it
    (``AsyncScatterWork`` -> ``gloo::scatter``): the root posts its sends in rank order and
    waits in ``waitSend``, which returns once each payload is written to its socket
    (``Pair::send`` sizes the send buffer to it, up to ``GLOO_SEND_BUFFER_MAX_BYTES``), not
    once it is delivered: the root goes on (computes) while its port drains (a message
    above that size: here the root waits for the whole drain, where gloo returns once all
    but the buffer's worth has left). The bytes
    leave its port in the order they were written, one message after another (the
    shaper's queue is one FIFO): rank 1's piece first, then rank 2's, ... (the records:
    the ranks reach the next gather one message apart). ``p2p.port_queues[root]`` keeps
    the draining for the next ``gather``."""
    me = ranks[i]
    if i != root:
        yield p2p.recv(me, ranks[root], tag)
        return
    others = [dst for k, dst in enumerate(ranks) if k != root]
    drained = p2p.port_queues[me] = p2p.env.process(_in_turn(p2p, me, others, n_bytes, tag))
    if n_bytes > GLOO_SEND_BUFFER_MAX_BYTES:       # the socket takes it only as it drains
        yield drained


def _in_turn(p2p, src, dsts, n_bytes, tag):
    """Generator: ``src``'s messages to ``dsts``, each after the one before it has left."""
    for dst in dsts:
        yield p2p.isend(src, dst, n_bytes, tag)


def gather(p2p, ranks, i, n_bytes, tag, root: int = 0):
    """gloo's ``gather`` (``gloo/gather.cc``, torch's ``AsyncGatherWork``): the root posts a
    receive from every rank; each receive sends the rank a ``NOTIFY_RECV_READY``
    (``Pair::recv`` -> ``sendNotifyRecvReady``) on the pair's socket, behind whatever the
    root's port still has queued (a scatter draining, ``scatter``). A rank's payload moves
    only once that notice has reached it: ``Pair::send`` writes it at once only if the
    remote receive is known (``shiftRemotePendingRecv``), else queues it until the device
    thread reads the notice (``Pair::handleRemotePendingRecv``: "sends cannot execute
    until the remote side is ready to receive"), so no byte of it crosses early. Its
    ``waitSend`` returns once the payload is written to the socket. With a scatter before
    it, the gather is the scatter's drain, then the ranks' incast into the root's port."""
    me, at = ranks[i], ranks[root]
    if i != root:
        yield p2p.notice(tag, me)
        sent = p2p.isend(me, at, n_bytes, tag)
        if n_bytes > GLOO_SEND_BUFFER_MAX_BYTES:
            yield sent
        return
    others = [src for k, src in enumerate(ranks) if k != root]
    posted = [p2p.recv(me, src, tag) for src in others]
    queued = p2p.port_queues.pop(me, None)
    for src in others:
        p2p.env.process(_notify(p2p, me, src, tag, queued))
    for ev in posted:
        yield ev


def _notify(p2p, src, dst, tag, queued):
    """Generator: ``src``'s ``NOTIFY_RECV_READY`` to ``dst`` (one preamble), after the bytes
    queued at ``src``'s port before it (``queued``: an event, or None)."""
    if queued is not None and not queued.processed:
        yield queued
    yield p2p.leg(src, dst, GLOO_PREAMBLE_BYTES)
    p2p.notice(tag, dst).succeed()
