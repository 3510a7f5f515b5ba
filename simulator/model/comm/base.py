"""Communication: one small interface, two fidelities behind it (this module: the interface).

``transfer(src, dst, n_bytes)`` moves one message and returns the event of its
arrival; ``allreduce``, ``gather``, ``scatter`` and ``bcast`` are generators
that one rank of the group runs (``yield from comm.allreduce(rank, ranks, n)``).
The fidelities are ``comm.analytic`` (a barrier, then the closed form) and
``comm.message`` (every message of the algorithm over the simulated network);
``make_comm`` in the package picks one.

Both account each collective the same way: a rank that arrives before the
last one *waits* until it arrives; the rest of its time in the call is *comm*,
including the library's own latency per step beyond the transport's alpha
(``Transport.collective_alpha_s``) times the algorithm's steps, and its
latency per call (``Transport.call_latency_s``, NCCL's base latency).

Ranks that sleep while they wait (gloo; ``hosts`` set) still spend
``Transport.cpu_fraction`` of a call's contention-free time on a core: once
all have arrived, each rank's share is a job on its host, and the call is not
over before the last of those jobs is, so on an oversubscribed host the
call stretches to ``max(its time, cpu / speed)``. Leaving the call, such a
rank needs a core again: while every core of its host computes it waits for
the scheduler (``CoreHost.wake``).

Imports: SimPy, ``contracts``, ``libraries.gloo``, ``model.comm.iallreduce``, ``model.network``,
``model.recorder``.
"""

from __future__ import annotations

import functools

import simpy

from libraries.gloo import gloo_ring_sent_segments
from simulator.model.comm.closed_forms import collective_s, steps
from contracts.profile import Transport
from simulator.model.comm.choice import call_latency_s, ranks_per_host, resolve_algorithm
from simulator.model.comm.iallreduce import polled, sent_bytes, shared_leave_s
from simulator.model.network import Routes, nccl_order
from simulator.model.recorder import Recorder


class _Group:
    """A group of ranks that call collectives together: each rank's index and count of
    calls so far, and the calls some of its ranks are in now (by their number)."""
    __slots__ = ("calls", "index", "ranks", "seq")

    def __init__(self, ranks: tuple):
        self.ranks = ranks                  # (kept alive: the group is known by its id)
        self.index = {r: i for i, r in enumerate(ranks)}
        self.seq = [0] * len(ranks)
        self.calls: dict[int, _Call] = {}


class _Call:
    """One collective call while its ranks are in it."""
    __slots__ = ("arrived", "cpu_done", "extra_s", "last_at", "leaving", "left")

    def __init__(self, cpu_done: simpy.Event, extra_s: float):
        self.extra_s = extra_s              # the library's own latency in the call
        self.arrived = 0                    # ranks that have arrived
        self.last_at = 0.0                  # when the last of them arrived
        self.left = 0                       # ranks that have left
        self.cpu_done = cpu_done            # the ranks' CPU for the call is done
        self.leaving: list[tuple] = []      # (together) (rank, event it waits on), in turn


class _PolledCall:
    """One ``iallreduce`` in sleeping polls while its ranks are in it."""
    __slots__ = ("arrivals", "arrived", "done", "last_at", "leaves", "left")

    def __init__(self, done: simpy.Event, p: int):
        self.arrivals = [0.0] * p           # when each rank (by index) came in
        self.arrived = 0
        self.left = 0
        self.last_at = 0.0
        self.leaves: list[float] = []       # when each leaves (``leave_s``)
        self.done = done                    # the last rank is in: ``leaves`` known


class Comm:
    together = False    # whether a call's ranks leave its messages at one instant, one
                        # after the other (the analytic barrier): ``_leave_together``

    def __init__(self, env: simpy.Environment, routes: Routes, transport: Transport,
                 recorder: Recorder):
        self.env = env
        self.routes = routes
        self.gamma_s_per_byte = transport.gamma_s_per_byte
        self.transport = transport
        self.recorder = recorder
        self._groups: dict[int, _Group] = {}
        self.hosts: dict | None = None      # rank -> Host, for the CPU of sleeping ranks' calls
        self._chosen: dict[tuple, str] = {}  # (group, bytes, asked) -> the algorithm run
        self._cpu_cache: dict[tuple, float] = {}     # call_cpu_s by call
        self._extra_cache: dict[tuple, float] = {}   # the library's own latency by call
        self._by_host: dict[int, tuple] = {}  # group id -> its ranks in NCCL's order
        self._keep: list = []                 # (the groups known by their id)

    # ------------------------------------------------------------- the interface
    # (each returns the generator of ``_collective``: one frame less to pass every event)
    def allreduce(self, rank, ranks, n_bytes, algorithm="ring", record=True):
        if self.transport.backend == "nccl":      # NCCL's rings and trees go host by host
            ranks = self._by_host.get(id(ranks)) or self._order_by_host(ranks)
        key = (id(ranks), n_bytes, algorithm)
        chosen = self._chosen.get(key)
        if chosen is None:
            chosen = self._chosen[key] = resolve_algorithm(self.transport.backend, algorithm,
                                                           ranks, n_bytes, self.routes)
        return self._collective("allreduce", rank, ranks, n_bytes, 0, chosen, record)

    def iallreduce(self, rank, ranks, n_bytes, algorithm="ring", record=True):
        """psgd's average: ``MPI_Iallreduce`` waited in ``real.launch.dist.wait``. Where an
        MPI rank sleeps between polls (``Transport.poll_s``) its rounds advance at the
        ranks' polls (``comm.iallreduce``), each rank leaving at its own; else it costs
        what ``allreduce`` does."""
        if not polled(self.transport):
            return self.allreduce(rank, ranks, n_bytes, algorithm, record)
        return self._polled(rank, ranks if isinstance(ranks, tuple) else tuple(ranks), n_bytes,
                            record)

    def gather(self, rank, ranks, n_bytes, root=0, record=True):
        return self._collective("gather", rank, ranks, n_bytes, root, "-", record)

    def scatter(self, rank, ranks, n_bytes, root=0, record=True):
        return self._collective("scatter", rank, ranks, n_bytes, root, "-", record)

    def bcast(self, rank, ranks, n_bytes, root=0, record=True):
        return self._collective("bcast", rank, ranks, n_bytes, root, "binomial", record)

    def transfer(self, src: int, dst: int, n_bytes: float):
        raise NotImplementedError

    def leg(self, src: int, dst: int, n_bytes: float):
        """Event: ``n_bytes`` from ``src`` have arrived at ``dst``, sent as they are, with no
        rendezvous handshake around them (``transfer`` adds one above the eager limit):
        one leg of a protocol, or a message its transport takes whole (its latency includes
        the receiver's wait for its turn on a core, ``Routes.handoff_s``)."""
        raise NotImplementedError

    def _order_by_host(self, ranks) -> tuple:
        """``ranks`` in NCCL's order (``nccl_order``), remembered by the group's id (the
        group is kept alive with it)."""
        ordered = nccl_order(self.routes.placement, tuple(ranks))
        self._by_host[id(ranks)] = ordered
        self._by_host[id(ordered)] = ordered
        self._keep.append(ranks)
        return ordered

    def _rendezvous_s(self, dst: int, n_bytes: float) -> float:
        """A point-to-point message above the eager limit is a rendezvous: request to send,
        clear to send, data; each leg waits for its receiver's turn on a core (``timeslice``),
        where an eager message waits once (that wait is in the route's alpha)."""
        eager = self.transport.eager_max_bytes
        if eager <= 0 or n_bytes <= eager:
            return 0.0
        return (RENDEZVOUS_LEGS - 1) * self.routes.handoff_s[dst]

    def stage(self, n_bytes: float):
        """A device's copy of ``n_bytes`` to or from host memory (``Routes.stage_s``)."""
        return self.env.timeout(self.routes.stage_s(n_bytes))

    def on_host(self):
        """This comm with the routes of a library on the hosts' CPUs (``Routes.host_routes``)."""
        return self

    def reduce(self, n_bytes: float):
        """The cost of adding ``n_bytes`` into a buffer: gamma_s_per_byte * n_bytes."""
        return self.env.timeout(self.gamma_s_per_byte * n_bytes)

    # ------------------------------------------------------------- bookkeeping
    def _collective(self, kind, rank, ranks, n_bytes, root, algorithm, record):
        if not isinstance(ranks, tuple):
            ranks = tuple(ranks)
        p = len(ranks)
        if p == 1:
            return
        env = self.env
        group, i, seq, call = self._join(rank, ranks, lambda: _Call(
            env.event(), self._extra_s(kind, ranks, n_bytes, algorithm)))
        arrived_at = env.now
        hosts = self.hosts
        if hosts:
            hosts[rank].sleep(rank)
        call.arrived += 1
        call.last_at = arrived_at
        is_last = call.arrived == p
        if is_last:
            self._start_cpu(kind, ranks, n_bytes, root, algorithm, call.cpu_done)
        if self.together:             # the call moves it on (``_leave_together``)
            leave = env.event()
            call.leaving.append((rank, leave))
            self._meet(call, kind, ranks, n_bytes, algorithm, root, is_last)
            yield leave
        else:
            yield from self._run(kind, rank, ranks, i, n_bytes, root, algorithm,
                                 (id(ranks), seq), is_last)
            if call.extra_s > 0:
                yield env.timeout(call.extra_s)
            if hosts and call.cpu_done.callbacks is not None and self.transport.cpu_fraction > 0:
                yield call.cpu_done      # its ranks' CPU (a gather's sender leaves at once else)
            # it slept: back on a core (a gather's sender goes on to sleep in its next call)
            if hosts and (kind != "gather" or rank == ranks[root]):
                yield hosts[rank].wake(rank)
        # a rank that leaves before everyone arrived (a gather's sender) waited for no one
        last = call.last_at if call.arrived == p else arrived_at
        call.left += 1
        if call.left == p:
            del group.calls[seq]
        if record:
            now = env.now
            waited_until = min(last, now)
            self.recorder.add(rank, "wait", arrived_at, waited_until, kind)
            self.recorder.add(rank, "comm", waited_until, now, kind)

    def _join(self, rank, ranks: tuple, new_call):
        """(group, rank's index, call number, call) of ``rank``'s next call in ``ranks``'
        group, the call made by ``new_call()`` if it is the first one in."""
        # groups are long-lived tuples, known by their id (hashing them is O(P))
        group = self._groups.get(id(ranks))
        if group is None:
            group = self._groups[id(ranks)] = _Group(ranks)
        i = group.index[rank]
        seq = group.seq[i]
        group.seq[i] = seq + 1
        call = group.calls.get(seq)
        if call is None:
            call = group.calls[seq] = new_call()
        return group, i, seq, call

    def _polled(self, rank, ranks, n_bytes, record):
        """``iallreduce`` in sleeping polls: once the last rank is in, ``shared_leave_s`` from
        every rank's arrival (messages that cross one direction at once share it); a rank
        waits until the last is in, and the rest of its time in the call is comm."""
        if len(ranks) == 1:
            return
        env = self.env
        group, i, seq, call = self._join(rank, ranks,
                                         lambda: _PolledCall(env.event(), len(ranks)))
        arrived_at = env.now
        call.arrivals[i] = arrived_at
        call.arrived += 1
        if call.arrived == len(ranks):
            call.last_at = arrived_at
            call.leaves = shared_leave_s(call.arrivals, self.transport.poll_s, n_bytes,
                                         self.routes, ranks,
                                         reduce_s_per_byte=self.gamma_s_per_byte)
            if hasattr(self, "network"):          # (the message fidelity counts bytes)
                for r, sent in zip(ranks, sent_bytes(len(ranks), n_bytes)):
                    self.network.bytes_sent[r] += sent
            call.done.succeed()
        yield call.done
        yield env.timeout(call.leaves[i] - env.now)
        call.left += 1
        if call.left == len(ranks):
            del group.calls[seq]
        if record:
            self.recorder.add(rank, "wait", arrived_at, call.last_at, "allreduce")
            self.recorder.add(rank, "comm", call.last_at, env.now, "allreduce")

    def _leave_together(self, call, kind, ranks, root, event) -> None:
        """The ranks of a call leave it together (``event``: the end of its messages), in
        the order they arrived, each as the other fidelity's ranks leave theirs: after the
        library's latency, the ranks' CPU for the call, and (a sleeper) its wake. Done
        here for all at once, at the instants and in the order each rank's process
        would do it, with one timer for the latency: each process is resumed once, when
        the call is over for it, not at every step of leaving."""
        if call.extra_s > 0:
            self.env.timeout(call.extra_s).callbacks.append(
                lambda ev: self._after_latency(call, kind, ranks, root, ev))
        else:
            self._after_latency(call, kind, ranks, root, event)

    def _after_latency(self, call, kind, ranks, root, event) -> None:
        cpu = self.hosts and self.transport.cpu_fraction > 0
        for rank, leave in call.leaving:
            if cpu and call.cpu_done.callbacks is not None:      # its CPU is not done yet
                call.cpu_done.callbacks.append(
                    functools.partial(self._release, rank, leave, kind, ranks, root))
            else:
                self._release(rank, leave, kind, ranks, root, event)

    def _release(self, rank, leave, kind, ranks, root, event) -> None:
        """``rank``'s process goes on: once it is back on a core if it slept (a gather's
        sender goes on to sleep in its next call), else now, as if ``event`` had resumed
        it (its callbacks are its process's resumption)."""
        if self.hosts and (kind != "gather" or rank == ranks[root]):
            self.hosts[rank].wake(rank).callbacks.extend(leave.callbacks)
        else:
            for resume in leave.callbacks:
                resume(event)

    def _extra_s(self, kind, ranks, n_bytes, algorithm) -> float:
        """The library's own latency in a call: per step beyond the transport's alpha
        times the algorithm's steps, and per call (NCCL's base latency); remembered."""
        key = (kind, id(ranks), n_bytes, algorithm)
        extra_s = self._extra_cache.get(key)
        if extra_s is None:
            extra_s = self.transport.step_extra_s(kind)
            if extra_s > 0:
                extra_s *= steps(kind, len(ranks), n_bytes, algorithm,
                                 ranks_per_host(self.routes, ranks))
            extra_s += call_latency_s(self.transport, self.routes, algorithm)
            self._extra_cache[key] = extra_s
        return extra_s

    def _sleeps_on_cpu(self) -> bool:
        return bool(self.hosts) and self.transport.cpu_fraction > 0

    def _start_cpu(self, kind, ranks, n_bytes, root, algorithm, done: simpy.Event) -> None:
        """Every rank's CPU for this call as a job on its host; ``done`` when all are over.
        The jobs are handed to each host at once (``compute_wakes``), the hosts in the
        order of their last rank: where each host's one live timer is set, as one
        ``compute`` per rank would set it."""
        if not self._sleeps_on_cpu():
            done.succeed()
            return
        left = [len(ranks)]

        def one_done(_ev):
            left[0] -= 1
            if left[0] == 0:
                done.succeed()
        jobs: dict = {}
        for i, r in enumerate(ranks):
            cpu_s = self._cpu_s(kind, ranks, n_bytes, algorithm, i == root)
            if cpu_s <= 0:                       # (ends at once: keep the per-rank order)
                for j, q in enumerate(ranks):
                    self.hosts[q].compute(self._cpu_s(kind, ranks, n_bytes, algorithm,
                                                      j == root),
                                          proc=q, wakes=True).callbacks.append(one_done)
                return
            host = self.hosts[r]
            jobs.setdefault(host, []).append((r, cpu_s))
            jobs[host] = jobs.pop(host)          # (a dict keeps the order of the last rank)
        for host, host_jobs in jobs.items():
            host.compute_wakes(host_jobs, one_done)

    def _cpu_s(self, kind, ranks, n_bytes, algorithm, is_root) -> float:
        """``call_cpu_s``, remembered: the same call costs the same every iteration. A
        call whose ranks span hosts over a link whose CPU was measured costs that."""
        key = (kind, id(ranks), n_bytes, algorithm, is_root)
        cpu_s = self._cpu_cache.get(key)
        if cpu_s is None:
            placement, link = self.routes.placement, self.routes.link
            spans = len({placement[r] for r in ranks}) > 1
            over = link if spans and link is not None and (
                link.cpu_s_per_message > 0 or link.cpu_s_per_byte > 0) else None
            cpu_s = self._cpu_cache[key] = call_cpu_s(self.transport, kind, len(ranks),
                                                      n_bytes, algorithm, is_root, over)
        return cpu_s

    def _run(self, kind, rank, ranks, i, n_bytes, root, algorithm, key, is_last):
        """Generator: this rank's part of the call's messages (``together`` is False)."""
        raise NotImplementedError

    def _meet(self, call, kind, ranks, n_bytes, algorithm, root, is_last) -> None:
        """A rank is in the call (``together`` is True): once all are, the call calls
        ``_leave_together`` when its messages are over."""
        raise NotImplementedError


RENDEZVOUS_LEGS = 3


def call_cpu_s(t: Transport, kind: str, p: int, n_bytes: float, algorithm: str,
               is_root: bool, link=None) -> float:
    """CPU one rank of a sleeping backend spends in a collective. On one host:
    ``cpu_fraction`` of its contention-free time with the backend's own costs. Across a
    ``link`` whose CPU per message was measured: that cost for every message the rank
    sends or receives, ``Link.message_cpu_s``: per message, byte and wake-up (an allreduce
    step both sends and receives a chunk: twice; gloo's ring sends and receives each of
    its segments that carry bytes, ``(P - 1) N / P`` a phase on average over the ranks:
    ``libraries.gloo.gloo_ring_sent_segments``), and its reductions. A gather's or
    scatter's non-root rank moves its own message only."""
    if t.cpu_fraction <= 0 or p <= 1:
        return 0.0
    q = p if is_root or kind not in ("gather", "scatter") else 2
    if link is not None and kind == "allreduce" and algorithm == "gloo_ring":
        share = (p - 1) / p                   # of the buffer a rank sends, receives, adds
        messages = share * gloo_ring_sent_segments(p, n_bytes)
        mean_bytes = share * n_bytes / messages if messages else 0.0
        return (4 * (messages * link.message_cpu_s(mean_bytes))
                + share * n_bytes * t.gamma_s_per_byte)
    if link is not None:
        both = 2.0 if kind == "allreduce" else 1.0
        return collective_s(kind, q, n_bytes, both * link.cpu_s_per_message,
                            both * link.cpu_s_per_byte, t.gamma_s_per_byte, algorithm)
    return t.cpu_fraction * collective_s(kind, q, n_bytes, t.alpha_s + t.step_extra_s(kind),
                                         t.beta_s_per_byte, t.gamma_s_per_byte, algorithm)
