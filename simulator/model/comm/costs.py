"""What a collective costs on a given placement: the closed forms with the links' sharing.

The contention-free closed forms (``simulator.model.comm.closed_forms``) price every
step at one path's alpha and beta. On a cluster, the messages of one step
share resources: each host's NIC (one egress and one ingress of the link's
bandwidth) and each rank's shared-memory endpoints (``model.network``). When
the messages of a step have the same size ``s`` and start together, max-min
sharing gives a message through a resource crossed by ``k`` of them at most
``C / k``, and the busiest resource is full until its last message is through,
so a step takes::

    t_step = max over messages m [ latency(m) + handoff(dst m)
                                   + s * max over resources r on m's path (k_r / C_r) ]

(``k_r`` counts each message through r once, and each message whose TCP
acknowledgements come back through r ``Link.ack_share`` times.)

plus the reduction of what it received (``gamma * bytes``). A collective is
the sum of its steps (``ring``: 2(P-1) identical ones; recursive doubling and
Rabenseifner: a fold, log2 rounds, an unfold; release/gather: tree levels;
gather/scatter: one step through the root's port; binomial broadcast: log2
rounds; NCCL's LL and LL128 protocols, ``ring_ll`` and ``ring_ll128``: the ring of
``n / share`` bytes at the protocol's latencies, ``fabric.FabricRoutes.ll_routes``; on one
host where the preset gives NCCL's kernel channels, the bytes its chunks move,
``choice.kernel_bytes``). With
every rank on its own host and one path this is exactly the
contention-free closed form; ``collectives`` sends the same messages one by
one, and the tests check that both agree.

Imports: libraries (gloo, mpich), simulator.model.comm.closed_forms, model.network (and, to
price a collective that leaves lock step, SimPy and model.comm.message).
"""
from __future__ import annotations

import math

from libraries.gloo import GLOO_RING_FRAMING_BYTES, gloo_ring_segments
from libraries.mpich import (
    RELEASE_GATHER_BCAST_RADIX,
    RELEASE_GATHER_REDUCE_RADIX,
    choose_allreduce,
    mpir_allreduce_choice,
)
from simulator.model.comm.choice import (
    LOW_LATENCY,
    kernel_bytes,
    low_latency,
    plateau_factor,
    protocol_share,
)
from simulator.model.comm.gloo import message_cpu_s
from simulator.model.comm.gloo_schedule import ring_alone_s
from simulator.model.network import LINK_KEYS, Routes, host_groups, host_index_groups


def collective_time_s(kind: str, ranks: tuple[int, ...], n_bytes: float, routes: Routes,
                      gamma_s_per_byte: float, algorithm: str = "ring", root: int = 0) -> float:
    """Time of one collective among ``ranks`` once all have arrived (no library extras);
    ``root`` is the index in ``ranks`` of a gather's, scatter's or broadcast's root."""
    if len(ranks) <= 1:
        return 0.0
    if kind == "allreduce":        # a core's ranks all in the call hand it over at once
        routes = routes.in_call(ranks)
    if kind == "allreduce" and algorithm in LOW_LATENCY:    # NCCL's LL or LL128 protocol
        share = protocol_share(routes, ranks, algorithm)
        n_kernel = kernel_bytes(routes, ranks, n_bytes, algorithm)
        return _ring_s(ranks, n_kernel / share, low_latency(routes, algorithm)[1],
                       gamma_s_per_byte * share)
    if kind == "allreduce":
        algorithm = choose_allreduce(algorithm, n_bytes, len(ranks), routes.hosts(ranks))
    if kind == "allreduce" and algorithm == "ring":
        return _ring_s(ranks, n_bytes, routes, gamma_s_per_byte) + plateau_s(ranks, n_bytes, routes)
    if kind == "allreduce" and algorithm == "tree":     # self-timed rounds: simulate them
        if len(ranks) > TREE_SIMULATED_UP_TO:
            return tree_rounds_s(ranks, n_bytes, routes)
        return simulated_alone_s(kind, ranks, n_bytes, routes, gamma_s_per_byte, algorithm, root)
    if kind == "allreduce" and algorithm == "gloo_ring_host":   # copied out, back in
        return (2 * routes.stage_s(n_bytes)
                + collective_time_s(kind, ranks, n_bytes, routes.host_routes, gamma_s_per_byte,
                                    "gloo_ring", root))
    if kind == "allreduce" and algorithm == "gloo_ring":  # two segments in flight
        if len(ranks) > GLOO_RING_SIMULATED_UP_TO:
            return gloo_ring_s(ranks, n_bytes, routes, gamma_s_per_byte)
        t = ring_alone_s(ranks, n_bytes, routes, gamma_s_per_byte)
        if t is not None:             # (exact where no link carries two hops)
            return t
        return simulated_alone_s(kind, ranks, n_bytes, routes, gamma_s_per_byte, algorithm, root)
    if kind == "allreduce" and algorithm == "smp":
        t = smp_alone_s(ranks, n_bytes, routes, gamma_s_per_byte)
        if t is not None:             # (where its hosts are alike and the roots in lock step)
            return t
    if kind == "allreduce" and algorithm in PRICED_ALONE:
        return simulated_alone_s(kind, ranks, n_bytes, routes, gamma_s_per_byte, algorithm, root)
    t = _lock_step_s(kind, ranks, n_bytes, routes, gamma_s_per_byte, algorithm, root)
    if t is None:                  # steps overlap: price the messages by simulating them
        return simulated_alone_s(kind, ranks, n_bytes, routes, gamma_s_per_byte, algorithm, root)
    return t


def plateau_s(ranks: tuple[int, ...], n_bytes: float, routes: Routes) -> float:
    """What NCCL's "plateau effect of ring" adds to a Simple ring allreduce: across hosts
    and from ``Hardware.ring_plateau_bytes`` per rank on, its latency is ``ring_plateau``
    times the closed form's (NCCL 2.7.3 to 2.26.2 ``src/graph/tuning.cc``,
    ``ncclTopoGetAlgoTime``: ``lat *= 1.9`` for a multi-node ring Simple allreduce of at
    least ``nRanks/16 * 64 KiB``; from 2.17 1.9 below compute capability 8.0 or 9.0 and
    1.4-1.5 above, from 2.18 from 64 bytes per rank and channel on), so the steps add
    ``(ring_plateau - 1) * 2 (P - 1) * max hop latency`` (the call's base latency, a few
    microseconds, is left as it is). 0 for other libraries, one host or fewer bytes
    (``choice.plateau_factor``)."""
    factor = plateau_factor(routes, ranks, n_bytes)
    if factor <= 1.0:
        return 0.0
    p = len(ranks)
    hop_s = max(routes.path(ranks[i], ranks[(i + 1) % p])[0] for i in range(p))
    return (factor - 1.0) * 2 * (p - 1) * hop_s


def in_lock_step(kind: str, ranks: tuple[int, ...], n_bytes: float, routes: Routes,
                 algorithm: str = "ring", root: int = 0) -> bool:
    """Whether every step of the collective runs in lock step on this placement, so that
    all ranks meet and leave together and a barrier plus the closed form is the message
    model (a ring always: its slowest hop paces every rank)."""
    if len(ranks) <= 1:
        return True
    if kind == "allreduce":
        algorithm = choose_allreduce(algorithm, n_bytes, len(ranks), routes.hosts(ranks))
        if algorithm == "ring":
            return True
        if algorithm in SELF_TIMED:  # priced alone, message by message: its ranks leave
            return True              # a little apart, and the next call waits for all
    return _lock_step_s(kind, ranks, n_bytes, routes, 0.0, algorithm, root) is not None


def _lock_step_s(kind, ranks, n_bytes, routes, gamma_s_per_byte, algorithm, root):
    """Per-rank clocks through the steps; None as soon as a step is not in lock step."""
    ready = dict.fromkeys(ranks, 0.0)
    last_end = 0.0
    buckets = StepBuckets.of(routes)
    for pairs, size, reduced, blocking in _steps(kind, algorithm, ranks, n_bytes, root, routes):
        last_end = _advance(ready, pairs, size, gamma_s_per_byte * reduced, blocking, routes,
                            last_end, buckets)
        if last_end is None:
            return None
    return max(ready.values())


def _ring_s(ranks, n_bytes: float, routes: Routes, gamma_s_per_byte: float) -> float:
    """2(P-1) identical steps; a rank moves on when its left neighbour's chunk is in, so
    the slowest hop sets every step's pace: ``2(P-1) * max hop + (P-1) * gamma * n / P``
    (on a shaped link the first hops take the buckets' bursts: step by step)."""
    p = len(ranks)
    pairs = tuple((ranks[i], ranks[(i + 1) % p]) for i in range(p))
    reduce_s = (p - 1) * gamma_s_per_byte * n_bytes / p
    buckets = StepBuckets.of(routes)
    if buckets is None:
        return 2 * (p - 1) * max(message_times_s(pairs, n_bytes / p, routes)) + reduce_s
    total = 0.0
    for step in range(2 * (p - 1)):       # the link idles while the first P-1 add up
        hop_s = max(message_times_s(pairs, n_bytes / p, routes, buckets))
        buckets.advance(hop_s + (reduce_s / (p - 1) if step < p - 1 else 0.0))
        total += hop_s
    return total + reduce_s


class StepBuckets:
    """A shaped link's token buckets (``network.TokenBuckets``) through the steps of one
    collective priced in closed form: full when the call starts (it follows compute,
    which idles the link longer than a burst takes to refill: 2-7 ms on the emulated
    cluster); a step that puts ``b`` bytes through a direction of capacity ``C`` whose
    bucket holds ``L`` keeps it busy ``max(0, b - L) / C`` and lets ``min(b, L)`` through
    at once; over the rest of the step the bucket refills at ``C``, up to its depth."""

    def __init__(self, depth_bytes: float):
        self.depth = depth_bytes
        self.level: dict[tuple, float] = {}
        self.capacity: dict[tuple, float] = {}
        self.pending: dict[tuple, float] = {}     # this step's bytes per direction

    @classmethod
    def of(cls, routes: Routes) -> StepBuckets | None:
        link = routes.link
        return cls(link.burst_bytes) if link is not None and link.burst_bytes > 0 else None

    def busy_s(self, key: tuple, capacity: float, n_bytes: float) -> float:
        """How long ``n_bytes`` keep the resource busy this step (and note them)."""
        if key[0] not in LINK_KEYS:
            return n_bytes / capacity
        self.capacity[key] = capacity
        self.pending[key] = n_bytes
        return max(0.0, n_bytes - self.level.get(key, self.depth)) / capacity

    def advance(self, step_s: float) -> None:
        """The step is over after ``step_s``: take its bytes, refill the idle time."""
        for key, capacity in self.capacity.items():
            level, sent = self.level.get(key, self.depth), self.pending.get(key, 0.0)
            idle_s = step_s - max(0.0, sent - level) / capacity
            self.level[key] = min(self.depth, max(0.0, level - sent) + capacity * idle_s)
        self.pending = {}


TREE_SIMULATED_UP_TO = 128      # ranks: larger trees are priced by their rounds
# allreduces of parts one after the other on sub-groups (MPICH's composition, Horovod's and
# Caffe2's hierarchies): priced by simulating their messages alone, as trees are
PRICED_ALONE = ("smp", "reduce_broadcast_mpi", "reduce_broadcast_gloo")
SELF_TIMED = ("tree", "gloo_ring", "gloo_ring_host") + PRICED_ALONE


def tree_rounds_s(ranks, n_bytes: float, routes: Routes) -> float:
    """NCCL's double binary tree on this placement, round by round, each round paced by
    its slowest message (``closed_forms.tree_rounds``). Exact where the rounds stay in
    lock step (a power of two of ranks with uniform paths); otherwise ranks run ahead of
    a round in the message model and this is an upper bound (within 10% in the tests).
    Used above ``TREE_SIMULATED_UP_TO`` ranks, where simulating every size is slow."""
    from simulator.model.comm.closed_forms import tree_chunks, tree_rounds
    k = tree_chunks(n_bytes)
    chunk = n_bytes / 2 / k
    total = 0.0
    for _kind, pairs in tree_rounds(host_index_groups(routes.placement, ranks), k):
        total += max(message_times_s(tuple((ranks[a], ranks[b]) for a, b in pairs), chunk,
                                     routes))
    return total


GLOO_RING_SIMULATED_UP_TO = 32     # ranks: larger gloo rings are priced by their pairs


def gloo_ring_s(ranks, n_bytes: float, routes: Routes, gamma_s_per_byte: float) -> float:
    """gloo's ring on this placement (``comm.gloo``): each phase sends its m segments a
    pair at a time, the pair's two flows on every hop at once, paced by the slowest hop;
    the reduce-scatter adds its reductions (``closed_forms.gloo_ring_allreduce_s``).
    Exact without reductions where every hop is alike; an upper bound otherwise (gloo
    reduces a segment while the next is in flight), and each rank's CPU for its sends and
    receives in a row (``gloo.message_cpu_s``). Used above ``GLOO_RING_SIMULATED_UP_TO``
    ranks."""
    p = len(ranks)
    per_rank, seg = gloo_ring_segments(p, n_bytes)
    m = (p - 1) * per_rank
    hops = tuple((ranks[i], ranks[(i - 1) % p]) for i in range(p))
    framed = seg + (GLOO_RING_FRAMING_BYTES if routes.hosts(ranks) > 1 else 0)
    pair_s = max(message_times_s(hops + hops, framed, routes))
    one_s = max(message_times_s(hops, framed, routes))
    phase_s = (m // 2) * pair_s + (m % 2) * one_s
    cpu_s = max(message_cpu_s(routes, a, b, p, seg) for a, b in hops)   # a send and a receive
    return 2 * (phase_s + 2 * m * cpu_s) + m * seg * gamma_s_per_byte


def message_times_s(pairs, size: float, routes: Routes,
                    buckets: StepBuckets | None = None) -> list[float]:
    """How long each message of one step takes when all of them move at once: its path's
    latency, the receiver's hand-off, and its bytes at the busiest resource's share (on a
    shaped link, less what its directions' ``buckets`` let through at once)."""
    load: dict = {}
    paths = []
    for src, dst in pairs:
        latency_s, resources = routes.path(src, dst)
        acks = routes.acks(src, dst)           # TCP's ACKs: a share of the reverse directions
        share = routes.link.ack_share if acks else 0.0
        paths.append((latency_s + routes.handoff_s[dst], resources + acks))
        for key, _capacity in resources:
            load[key] = load.get(key, 0) + 1
        for key, _capacity in acks:
            load[key] = load.get(key, 0) + share
    floor = 1.0 / routes.flow_cap if routes.flow_cap else 0.0     # a message's own cap
    if buckets is not None:
        busy = {key: buckets.busy_s(key, cap, load[key] * size)
                for _lat, resources in paths for key, cap in resources}
        return [latency_s + max(max((busy[key] for key, _cap in resources), default=0.0),
                                floor * size if resources else 0.0)
                for latency_s, resources in paths]
    return [latency_s + size * max(max((load[key] / cap for key, cap in resources),
                                       default=0.0), floor if resources else 0.0)
            for latency_s, resources in paths]


def _advance(ready: dict, pairs, size: float, reduce_s: float, blocking: bool,
             routes: Routes, last_end: float, buckets: StepBuckets | None = None
             ) -> float | None:
    """Per-rank clocks through one step: a message moves once its sender has it and its
    receiver is there (rendezvous); the receiver then adds it up; a blocking sender waits
    until it is delivered. Returns when the step's last message lands, or None if the
    step does not run in lock step (its messages start at different times, or before
    the previous step's have landed): then the loads it counted are not the real ones."""
    before = dict(ready)
    starts, end_s = set(), 0.0
    for (src, dst), took_s in zip(pairs, message_times_s(pairs, size, routes, buckets)):
        start = max(before[src], before[dst])
        starts.add(start)
        end = start + took_s
        end_s = max(end_s, end)
        ready[dst] = max(ready[dst], end + reduce_s)
        if blocking:
            ready[src] = max(ready[src], end)
    if len(starts) > 1 or (starts and min(starts) < last_end * (1 - 1e-12)):
        return None
    if buckets is not None and starts:
        buckets.advance(end_s + reduce_s - min(starts))   # the link idles while it adds up
    return end_s


def simulated_alone_s(kind: str, ranks, n_bytes: float, routes: Routes,
                      gamma_s_per_byte: float, algorithm: str, root: int) -> float:
    """The collective's messages over the simulated links, with nothing else in flight."""
    from simulator.model.comm import collectives

    run = {"allreduce": lambda c, i: collectives.ALLREDUCE[algorithm](c, ranks, i, n_bytes, 0),
           "gather": lambda c, i: collectives.gather(c, ranks, i, n_bytes, 0, root),
           "scatter": lambda c, i: collectives.scatter(c, ranks, i, n_bytes, 0, root),
           "bcast": lambda c, i: collectives.binomial_bcast(c, ranks, i, n_bytes, 0, root)}[kind]
    return _messages_s(len(ranks), run, routes, gamma_s_per_byte)


def _messages_s(count: int, run, routes: Routes, gamma_s_per_byte: float) -> float:
    """When the ``count`` generators ``run(comm, i)`` are done, each a rank's part sent
    message by message (``comm.message``) from time 0."""
    import simpy

    from contracts.profile import Transport
    from simulator.model.comm.message import MessageComm
    from simulator.model.recorder import Recorder

    env = simpy.Environment()
    shm = routes.shm
    comm = MessageComm(env, routes, Transport(shm.backend, shm.alpha_s, shm.beta_s_per_byte,
                                              gamma_s_per_byte), Recorder(routes.placement))
    for i in range(count):
        env.process(run(comm, i))
    env.run()
    return env.now


def smp_alone_s(ranks, n_bytes: float, routes: Routes, gamma_s_per_byte: float
                ) -> float | None:
    """MPICH's composed allreduce (``mpich.smp_allreduce``: a reduce on every host, an
    allreduce among the hosts' first ranks, a broadcast on every host) in three parts,
    where they follow one another on every host alike: hosts of CPUs (``Routes``, not a
    fabric's), as many ranks on every host, the same hand-offs on each
    (``Routes.handoff_s``), no bytes that cross before their receive (``eager_bytes``),
    no token buckets (``Link.burst_bytes``: the lock step meters them per step, the
    messages as they go), and the roots' allreduce in lock step (``_lock_step_s``; it
    starts on every host at once, the reduces being alike). The host parts use only their
    host's shared memory and the roots' part only the NICs, so one host's reduce and
    broadcast are simulated with the roots' part between them as its slowest root's time.
    Within 1e-9 relative of the whole call's messages (``simulated_alone_s``; the parts'
    floats round differently: ``tests/test_smp_alone.py``); None elsewhere."""
    from simulator.model.comm import mpich

    if type(routes) is not Routes:
        return None
    groups, even = host_groups(routes.placement, ranks)
    local = tuple(groups[0])
    if not even or len(groups) < 2 or len(local) < 2:
        return None
    link = routes.link
    if link is not None and (link.socket_buffer_bytes > 0 or link.burst_bytes > 0):
        return None
    if len({tuple(routes.handoff_s[r] for r in g) for g in groups}) > 1:
        return None
    roots = tuple(g[0] for g in groups)
    roots_s = _lock_step_s("allreduce", roots, n_bytes, routes, gamma_s_per_byte,
                           mpir_allreduce_choice(n_bytes, len(roots)), 0)
    if roots_s is None:
        return None

    def host(comm, i):
        yield from mpich.mpir_reduce(comm, local, i, n_bytes, ("smp", "reduce"))
        if i == 0:
            yield comm.env.timeout(roots_s)        # the roots' allreduce
        yield from mpich.mpir_bcast(comm, local, i, n_bytes, ("smp", "bcast"))
    return _messages_s(len(local), host, routes, gamma_s_per_byte)


def _steps(kind: str, algorithm: str, ranks, n: float, root: int = 0, routes=None):
    """(pairs, bytes per message, bytes each receiver reduces, senders block) per step,
    as ``collectives`` sends them."""
    p = len(ranks)
    if kind == "allreduce":
        if algorithm == "release_gather":
            return _release_gather(ranks, n)
        if algorithm == "hierarchical":
            return _hierarchical(ranks, n, routes)
        return _power_of_two(ranks, n, algorithm)
    ranks = tuple(ranks[root:]) + tuple(ranks[:root])     # the root first
    root = ranks[0]
    if kind == "gather":
        return [(tuple((r, root) for r in ranks[1:]), n, 0.0, True)]
    if kind == "scatter":
        return [(tuple((root, r) for r in ranks[1:]), n, 0.0, True)]
    if kind == "bcast":
        rounds, mask = [], 1 << (math.ceil(math.log2(p)) - 1)
        while mask >= 1:                   # binomial tree from index 0, largest distance first
            pairs = tuple((ranks[i], ranks[i + mask]) for i in range(0, p, 2 * mask)
                          if i + mask < p)
            rounds.append((pairs, n, 0.0, True))
            mask >>= 1
        return rounds
    raise ValueError(f"unknown collective {kind!r}")


def _power_of_two(ranks, n: float, algorithm: str):
    """Recursive doubling or Rabenseifner, with MPICH's fold for P not a power of two, as
    ``mpich`` sends them."""
    p = len(ranks)
    q = 1 << (p.bit_length() - 1)
    rem = p - q
    member = [ranks[2 * j + 1] if j < rem else ranks[j + rem] for j in range(q)]
    fold = tuple((ranks[i], ranks[i + 1]) for i in range(0, 2 * rem, 2))
    steps = [(fold, n, n, True)] if rem else []
    masks = [1 << k for k in range(q.bit_length() - 1)]
    exchange = lambda mask: tuple((member[j], member[j ^ mask]) for j in range(q))  # noqa: E731
    if algorithm == "recursive_doubling":
        steps += [(exchange(mask), n, n, False) for mask in masks]
    else:                                  # halving from the nearest, doubling back
        size = n
        for mask in masks:
            size /= 2
            steps.append((exchange(mask), size, size, False))
        for mask in reversed(masks):
            steps.append((exchange(mask), size, 0.0, False))
            size *= 2
    if rem:
        steps.append((tuple((b, a) for a, b in fold), n, 0.0, True))
    return steps


def _hierarchical(ranks, n: float, routes: Routes):
    """Rings inside every host at once (reduce-scatter), rings across hosts of the ranks
    with the same place on their hosts at once (allreduce of n / L), rings inside every
    host again (allgather)."""
    groups, even = host_groups(routes.placement, ranks)
    if not even:
        raise ValueError("hierarchical allreduce needs as many ranks on every host")
    local, hosts = len(groups[0]), len(groups)
    inside = tuple((g[i], g[(i + 1) % local]) for g in groups for i in range(local))
    across = [[g[i] for g in groups] for i in range(local)]
    ring = tuple((a[j], a[(j + 1) % hosts]) for a in across for j in range(hosts))
    part = n / local
    steps = [(inside, part, part, False)] * (local - 1) if local > 1 else []
    if hosts > 1:
        steps += [(ring, part / hosts, part / hosts, False)] * (hosts - 1)
        steps += [(ring, part / hosts, 0.0, False)] * (hosts - 1)
    steps += [(inside, part, 0.0, False)] * (local - 1) if local > 1 else []
    return steps


def _release_gather(ranks, n: float):
    """Reduce up a radix-4 tree, level by level from the leaves; release down a radix-64 one."""
    p, kr, kb = len(ranks), RELEASE_GATHER_REDUCE_RADIX, RELEASE_GATHER_BCAST_RADIX
    steps = []
    for level in reversed(_levels(p, kr)):
        pairs = tuple((ranks[c], ranks[(c - 1) // kr]) for c in level)
        children = max(sum(1 for c in level if (c - 1) // kr == parent)
                       for parent in {(c - 1) // kr for c in level})
        steps.append((pairs, n, children * n, False))
    for level in _levels(p, kb):
        steps.append((tuple((ranks[(c - 1) // kb], ranks[c]) for c in level), n, 0.0, True))
    return steps


def _levels(p: int, k: int) -> list[list[int]]:
    """Indices of a k-ary tree of p ranks by depth (root excluded): [[1..k], [k+1..], ...]."""
    levels, first, width = [], 1, k
    while first < p:
        levels.append(list(range(first, min(p, first + width))))
        first, width = first + width, width * k
    return levels
