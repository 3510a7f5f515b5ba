"""gloo's ring allreduce alone on its links, as a recurrence over its segments.

``comm.gloo.ring_allreduce`` sends a ring's segments message by message through the
simulated network; ``costs.simulated_alone_s`` runs it in SimPy to price one call (the
fast engine and the analytic fidelity ask for every tensor and bucket at every P). Where
every link resource on the ring's hops carries that hop's messages only, nothing in
flight depends on another hop's timing except through the ranks, and the same schedule
follows from a recurrence, computed for all ranks at once (numpy):

* rank ``i`` posts segment ``k`` (its receive from ``i + 1`` and its send to ``i - 1``)
  when it has received segment ``k - 2``, added it up (reduce-scatter: ``gamma * s``)
  and its own send of ``k - 2`` is delivered (two in flight, ``gloo/allreduce.cc``),
  and handled the receive of ``k - 2`` and the send of ``k`` on its CPU
  (``gloo.message_cpu_s``);
* a message moves once both ends posted (rendezvous); between hosts with socket
  buffers (``Routes.eager_bytes`` at least the segment) it moves when sent and is
  received once both its bytes are in and the receive is posted;
* a hop carries at most two of its messages at once (segment ``k + 2`` waits for ``k``
  to be delivered): alone a message moves at ``r1 = min(capacities, flow cap)``, two
  share them at ``r2 = min(capacities / 2, flow cap)`` (``fluid.max_min_rates``), and
  a message arrives its path's latency (and the receiver's hand-off) after its last byte;
* the segments are gloo's cut (``libraries.gloo.gloo_ring_lengths``: whole elements, the
  last ones short), so a short segment may end before the full one it shares a hop with.

``ring_alone_s`` returns None where those conditions do not hold (a NIC or endpoint on
two hops, TCP's ACKs on the reverse directions, a shaped link's token buckets, a
segment larger than the socket buffers that cross before the receive, an empty segment
of a small buffer, which gloo neither sends nor waits for): then the messages are
simulated. Against the message path the answers agree within 1e-9
relative, not to the last bit: ``fluid.FluidShare`` advances every flow at every event
of the network, so its floats round differently (``tests/test_gloo_schedule.py``).

Imports: numpy, libraries.gloo, model.network.
"""
from __future__ import annotations

import math

import numpy as np

from libraries.gloo import (GLOO_ELEMENT_BYTES, GLOO_MAX_SEGMENT_BYTES, GLOO_RING_FRAMING_BYTES,
                            gloo_ring_lengths)
from simulator.model.comm.gloo import message_cpu_s
from simulator.model.network import LINK_KEYS, Routes


def ring_alone_s(ranks: tuple[int, ...], n_bytes: float, routes: Routes,
                 gamma_s_per_byte: float) -> float | None:
    """The time of one gloo ring allreduce of ``n_bytes`` among ``ranks`` with nothing
    else in flight (what ``costs.simulated_alone_s`` gives), or None where the recurrence
    is not exact (see the module)."""
    p = len(ranks)
    sent = _cut(p, n_bytes)                          # phase, k, hop i (rank i sends to i - 1)
    hops = _hops(ranks, float(sent.max(initial=0.0)), routes)
    if hops is None or not sent.any():
        return None
    latency, r1, r2, eager, framing = hops
    received = np.roll(sent, -1, axis=2)             # rank i receives hop i + 1's message
    per_message = [np.array([message_cpu_s(routes, ranks[i], ranks[(i + d) % p], p, n)
                             for i in range(p)]) for d in (1, -1) for n in (0.0, 1.0)]
    cpu_of = [(c0, c1 - c0) for c0, c1 in (per_message[:2], per_message[2:])]

    def cpu(lengths, side):                          # c(n) of each message, 0 where none
        c0, c1 = cpu_of[side]
        return np.where(lengths > 0, c0 + c1 * lengths, 0.0)
    cursor = np.zeros(p)
    for ph, reduce in ((0, True), (1, False)):       # reduce-scatter, then allgather
        reduce_s = gamma_s_per_byte * received[ph] if reduce else None
        cursor = _phase(cursor, sent[ph], framing, reduce_s, latency, r1, r2, eager,
                        (cpu(received[ph], 0), cpu(sent[ph], 1)))
        if cursor is None:
            return None
    return float(cursor.max())


def _cut(p: int, n_bytes: float) -> np.ndarray:
    """Bytes rank i sends at iteration k of each phase, [phase, k, i]: gloo's cut
    (``libraries.gloo.gloo_ring_lengths``, whole elements, the last segments short or
    empty), for all ranks at once."""
    element = GLOO_ELEMENT_BYTES
    max_segment = element * max(1, GLOO_MAX_SEGMENT_BYTES // element)
    segments = -(-max(math.ceil(n_bytes / max_segment), 2 * p) // p) * p
    per_rank = segments // p
    segment = math.ceil(n_bytes / segments / element) * element
    k = np.arange(segments - per_rank)[:, None]
    rank = np.arange(p)[None, :]
    index = np.stack([((rank + first) * per_rank + k) % segments for first in (1, 0)])
    return np.clip(n_bytes - index * segment, 0.0, segment).astype(float)


def _hops(ranks, seg: float, routes: Routes):
    """Per hop i (``ranks[i]`` to ``ranks[i - 1]``): latency with the receiver's hand-off,
    the rate of a message alone and of two, whether it crosses before its receive is
    posted, and the bytes each of its messages carries beyond its segment (gloo's framing
    between hosts: ``comm.gloo``); None where a resource is on two hops, ACKs or token
    buckets load the links, or a segment of ``seg`` bytes (the largest) is only partly
    eager."""
    p = len(ranks)
    link = routes.link
    buckets = link is not None and link.burst_bytes > 0
    cap = routes.flow_cap or math.inf
    seen: set = set()
    latency, r1, r2 = np.empty(p), np.empty(p), np.empty(p)
    eager = np.zeros(p, dtype=bool)
    framing = np.zeros(p)
    for i in range(p):
        src, dst = ranks[i], ranks[i - 1]
        if routes.placement[src] != routes.placement[dst]:
            framing[i] = GLOO_RING_FRAMING_BYTES
        lat, resources = routes.path(src, dst)
        if routes.acks(src, dst):
            return None
        keys = [key for key, _c in resources]
        if seen.intersection(keys) or (buckets and any(k[0] in LINK_KEYS for k in keys)):
            return None
        seen.update(keys)
        buffered = routes.eager_bytes(src, dst)
        if 0 < buffered < seg + framing[i]:
            return None
        latency[i] = lat + routes.handoff_s[dst]
        least = min((c for _k, c in resources), default=math.inf)
        r1[i] = min(least, cap) if resources else math.inf
        r2[i] = min(least / 2.0, cap) if resources else math.inf
        eager[i] = buffered > 0
    return latency, r1, r2, eager, framing


def _phase(cursor, sent, framing, reduce_s, latency, r1, r2, eager, cpu):
    """One phase of a rank's sends (``sent[k]``: each hop's segment bytes at iteration k,
    0 where gloo's cut left it empty, which is neither sent nor waited for; ``framing``:
    each hop's bytes beyond a segment) from each rank's ``cursor`` (when it starts the
    phase); ``reduce_s[k]`` (or None): each rank's reduction of what it received at k;
    ``cpu``: each rank's CPU for its receive and its send at each k; returns when each
    leaves the phase, or None if a hop would carry three messages."""
    recv_cpu, send_cpu = cpu
    sends = len(sent)
    p = len(cursor)
    after, before = np.roll(np.arange(p), -1), np.roll(np.arange(p), 1)   # i + 1, i - 1
    delivered: list = []                     # per segment, per hop: delivered and received
    rem = np.zeros(p)                        # the hop's last message: bytes left at ``at``
    at = np.full(p, -math.inf)
    last_end = np.full(p, -math.inf)         # when the hop's message before it ended
    pending = None                           # (receives posted, latency) of the last message
    none = np.ones(p, dtype=bool)            # the hop's last message was an empty segment
    with np.errstate(invalid="ignore", divide="ignore"):
        for k in range(sends + 2):
            if k >= 2:
                done = delivered[k - 2]
                cursor = np.maximum(cursor, done[after])   # from i + 1: received
                if reduce_s is not None:
                    cursor = cursor + reduce_s[k - 2]
                cursor = np.maximum(cursor, done)                # its own send delivered
                cursor = cursor + recv_cpu[k - 2]
            if k < sends:
                cursor = cursor + send_cpu[k]
            if k == sends:                   # the last message of every hop runs out alone
                end = at + np.where(rem > 0, rem / r1, 0.0)
                delivered.append(np.where(none, -math.inf, np.maximum(pending, end + latency)))
            if k >= sends:
                continue
            empty = sent[k] <= 0
            seg = np.where(empty, 0.0, sent[k] + framing)
            posted_by_receiver = cursor[before]
            start = np.where(eager, cursor, np.maximum(cursor, posted_by_receiver))
            if k > 0:
                if np.any((start < last_end) & ~empty):
                    return None
                # the message before: alone until this one starts, then both at r2
                alone_end = at + np.where(rem > 0, rem / r1, 0.0)
                left = rem - r1 * (start - at)
                shared = (alone_end > start) & ~empty
                first = shared & (seg < left)      # a short segment ends before the one ahead
                both_end = start + np.where(first, seg, left) / r2
                end = np.where(first, both_end + (left - seg) / r1,
                               np.where(shared, both_end, alone_end))
                last_end = end
                delivered.append(np.where(none, -math.inf, np.maximum(pending, end + latency)))
                rem = np.where(empty, 0.0, np.where(first, 0.0, np.where(shared, seg - left, seg)))
                at = np.where(empty, end, np.where(shared, both_end, start))
            else:
                rem, at = seg.copy(), start
            pending = posted_by_receiver
            none = empty
    return cursor
