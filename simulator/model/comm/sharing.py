"""Messages priced one by one, then made to share the NIC directions they cross at once.

``comm.iallreduce`` plays MPICH's non-blocking allreduce poll by poll and prices each
message as the message model moves one alone (``RouteFlights``). That holds while no two
messages cross one NIC direction at the same time, which is so for every round of the
halving and doubling at a power of two (a pair exchanges, each direction carries one
message). Off a power of two it is not: MPICH's fold (``iallreduce_intra_sched_
reduce_scatter_allgather.c``: the even ranks below ``2 rem`` send the whole buffer to
``rank + 1``) is in flight while the ranks beyond ``2 rem`` post their first halving
round, whose partners are the ranks receiving the fold. At P = 3 rank 2's half of the
buffer and rank 0's whole buffer both enter rank 1's host; the emulated cluster shapes
both directions of every host link (``real.cluster.netns``), so they share it, and the
fold ends after 1.5 buffers' time, not one (phantom-18, VGG-11 at 200 Mbit/s: rank 2
leaves the call 3.92 s in, 2.5 buffers' time; priced alone, 2.0).

``finish_s`` plays the messages from their post times with the rates max-min fair over
the directions they cross (``model.fluid.max_min_rates``, the mechanism the message
fidelity uses for every other collective): each message is a flow of its alone time's
worth of bytes at the narrowest capacity of its path, so a message alone ends exactly
when ``RouteFlights`` priced it. Messages that never overlap another on a direction are
left as priced (``overlapping``: the common case costs one sort).

Imports: ``model.fluid``.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from simulator.model.fluid import Flow, Resource, max_min_rates

_EPS = 1e-12


class Message(NamedTuple):
    """One message as priced alone: posted at ``start_s``, ``busy_s`` on the wire (after
    its latency), crossing ``resources`` ((key, bytes/s), ...); ``until_s``: when it ended
    as last priced (its start, busy time and any delay from sharing that pricing added)."""
    start_s: float
    busy_s: float
    resources: tuple
    until_s: float


def overlapping(messages: list[Message]) -> set[int]:
    """The messages (by index) whose time on a resource, as last priced, overlaps another
    message's on the same resource: a sweep of each resource's messages in start order."""
    by_key: dict = {}
    for i, m in enumerate(messages):
        if m.busy_s > 0:
            for key, _c in m.resources:
                by_key.setdefault(key, []).append(i)
    linked: set[int] = set()
    for members in by_key.values():
        members.sort(key=lambda i: messages[i].start_s)
        last, end_s = None, -math.inf
        for i in members:
            if last is not None and messages[i].start_s < end_s - _EPS:
                linked.update((i, last))
            if messages[i].until_s > end_s:
                last, end_s = i, messages[i].until_s
    return linked


def finish_s(messages: list[Message]) -> list[float]:
    """When each message leaves the wire if the messages on one resource at once share it
    max-min fairly: a message alone moves at its path's narrowest capacity and ends at
    ``start_s + busy_s``."""
    out = [m.start_s + m.busy_s for m in messages]
    shared = sorted(overlapping(messages), key=lambda i: messages[i].start_s)
    resources: dict = {}
    active: dict[int, Flow] = {}
    t, nxt = 0.0, 0
    while nxt < len(shared) or active:
        if active:
            max_min_rates(list(active.values()))
        start_s = messages[shared[nxt]].start_s if nxt < len(shared) else math.inf
        end_s = min((t + f.remaining / f.rate for f in active.values()), default=math.inf)
        t_next = min(start_s, end_s)
        for i, f in list(active.items()):
            f.remaining -= f.rate * (t_next - t)
            if f.remaining <= _EPS * f.amount:
                out[i] = t_next
                del active[i]
        t = t_next
        while nxt < len(shared) and messages[shared[nxt]].start_s <= t:
            i = shared[nxt]
            nxt += 1
            active[i] = _flow(messages[i], resources)
    return out


def _flow(m: Message, resources: dict) -> Flow:
    """A message as a flow of its alone time's bytes at its narrowest capacity."""
    narrowest = min(c for _k, c in m.resources)
    crossed = tuple(resources.setdefault(k, Resource(str(k), c)) for k, c in m.resources)
    return Flow(m.busy_s * narrowest, crossed, narrowest, None)
