"""How gloo cuts a ring allreduce into segments and frames its messages on TCP, read from
its source (the gloo of torch 2.13: ``gloo/allreduce.cc``, ``gloo/transport/tcp/pair.cc``).

The model prices the segments and the framing (``simulator.model.comm``: ``gloo``,
``gloo_schedule``, ``costs``) and ``real.records.wire`` counts the bytes a run puts on TCP
from the same cut and the same preambles, so both read them here.

Imports: the standard library only.
"""
from __future__ import annotations

import math


GLOO_MAX_SEGMENT_BYTES = 1024 * 1024   # gloo/allreduce.h: AllreduceOptionsImpl::kMaxSegmentSize


def gloo_ring_segments(p: int, n: float) -> tuple[int, float]:
    """(segments per rank, bytes per segment) of gloo's ring (``gloo/allreduce.cc``):
    ``roundUp(max(ceil(n / 1 MiB), 2P), P)`` segments of equal size."""
    total = max(math.ceil(n / GLOO_MAX_SEGMENT_BYTES), 2 * p)
    segments = -(-total // p) * p
    return segments // p, n / segments


# gloo/transport/tcp/pair.h: every operation on a pair's socket starts with ``Op::preamble``
# (six size_t: 48 bytes). A message to an unbound buffer (gloo/transport/tcp/pair.cc) costs
# its sender two (``Pair::send``: ``sendNotifySendReady``, then ``sendUnboundBuffer``'s with
# the payload) and its receiver one, sent back to the sender (``Pair::recv``:
# ``sendNotifyRecvReady``).
GLOO_PREAMBLE_BYTES = 48
GLOO_SEND_FRAMING_BYTES = 2 * GLOO_PREAMBLE_BYTES
GLOO_RECV_FRAMING_BYTES = GLOO_PREAMBLE_BYTES


GLOO_ELEMENT_BYTES = 4       # the schemes' gradients are float32: gloo cuts whole elements
# In a ring a rank sends to rank - 1 and notifies rank + 1; both leave through its host's
# NIC, so a hop between hosts carries a message's payload and all three preambles.
GLOO_RING_FRAMING_BYTES = GLOO_SEND_FRAMING_BYTES + GLOO_RECV_FRAMING_BYTES


def gloo_ring_lengths(p: int, rank: int, n_bytes: float,
                      element_bytes: int = GLOO_ELEMENT_BYTES) -> list[list[tuple[float, float]]]:
    """(bytes sent, bytes received) at each iteration of ``rank``'s reduce-scatter and
    allgather in one gloo ring allreduce (``gloo/allreduce.cc``, ``ring``), cut in whole
    elements as gloo cuts them: ``S = roundUp(max(ceil(n / maxSegmentBytes), 2P), P)``
    segments of ``roundUp(ceil(n / S), element_bytes)`` bytes, the last ones short or
    empty. The reduce-scatter sends segment ``(rank + 1) S/P + i`` and receives
    ``(rank + 2) S/P + i``, the allgather sends ``rank S/P + i`` and receives
    ``(rank + 1) S/P + i``, i < S - S/P (``computeReduceScatterOffsets``,
    ``computeAllgatherOffsets``); an empty segment is neither sent nor received."""
    if p <= 1:
        return [[], []]
    max_segment = element_bytes * max(1, GLOO_MAX_SEGMENT_BYTES // element_bytes)
    segments = -(-max(math.ceil(n_bytes / max_segment), 2 * p) // p) * p
    per_rank = segments // p
    segment = math.ceil(n_bytes / segments / element_bytes) * element_bytes

    def length(index: int) -> float:
        return max(0.0, min(segment, n_bytes - index % segments * segment))
    return [[(length((rank + first) * per_rank + i), length((rank + first + 1) * per_rank + i))
             for i in range(segments - per_rank)] for first in (1, 0)]


def gloo_ring_sent_segments(p: int, n_bytes: float,
                            element_bytes: int = GLOO_ELEMENT_BYTES) -> int:
    """How many of gloo's ``S`` segments carry bytes (``gloo_ring_lengths``: the last ones
    of a small buffer are empty). In each phase every such segment is sent by all ranks
    but one, so a phase sends ``(P - 1) N`` messages in all: ``(P - 1) N / P`` a rank on
    average, where an even split sends ``(P - 1) S / P``."""
    max_segment = element_bytes * max(1, GLOO_MAX_SEGMENT_BYTES // element_bytes)
    segments = -(-max(math.ceil(n_bytes / max_segment), 2 * p) // p) * p
    segment = math.ceil(n_bytes / segments / element_bytes) * element_bytes
    return min(segments, math.ceil(n_bytes / segment)) if segment > 0 else 0


def gloo_ring_rank_traffic(p: int, rank: int, elements: int, element_bytes: int
                           ) -> tuple[int, int, int]:
    """(payload bytes, messages sent, messages received) of ``rank`` in one gloo ring
    allreduce of ``elements`` (``gloo_ring_lengths``). Over the ranks the payload is
    2 (P - 1) n; a rank's share depends on which segments are empty (small tensors at
    large P)."""
    phases = gloo_ring_lengths(p, rank, elements * element_bytes, element_bytes)
    steps = [step for phase in phases for step in phase]
    return (int(sum(s for s, _ in steps)), sum(s > 0 for s, _ in steps),
            sum(r > 0 for _, r in steps))


def gloo_tcp_bytes(payload: float, sends: int, recvs: int) -> float:
    """What a rank puts on TCP for gloo messages: the payload, two preambles a message it
    sends and one a message it receives (``GLOO_PREAMBLE_BYTES``)."""
    return payload + sends * GLOO_SEND_FRAMING_BYTES + recvs * GLOO_RECV_FRAMING_BYTES
