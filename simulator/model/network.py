"""Links and messages between ranks.

Between hosts: each host has one full-duplex NIC (an egress and an ingress
resource of ``bandwidth_bytes_per_s`` each) on a non-blocking switch; a message
from host a to host b is a flow over ``a.out`` and ``b.in``, followed by the
link latency (propagation, like SimPy's ``Cable``)::

    t_msg(n) = latency_s + n / bandwidth_bytes_per_s          (alone on the link)

Inside a host: shared memory with the profile's transport of the backend; each
process has its own copy endpoint (``out`` and ``in`` of ``1 / beta_s_per_byte``
bytes/s), so a ring is contention free while a root receiving from many is not::

    t_msg(n) = alpha_s + beta_s_per_byte * n                  (alone on the endpoint)

A shaped link (``Link.burst_bytes``: the emulated cluster's tc token buckets) lets the
first bytes of a message through at once when its directions idled (``TokenBuckets``)::

    t_msg(n) = latency_s + max(0, n - level) / bandwidth_bytes_per_s,
    level = min(burst_bytes, bandwidth_bytes_per_s * idle_s)     (alone, each direction)

Messages that share a resource share its capacity max-min fairly (``fluid``):
an incast at a server and a congested NIC slow down by themselves. A message
to a rank on an oversubscribed host also waits for the receiver's turn on a
core (``handoff_s`` per rank, from ``timeslice``), added to its latency.

Imports: SimPy, contracts (cluster, profile), model.fluid.
"""
from __future__ import annotations

import copy
import functools
import math

import simpy

from contracts.cluster import Link
from contracts.profile import Transport
from simulator.model.fluid import FluidShare, Resource


class Routes:
    """Who is where and what a message between two ranks costs when nothing contends."""

    flow_cap = 0.0      # bytes/s one message may use at most (0: no cap; ``model.fabric``)
    hardware = None     # accelerators, NICs, NCCL (``model.fabric``)
    ll_routes = None    # the routes of NCCL's LL protocol (``model.fabric``)
    ll128_routes = None  # and of its LL128 protocol

    def __init__(self, placement: tuple[int, ...], link: Link | None, shm: Transport,
                 handoff_s: tuple[float, ...] | None = None,
                 pools: tuple[int, ...] | None = None):
        self.placement = placement
        self.link = link
        self.shm = shm
        self.handoff_s = handoff_s or (0.0,) * len(placement)    # per receiving rank
        self.pools = pools           # per rank, the pool of cores it runs on (None: unknown)
        self._in_call: dict = {}

    def in_call(self, ranks: tuple[int, ...]) -> Routes:
        """These routes inside one allreduce of ``ranks``: a receiver whose core-mates are
        all ranks of the call on its own host waits for no turn on its core. MPICH's wait
        loop yields the core at every turn under ``MPI_THREAD_MULTIPLE`` (mpi4py's level:
        ``MPID_Progress_wait`` calls ``MPID_THREAD_CS_YIELD``, which calls ``sched_yield``
        when threads are on), so a core's ranks that all wait in the call hand it to each
        other at once. A core-mate outside the call (computing, a server's loop) still
        holds the core for its quantum (``timeslice``), and so does every rank of a call
        that spans hosts (measured on one host only; the emulated cluster's hosts share
        their cores, and its validations measured the wait). Remembered by the group's id."""
        if self.pools is None or not any(self.handoff_s[r] for r in ranks):
            return self
        hit = self._in_call.get(id(ranks))
        if hit is not None and hit[0] is ranks:
            return hit[1]
        members = set(ranks)
        held: set = set()           # pools with a rank outside the call, or the call spans hosts
        for r, pool in enumerate(self.pools):
            if r not in members or self.placement[r] != self.placement[ranks[0]]:
                held.add(pool)
        view = copy.copy(self)
        view._in_call = {}
        view.handoff_s = tuple(0.0 if r in members and self.pools[r] not in held else h
                               for r, h in enumerate(self.handoff_s))
        self._in_call[id(ranks)] = (ranks, view)
        return view

    def crosses(self, src: int, dst: int) -> bool:
        """A message src -> dst goes over the link: the two ranks are on different hosts
        and the cluster has one."""
        return self.link is not None and self.placement[src] != self.placement[dst]

    def params(self, src: int, dst: int) -> tuple[float, float]:
        """(alpha_s, beta_s_per_byte) of the path src -> dst."""
        if self.placement[src] == self.placement[dst] or self.link is None:
            return self.shm.alpha_s + self.handoff_s[dst], self.shm.beta_s_per_byte
        return self.link.latency_s + self.handoff_s[dst], 1.0 / self.link.bandwidth_bytes_per_s

    def path(self, src: int, dst: int) -> tuple[float, tuple[tuple[tuple, float], ...]]:
        """(latency_s, resources) of a message src -> dst: between hosts the link's latency
        and the two hosts' NIC directions; inside a host the transport's alpha and the two
        ranks' shared-memory endpoints. A resource is (key, capacity in bytes/s)."""
        hs, hd = self.placement[src], self.placement[dst]
        if hs != hd and self.link is not None:
            bw = self.link.bandwidth_bytes_per_s
            return self.link.latency_s, ((("nic_out", hs), bw), (("nic_in", hd), bw))
        if self.shm.beta_s_per_byte <= 0:
            return self.shm.alpha_s, ()
        bw = 1.0 / self.shm.beta_s_per_byte
        return self.shm.alpha_s, ((("shm_out", src), bw), (("shm_in", dst), bw))

    def acks(self, src: int, dst: int) -> tuple[tuple[tuple, float], ...]:
        """The resources the ACKs of a message src -> dst load, at ``Link.ack_share`` of
        its rate: the reverse directions of the two hosts' NICs (none in shared memory)."""
        hs, hd = self.placement[src], self.placement[dst]
        if hs == hd or self.link is None or self.link.ack_share <= 0:
            return ()
        bw = self.link.bandwidth_bytes_per_s
        return ((("nic_out", hd), bw), (("nic_in", hs), bw))

    def eager_bytes(self, src: int, dst: int) -> float:
        """How much of a message src -> dst crosses before its receive is posted: the
        kernel's socket buffers between hosts (``Link.socket_buffer_bytes``); none in
        shared memory."""
        if self.link is None or self.placement[src] == self.placement[dst]:
            return 0.0
        return self.link.socket_buffer_bytes

    @property
    def host_routes(self) -> Routes:
        """These routes as a library on the hosts' CPUs sends (gloo over TCP): here the
        same (``model.fabric`` leaves the devices' links out)."""
        return self

    def stage_s(self, n_bytes: float) -> float:
        """A device's copy of ``n_bytes`` to or from host memory: none without devices."""
        return 0.0

    def hosts(self, ranks: tuple[int, ...]) -> int:
        """How many hosts ``ranks`` live on (MPICH's choice of allreduce reads it)."""
        return len({self.placement[r] for r in ranks})

    def one_host(self, ranks: tuple[int, ...]) -> bool:
        """Whether ``ranks`` all live on one host (MPI then reduces in shared memory)."""
        return len({self.placement[r] for r in ranks}) <= 1

    def group_params(self, ranks: tuple[int, ...]) -> tuple[float, float]:
        """The slowest path's (alpha, beta) when ``ranks`` talk among themselves."""
        wait_s = max(self.handoff_s[r] for r in ranks)
        if self.one_host(ranks) or self.link is None:
            return self.shm.alpha_s + wait_s, self.shm.beta_s_per_byte
        a, b = self.link.latency_s, 1.0 / self.link.bandwidth_bytes_per_s
        return max(a, self.shm.alpha_s) + wait_s, max(b, self.shm.beta_s_per_byte)


def nccl_order(placement, ranks) -> tuple[int, ...]:
    """``ranks`` in the order NCCL's rings run: host by host, hosts by their first rank
    (``comm->node``), each host's ranks in order (``ncclTopoPreset`` and
    ``ncclTopoPostset`` in NCCL's ``src/graph/connect.cc``: a ring's ``ringIntra`` of
    every node, the last of one node sending to the first of the next)."""
    return tuple(r for g in host_groups(placement, ranks)[0] for r in g)


def host_index_groups(placement, ranks) -> tuple[tuple[int, ...], ...]:
    """``host_groups`` by index in ``ranks``: each host's indices, hosts by first rank."""
    where = {r: i for i, r in enumerate(ranks)}
    return tuple(tuple(where[r] for r in g) for g in host_groups(placement, ranks)[0])


def host_groups(placement, ranks) -> tuple[list[list[int]], bool]:
    """Ranks by host, in rank order, and whether every host holds as many."""
    by_host: dict[int, list[int]] = {}
    for r in ranks:
        by_host.setdefault(placement[r], []).append(r)
    groups = list(by_host.values())
    return groups, len({len(g) for g in groups}) == 1


def host_and_roots(placement, ranks, i) -> tuple[list[int], list[int]]:
    """The ranks on the host of ``ranks[i]`` (in rank order) and each host's first rank
    (hosts by first rank): the two groups of a hierarchical collective. Every rank of a
    call asks: the groups are made once a call (``_hosts_of``), not once a rank."""
    group_of, roots = _hosts_of(tuple(placement), tuple(ranks))
    return group_of[ranks[i]], roots


@functools.lru_cache(maxsize=64)
def _hosts_of(placement: tuple, ranks: tuple) -> tuple[dict[int, list[int]], list[int]]:
    """Each rank's host group (``host_groups``) and the groups' first ranks."""
    groups, _ = host_groups(placement, ranks)
    return {r: g for g in groups for r in g}, [g[0] for g in groups]


LINK_KEYS = ("nic_out", "nic_in")    # the resources a shaped link's token buckets meter


class TokenBuckets:
    """The token buckets of a shaped link's directions (tc ``tbf``, ``Link.burst_bytes``
    deep): a direction that carries no message refills at its rate up to the depth; one
    that carries messages is taken to send at its rate, tokens in as fast as they go out.
    A message takes at once the least level of its path's directions (at most its own
    size) from each of them; the rest moves at the rate. Two shapers in a row (the
    sender's port out, the receiver's in) pass the burst once, as tbf does."""

    def __init__(self, depth_bytes: float):
        self.depth = depth_bytes
        self.level: dict[tuple, float] = {}     # key -> bytes when last set
        self.since: dict[tuple, float] = {}     # key -> when it was last set
        self.busy: dict[tuple, int] = {}        # key -> messages at the rate on it now

    def _now(self, key: tuple, capacity: float, now: float) -> float:
        level = self.level.get(key, self.depth)
        if self.busy.get(key, 0):
            return level
        return min(self.depth, level + capacity * (now - self.since.get(key, now)))

    def take(self, keys: tuple, n_bytes: float, now: float) -> float:
        """The bytes of a message of ``n_bytes`` over ``keys`` ((key, capacity) of its
        link directions) that cross at once; takes them from every direction's bucket."""
        if not keys:
            return 0.0
        levels = [self._now(k, c, now) for k, c in keys]
        free = min(n_bytes, *levels)
        for (k, _c), level in zip(keys, levels):
            self.level[k], self.since[k] = level - free, now
        return free

    def start(self, keys: tuple) -> None:
        for k, _c in keys:
            self.busy[k] = self.busy.get(k, 0) + 1

    def end(self, keys: tuple, now: float) -> None:
        for k, _c in keys:
            self.busy[k] -= 1
            if not self.busy[k]:
                self.since[k] = now          # idle from here: refills at the rate


class Network:
    """Point-to-point messages as flows over NICs and shared-memory endpoints."""

    def __init__(self, env: simpy.Environment, routes: Routes):
        self.env = env
        self.routes = routes
        self._fluid = FluidShare(env)
        self._resources: dict[tuple, Resource] = {}
        self._paths: dict[tuple, tuple] = {}     # (src, dst) -> _route(src, dst)
        self.bytes_sent = [0.0] * len(routes.placement)
        burst = routes.link.burst_bytes if routes.link is not None else 0.0
        self._buckets = TokenBuckets(burst) if burst > 0 else None

    def over(self, routes: Routes) -> Network:
        """This network (its flows and resources) with messages taking ``routes``'
        latencies: NCCL's LL protocol on the same NICs and links."""
        other = copy.copy(self)
        other.routes, other._paths = routes, {}
        return other

    def _resource(self, key: tuple, capacity: float) -> Resource:
        r = self._resources.get(key)
        if r is None:
            r = self._resources[key] = Resource(f"{key[0]}{key[1]}", capacity)
        return r

    def _route(self, src: int, dst: int) -> tuple[float, tuple, tuple | None, tuple]:
        """(latency_s, resources, weights, metered) of a message: its path, then the reverse
        directions TCP's ACKs load, at ``ack_share`` of a payload byte (None: no ACKs), and
        the link directions on its path a token bucket meters ((key, capacity))."""
        latency_s, path = self.routes.path(src, dst)
        acks = self.routes.acks(src, dst)
        weights = ((1.0,) * len(path) + (self.routes.link.ack_share,) * len(acks)
                   if acks else None)
        metered = tuple((k, c) for k, c in path if k[0] in LINK_KEYS) if self._buckets else ()
        return (latency_s + self.routes.handoff_s[dst],
                tuple(self._resource(k, c) for k, c in path + acks), weights, metered)

    def transfer(self, src: int, dst: int, n_bytes: float):
        """Event that fires when ``n_bytes`` from ``src`` have arrived at ``dst``."""
        env = self.env
        delivered = env.event()
        if src == dst:
            return delivered.succeed()
        self.bytes_sent[src] += n_bytes
        route = self._paths.get((src, dst))
        if route is None:                  # (the routes do not change: once per pair)
            route = self._paths[src, dst] = self._route(src, dst)
        latency_s, path, weights, metered = route
        if metered:
            n_bytes -= self._buckets.take(metered, n_bytes, env.now)
        def propagate(_ev):       # ``delivered`` succeeds the latency later, as a timeout does
            delivered._ok, delivered._value = True, None         # noqa: SLF001
            env.schedule(delivered, delay=latency_s)

        if path and n_bytes > 0:
            if metered:
                self._buckets.start(metered)

                def sent(_ev):
                    self._buckets.end(metered, env.now)
                    propagate(_ev)
            else:
                sent = propagate
            self._fluid.transfer(n_bytes, path, self.routes.flow_cap or math.inf, weights, sent)
        else:
            env.timeout(0).callbacks.append(propagate)
        return delivered
