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
  a message arrives its path's latency (and the receiver's hand-off) after its last byte.

``ring_alone_s`` returns None where those conditions do not hold (a NIC or endpoint on
two hops, TCP's ACKs on the reverse directions, a shaped link's token buckets, a
segment larger than the socket buffers that cross before the receive): then the
messages are simulated. Against the message path the answers agree within 1e-9
relative, not to the last bit: ``fluid.FluidShare`` advances every flow at every event
of the network, so its floats round differently (``tests/test_gloo_schedule.py``).

Imports: numpy, libraries.gloo, model.network.
"""
from __future__ import annotations

import math

import numpy as np

from libraries.gloo import GLOO_RING_FRAMING_BYTES, gloo_ring_segments
from simulator.model.comm.gloo import message_cpu_s
from simulator.model.network import LINK_KEYS, Routes


def ring_alone_s(ranks: tuple[int, ...], n_bytes: float, routes: Routes,
                 gamma_s_per_byte: float) -> float | None:
    """The time of one gloo ring allreduce of ``n_bytes`` among ``ranks`` with nothing
    else in flight (what ``costs.simulated_alone_s`` gives), or None where the recurrence
    is not exact (see the module)."""
    p = len(ranks)
    per_rank, seg = gloo_ring_segments(p, n_bytes)
    hops = _hops(ranks, seg, routes)
    if hops is None or seg <= 0:
        return None
    latency, r1, r2, eager, framed = hops
    sends = (p - 1) * per_rank
    send_cpu = np.array([message_cpu_s(routes, ranks[i], ranks[i - 1], p, seg) for i in range(p)])
    cpu = (np.roll(send_cpu, -1), send_cpu)            # a rank's receive is hop i + 1's send
    cursor = np.zeros(p)
    for reduce_s in (gamma_s_per_byte * seg, None):      # reduce-scatter, then allgather
        cursor = _phase(cursor, sends, framed, reduce_s, latency, r1, r2, eager, cpu)
        if cursor is None:
            return None
    return float(cursor.max())


def _hops(ranks, seg: float, routes: Routes):
    """Per hop i (``ranks[i]`` to ``ranks[i - 1]``): latency with the receiver's hand-off,
    the rate of a message alone and of two, whether it crosses before its receive is
    posted, and the bytes of its messages (a segment, with gloo's framing between hosts:
    ``comm.gloo``); None where a resource is on two hops, ACKs or token buckets load the
    links, or a segment is only partly eager."""
    p = len(ranks)
    link = routes.link
    buckets = link is not None and link.burst_bytes > 0
    cap = routes.flow_cap or math.inf
    seen: set = set()
    latency, r1, r2 = np.empty(p), np.empty(p), np.empty(p)
    eager = np.zeros(p, dtype=bool)
    framed = np.full(p, float(seg))
    for i in range(p):
        src, dst = ranks[i], ranks[i - 1]
        if routes.placement[src] != routes.placement[dst]:
            framed[i] += GLOO_RING_FRAMING_BYTES
        lat, resources = routes.path(src, dst)
        if routes.acks(src, dst):
            return None
        keys = [key for key, _c in resources]
        if seen.intersection(keys) or (buckets and any(k[0] in LINK_KEYS for k in keys)):
            return None
        seen.update(keys)
        buffered = routes.eager_bytes(src, dst)
        if 0 < buffered < framed[i]:
            return None
        latency[i] = lat + routes.handoff_s[dst]
        least = min((c for _k, c in resources), default=math.inf)
        r1[i] = min(least, cap) if resources else math.inf
        r2[i] = min(least / 2.0, cap) if resources else math.inf
        eager[i] = buffered > 0
    return latency, r1, r2, eager, framed


def _phase(cursor, sends: int, seg, reduce_s: float | None, latency, r1, r2, eager, cpu):
    """One phase of ``sends`` segments a rank (``seg``: each hop's message bytes) from each
    rank's ``cursor`` (when it starts the phase); ``cpu``: each rank's CPU for a receive
    and for a send; returns when each leaves it, or None if a hop would carry three
    messages."""
    recv_cpu, send_cpu = cpu
    p = len(cursor)
    after, before = np.roll(np.arange(p), -1), np.roll(np.arange(p), 1)   # i + 1, i - 1
    delivered: list = []                     # per segment, per hop: delivered and received
    rem = np.zeros(p)                        # the hop's last message: bytes left at ``at``
    at = np.full(p, -math.inf)
    last_end = np.full(p, -math.inf)         # when the hop's message before it ended
    pending = None                           # (receives posted, latency) of the last message
    with np.errstate(invalid="ignore", divide="ignore"):
        for k in range(sends + 2):
            if k >= 2:
                done = delivered[k - 2]
                cursor = np.maximum(cursor, done[after])   # from i + 1: received
                if reduce_s is not None:
                    cursor = cursor + reduce_s
                cursor = np.maximum(cursor, done)                # its own send delivered
                cursor = cursor + recv_cpu
            if k < sends:
                cursor = cursor + send_cpu
            if k == sends:                   # the last message of every hop runs out alone
                end = at + np.where(rem > 0, rem / r1, 0.0)
                delivered.append(np.maximum(pending, end + latency))
            if k >= sends:
                continue
            posted_by_receiver = cursor[before]
            start = np.where(eager, cursor, np.maximum(cursor, posted_by_receiver))
            if k > 0:
                if np.any(start < last_end):
                    return None
                # the message before: alone until this one starts, then both at r2
                alone_end = at + np.where(rem > 0, rem / r1, 0.0)
                left = rem - r1 * (start - at)
                shared = alone_end > start
                both_end = start + left / r2
                end = np.where(shared, both_end, alone_end)
                last_end = end
                delivered.append(np.maximum(pending, end + latency))
                rem = np.where(shared, seg - left, seg)
                at = np.where(shared, both_end, start)
            else:
                rem, at = np.array(seg, dtype=float), start
            pending = posted_by_receiver
    return cursor
