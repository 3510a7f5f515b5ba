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
    leaves the phase, or None if a hop would carry three messages.

    A loop over the ranks in Python floats (the same operations, in the same order, as
    on numpy's arrays of them): a ring has at most ``costs.GLOO_RING_SIMULATED_UP_TO``
    ranks, too few for numpy's calls to pay for themselves."""
    recv_cpu, send_cpu = cpu[0].tolist(), cpu[1].tolist()
    sent, framing, latency = sent.tolist(), framing.tolist(), latency.tolist()
    r1, r2, eager = r1.tolist(), r2.tolist(), eager.tolist()
    reduce_s = reduce_s.tolist() if reduce_s is not None else None
    cursor = cursor.tolist()
    sends, p = len(sent), len(cursor)
    ranks = range(p)
    after = [(i + 1) % p for i in ranks]
    neg_inf = -math.inf
    delivered: list = []                     # per segment, per hop: delivered and received
    rem = [0.0] * p                          # the hop's last message: bytes left at ``at``
    at = [neg_inf] * p
    last_end = [neg_inf] * p                 # when the hop's message before it ended
    pending = None                           # receives posted for the last message
    none = [True] * p                        # the hop's last message was an empty segment
    for k in range(sends + 2):
        if k >= 2:
            done = delivered[k - 2]
            received = [max(cursor[i], done[after[i]]) for i in ranks]   # from i + 1
            if reduce_s is not None:
                red = reduce_s[k - 2]
                received = [received[i] + red[i] for i in ranks]
            cpu_k = recv_cpu[k - 2]
            cursor = [max(received[i], done[i]) + cpu_k[i] for i in ranks]  # own send in
        if k < sends:
            cpu_k = send_cpu[k]
            cursor = [cursor[i] + cpu_k[i] for i in ranks]
        if k == sends:                       # the last message of every hop runs out alone
            delivered.append([
                neg_inf if none[i] else
                max(pending[i], at[i] + (rem[i] / r1[i] if rem[i] > 0 else 0.0) + latency[i])
                for i in ranks])
        if k >= sends:
            continue
        sent_k = sent[k]
        empty = [b <= 0 for b in sent_k]
        seg = [0.0 if empty[i] else sent_k[i] + framing[i] for i in ranks]
        posted = [cursor[i - 1] for i in ranks]              # by the receiver, i - 1
        start = [cursor[i] if eager[i] else max(cursor[i], posted[i]) for i in ranks]
        if k > 0:
            if any(start[i] < last_end[i] and not empty[i] for i in ranks):
                return None
            out = []
            for i in ranks:  # the message before: alone until this one starts, then both at r2
                alone_end = at[i] + (rem[i] / r1[i] if rem[i] > 0 else 0.0)
                if alone_end > start[i] and not empty[i]:         # shared
                    left = rem[i] - r1[i] * (start[i] - at[i])
                    if seg[i] < left:        # a short segment ends before the one ahead
                        both_end = start[i] + seg[i] / r2[i]
                        end = both_end + (left - seg[i]) / r1[i]
                        rem[i] = 0.0
                    else:
                        end = both_end = start[i] + left / r2[i]
                        rem[i] = seg[i] - left
                    at[i] = both_end
                else:
                    end = alone_end
                    rem[i] = 0.0 if empty[i] else seg[i]
                    at[i] = end if empty[i] else start[i]
                last_end[i] = end
                out.append(neg_inf if none[i] else max(pending[i], end + latency[i]))
            delivered.append(out)
        else:
            rem, at = seg[:], start[:]
        pending = posted
        none = empty
    return np.array(cursor)
