"""Communication: one small interface, two fidelities behind it.

``transfer(src, dst, n_bytes)`` moves one message and returns the event of its
arrival; ``allreduce``, ``gather``, ``scatter`` and ``bcast`` are generators
that one rank of the group runs (``yield from comm.allreduce(rank, ranks, n)``).

* ``"analytic"``: a collective is a barrier followed by its closed form
  (``closed_form``), and a message costs ``alpha + beta * n``; nothing contends.
  Cheap: a handful of events per collective whatever P is.
* ``"message"``: a collective is the messages of its algorithm
  (``collectives``) over the simulated ``Network``, so links, NICs and the
  ports of roots are shared and congestion emerges.

Both account each collective the same way: a rank that arrives before the
last one *waits* until it arrives; the rest of its time in the call is *comm*,
including the library's own latency per step beyond the transport's alpha
(``Transport.collective_alpha_s``) times the algorithm's steps.

Ranks that sleep while they wait (gloo; ``hosts`` set) still spend
``Transport.cpu_fraction`` of a call's contention-free time on a core: once
all have arrived, each rank's share is a job on its host, and the call is not
over before the last of those jobs is, so on an oversubscribed host the
call stretches to ``max(its time, cpu / speed)``. Leaving the call, such a
rank needs a core again: while every core of its host computes it waits for
the scheduler (``CoreHost.wake``).
"""
from __future__ import annotations

import simpy

from . import collectives
from .closed_form import choose_allreduce, collective_s, steps
from .network import Network, Routes
from .profile import Transport
from .recorder import Recorder


class Comm:
    def __init__(self, env: simpy.Environment, routes: Routes, transport: Transport,
                 recorder: Recorder):
        self.env = env
        self.routes = routes
        self.gamma_s_per_byte = transport.gamma_s_per_byte
        self.transport = transport
        self.recorder = recorder
        self._seq: dict[tuple, int] = {}
        self._calls: dict[tuple, list] = {}
        self._index: dict[tuple, dict[int, int]] = {}
        self.hosts: dict | None = None      # rank -> Host, for the CPU of sleeping ranks' calls

    # ------------------------------------------------------------- the interface
    def allreduce(self, rank, ranks, n_bytes, algorithm="ring", record=True):
        algorithm = choose_allreduce(algorithm, n_bytes, len(ranks), self.routes.one_host(ranks))
        yield from self._collective("allreduce", rank, ranks, n_bytes, 0, algorithm, record)

    def gather(self, rank, ranks, n_bytes, root=0, record=True):
        yield from self._collective("gather", rank, ranks, n_bytes, root, "-", record)

    def scatter(self, rank, ranks, n_bytes, root=0, record=True):
        yield from self._collective("scatter", rank, ranks, n_bytes, root, "-", record)

    def bcast(self, rank, ranks, n_bytes, root=0, record=True):
        yield from self._collective("bcast", rank, ranks, n_bytes, root, "binomial", record)

    def transfer(self, src: int, dst: int, n_bytes: float):
        raise NotImplementedError

    def _rendezvous_s(self, dst: int, n_bytes: float) -> float:
        """A point-to-point message above the eager limit is a rendezvous: request to send,
        clear to send, data; each leg waits for its receiver's turn on a core (``timeslice``),
        where an eager message waits once (that wait is in the route's alpha)."""
        eager = self.transport.eager_max_bytes
        if eager <= 0 or n_bytes <= eager:
            return 0.0
        return (RENDEZVOUS_LEGS - 1) * self.routes.handoff_s[dst]

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
        group = id(ranks)          # groups are long-lived tuples: hashing them is O(P)
        seq = self._seq.get((rank, group), 0)
        self._seq[(rank, group)] = seq + 1
        key = (group, seq)
        call = self._calls.get(key)
        if call is None:    # arrived, last arrival, finished, the ranks' CPU done
            call = self._calls[key] = [0, 0.0, 0, self.env.event()]
        arrived_at = self.env.now
        if self.hosts:
            self.hosts[rank].sleep(rank)
        call[0] += 1
        call[1] = arrived_at
        if call[0] == p:
            self._start_cpu(kind, ranks, n_bytes, root, algorithm, call[3])
        yield from self._run(kind, rank, ranks, self._index_of(ranks)[rank],
                             n_bytes, root, algorithm, key, call[0] == p)
        extra_s = self.transport.step_extra_s(kind)     # the library's own cost per step
        if extra_s > 0:
            yield self.env.timeout(extra_s * steps(kind, p, n_bytes, algorithm))
        if self._sleeps_on_cpu() and not call[3].processed:
            yield call[3]            # (otherwise a gather's sender still leaves at once)
        # it slept: back on a core (a gather's sender goes on to sleep in its next call)
        if self.hosts and (kind != "gather" or rank == ranks[root]):
            yield self.hosts[rank].wake(rank)
        # a rank that leaves before everyone arrived (a gather's sender) waited for no one
        last = call[1] if call[0] == p else arrived_at
        call[2] += 1
        if call[2] == p:
            del self._calls[key]
        if record:
            waited_until = min(last, self.env.now)
            self.recorder.add(rank, "wait", arrived_at, waited_until, kind)
            self.recorder.add(rank, "comm", waited_until, self.env.now, kind)

    def _sleeps_on_cpu(self) -> bool:
        return bool(self.hosts) and self.transport.cpu_fraction > 0

    def _start_cpu(self, kind, ranks, n_bytes, root, algorithm, done: simpy.Event) -> None:
        """Every rank's CPU for this call as a job on its host; ``done`` when all are over."""
        if not self._sleeps_on_cpu():
            done.succeed()
            return
        left = [len(ranks)]

        def one_done(_ev):
            left[0] -= 1
            if left[0] == 0:
                done.succeed()
        for i, r in enumerate(ranks):
            cpu_s = call_cpu_s(self.transport, kind, len(ranks), n_bytes, algorithm, i == root)
            self.hosts[r].compute(cpu_s, proc=r, wakes=True).callbacks.append(one_done)

    def _index_of(self, ranks):
        idx = self._index.get(id(ranks))
        if idx is None:
            idx = self._index[id(ranks)] = ({r: i for i, r in enumerate(ranks)}, ranks)
        return idx[0]

    def _run(self, kind, rank, ranks, i, n_bytes, root, algorithm, key, is_last):
        raise NotImplementedError


RENDEZVOUS_LEGS = 3


def call_cpu_s(t: Transport, kind: str, p: int, n_bytes: float, algorithm: str,
               is_root: bool) -> float:
    """CPU one rank spends in a collective: ``cpu_fraction`` of its contention-free time
    with the backend's own costs (a host's work, whatever the network). A gather's or
    scatter's non-root rank moves its own message only."""
    if t.cpu_fraction <= 0 or p <= 1:
        return 0.0
    q = p if is_root or kind not in ("gather", "scatter") else 2
    return t.cpu_fraction * collective_s(kind, q, n_bytes, t.alpha_s + t.step_extra_s(kind),
                                         t.beta_s_per_byte, t.gamma_s_per_byte, algorithm)


class AnalyticComm(Comm):
    """Closed forms behind a barrier; messages cost alpha + beta * n."""

    def __init__(self, *args):
        super().__init__(*args)
        self._barriers: dict[tuple, simpy.Event] = {}

    def transfer(self, src, dst, n_bytes):
        if src == dst:
            return self.env.timeout(0)
        alpha_s, beta_s_per_byte = self.routes.params(src, dst)
        return self.env.timeout(alpha_s + beta_s_per_byte * n_bytes
                                + self._rendezvous_s(dst, n_bytes))

    def _run(self, kind, rank, ranks, i, n_bytes, root, algorithm, key, is_last):
        done = self._barriers.get(key)
        if done is None:
            done = self._barriers[key] = self.env.event()
        if is_last:
            del self._barriers[key]
            a, b = self.routes.group_params(ranks)
            t = collective_s(kind, len(ranks), n_bytes, a, b, self.gamma_s_per_byte, algorithm)
            self.env.timeout(t).callbacks.append(lambda _ev: done.succeed())
        yield done


class MessageComm(Comm):
    """Every message of every algorithm crosses the simulated network."""

    def __init__(self, env, routes, transport, recorder):
        super().__init__(env, routes, transport, recorder)
        self.network = Network(env, routes)
        self._sends: dict[tuple, tuple] = {}
        self._recvs: dict[tuple, simpy.Event] = {}

    def transfer(self, src, dst, n_bytes):
        moved = self.network.transfer(src, dst, n_bytes)
        extra_s = self._rendezvous_s(dst, n_bytes) if src != dst else 0.0
        if extra_s <= 0:
            return moved
        arrived = self.env.event()
        moved.callbacks.append(
            lambda _ev: self.env.timeout(extra_s).callbacks.append(lambda _e: arrived.succeed()))
        return arrived

    # point to point with matching, for the algorithms in ``collectives``.
    # Rendezvous: a message starts moving once its receive is posted, so a rank
    # that is still busy with an earlier step does not get its port shared.
    def isend(self, src, dst, n_bytes, tag):
        """Event: delivered. The bytes move once ``dst`` has posted the matching receive."""
        key = (dst, src, tag)
        delivered = self.env.event()
        received = self._recvs.pop(key, None)
        if received is None:
            self._sends[key] = (n_bytes, delivered)
        else:
            self._move(src, dst, n_bytes, delivered, received)
        return delivered

    def recv(self, dst, src, tag):
        """Event: the message from ``src`` with ``tag`` has arrived at ``dst``."""
        key = (dst, src, tag)
        received = self.env.event()
        send = self._sends.pop(key, None)
        if send is None:
            self._recvs[key] = received
        else:
            self._move(src, dst, send[0], send[1], received)
        return received

    def _move(self, src, dst, n_bytes, delivered, received):
        def arrive(_ev):
            delivered.succeed()
            received.succeed()
        self.network.transfer(src, dst, n_bytes).callbacks.append(arrive)

    def _run(self, kind, rank, ranks, i, n_bytes, root, algorithm, key, is_last):
        tag = key
        if kind == "allreduce":
            yield from collectives.ALLREDUCE[algorithm](self, ranks, i, n_bytes, tag)
        elif kind == "gather":
            yield from collectives.gather(self, ranks, i, n_bytes, tag, root)
        elif kind == "scatter":
            yield from collectives.scatter(self, ranks, i, n_bytes, tag, root)
        elif kind == "bcast":
            yield from collectives.binomial_bcast(self, ranks, i, n_bytes, tag, root)
        else:
            raise ValueError(f"unknown collective {kind!r}")


def make_comm(fidelity: str, env, routes: Routes, transport: Transport,
              recorder: Recorder) -> Comm:
    if fidelity == "analytic":
        return AnalyticComm(env, routes, transport, recorder)
    if fidelity == "message":
        return MessageComm(env, routes, transport, recorder)
    raise ValueError(f"unknown fidelity {fidelity!r} (analytic or message)")
