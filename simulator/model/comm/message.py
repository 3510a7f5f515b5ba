"""The message fidelity: a collective is the messages of its algorithm.

Every message crosses the simulated ``Network`` (``comm.collectives`` says
which messages each algorithm sends), so links, NICs and the ports of roots
are shared and congestion emerges.

Imports: SimPy, model.comm (base, collectives, gloo), model.network.
"""
from __future__ import annotations

import copy

import simpy

from simulator.model.comm import collectives, gloo
from simulator.model.comm.base import Comm
from simulator.model.comm.choice import LOW_LATENCY, kernel_bytes, low_latency, protocol_share
from simulator.model.network import Network


class MessageComm(Comm):
    """Every message of every algorithm crosses the simulated network."""

    def __init__(self, env, routes, transport, recorder):
        super().__init__(env, routes, transport, recorder)
        self.network = Network(env, routes)
        self._sends: dict[tuple, tuple] = {}
        self._recvs: dict[tuple, simpy.Event] = {}
        self._ll: dict = {}     # the LL and LL128 protocols' views (``_ll_view``)
        self._views: dict = {}  # views inside a call (``_in_call``), by their routes' id
        self.port_queues: dict[int, simpy.Event] = {}   # rank -> its port drained (gloo)
        self._notices: dict[tuple, simpy.Event] = {}    # (tag, rank) -> a receive announced

    def transfer(self, src, dst, n_bytes):
        moved = self.network.transfer(src, dst, n_bytes)
        extra_s = self._rendezvous_s(dst, n_bytes) if src != dst else 0.0
        if extra_s <= 0:
            return moved
        arrived = self.env.event()
        moved.callbacks.append(
            lambda _ev: self.env.timeout(extra_s).callbacks.append(arrived.trigger))
        return arrived

    def leg(self, src, dst, n_bytes):
        return self.network.transfer(src, dst, n_bytes)

    # point to point with matching, for the algorithms in ``collectives``.
    # Rendezvous: a message moves once its receive is posted, so a rank that is
    # still busy with an earlier step does not get its port shared; between
    # hosts, the first ``Routes.eager_bytes`` of it cross at once into the
    # kernel's socket buffers (TCP does not wait for the application).
    def isend(self, src, dst, n_bytes, tag):
        """Event: delivered (the receive posted and every byte arrived)."""
        key = (dst, src, tag)
        delivered = self.env.event()
        received = self._recvs.pop(key, None)
        if received is not None:
            self._move(src, dst, n_bytes, delivered, received)
            return delivered
        eager = min(n_bytes, self.routes.eager_bytes(src, dst))
        ahead = self.network.transfer(src, dst, eager) if eager > 0 else None
        self._sends[key] = (n_bytes, delivered, ahead, eager)
        return delivered

    def recv(self, dst, src, tag):
        """Event: the message from ``src`` with ``tag`` has arrived at ``dst``."""
        key = (dst, src, tag)
        received = self.env.event()
        send = self._sends.pop(key, None)
        if send is None:
            self._recvs[key] = received
            return received
        n_bytes, delivered, ahead, eager = send
        if ahead is None:
            self._move(src, dst, n_bytes, delivered, received)
        else:                       # the rest follows what crossed ahead, from now on
            def rest(_ev):
                if n_bytes > eager:
                    self._move(src, dst, n_bytes - eager, delivered, received)
                else:               # all of it is there already
                    delivered.succeed()
                    received.succeed()
            if ahead.processed:
                rest(ahead)
            else:
                ahead.callbacks.append(rest)
        return received

    def notice(self, tag, rank) -> simpy.Event:
        """The event of call ``tag``'s receive announced to ``rank`` (``gloo.gather``): the
        first of the two sides to ask makes it, the other takes it (and the announcer
        succeeds it)."""
        event = self._notices.pop((tag, rank), None)
        if event is None:
            event = self._notices[(tag, rank)] = self.env.event()
        return event

    def _move(self, src, dst, n_bytes, delivered, received):
        def arrive(_ev):
            delivered.succeed()
            received.succeed()
        self.network.transfer(src, dst, n_bytes).callbacks.append(arrive)

    def _in_call(self, ranks) -> MessageComm:
        """This comm inside one allreduce of ``ranks`` (``Routes.in_call``: core-mates all
        in the call hand the core over at once): the same network, flows and pending
        messages."""
        routes = self.routes.in_call(ranks)
        if routes is self.routes:
            return self
        view = self._views.get(id(routes))
        if view is None:
            view = self._views[id(routes)] = copy.copy(self)
            view.routes = routes
            view.network = self.network.over(routes)
        return view

    def _ll_view(self, algorithm: str, share: float) -> MessageComm:
        """This comm as NCCL's LL or LL128 protocol sends: the same network, flows and
        pending messages, each message after the protocol's latency; a call's reductions
        at the rate of its data (it moves ``1 / share`` times its bytes)."""
        key = (algorithm, share)
        view = self._ll.get(key)
        if view is None:
            view = self._ll[key] = copy.copy(self)
            view.routes = low_latency(self.routes, algorithm)[1]
            view.network = self.network.over(view.routes)
            view.gamma_s_per_byte = self.gamma_s_per_byte * share
        return view

    def on_host(self) -> MessageComm:
        """This comm as gloo sends on accelerator hosts (``Routes.host_routes``): the same
        network and pending messages, two ranks of a host over TCP on the host."""
        view = self._ll.get("host")
        if view is None:
            view = self._ll["host"] = copy.copy(self)
            view.routes = self.routes.host_routes
            view.network = self.network.over(view.routes)
        return view

    def _run(self, kind, rank, ranks, i, n_bytes, root, algorithm, key, is_last):
        tag = key
        if kind == "allreduce" and algorithm in LOW_LATENCY:    # NCCL's LL or LL128
            share = protocol_share(self.routes, ranks, algorithm)
            n_kernel = kernel_bytes(self.routes, ranks, n_bytes, algorithm)
            yield from collectives.ALLREDUCE["ring"](self._ll_view(algorithm, share), ranks, i,
                                                     n_kernel / share, tag)
        elif kind == "allreduce":
            yield from collectives.ALLREDUCE[algorithm](self._in_call(ranks), ranks, i,
                                                        n_bytes, tag)
        elif kind == "gather":
            gather = gloo.gather if self.transport.backend == "gloo" else collectives.gather
            yield from gather(self, ranks, i, n_bytes, tag, root)
        elif kind == "scatter":
            scatter = gloo.scatter if self.transport.backend == "gloo" else collectives.scatter
            yield from scatter(self, ranks, i, n_bytes, tag, root)
        elif kind == "bcast":
            yield from collectives.binomial_bcast(self, ranks, i, n_bytes, tag, root)
        else:
            raise ValueError(f"unknown collective {kind!r}")
