"""Profiles built in code, and a recorder of collectives' messages, for tests and examples.

``make_profile()`` gives an idealised machine (perfect processor sharing, one
model ``toy`` of round numbers); keyword arguments change any of it: every
number chosen, nothing measured. ``trace()`` runs a collective's generators
and records who sent how many bytes to whom, in order (``sends_of``). ``gloo_hosts()``
gives gloo's message layer over hosts of one rank each, for closed forms.

Imports: contracts.profile (and SimPy, contracts.cluster and simulator.model, for
``Tracer`` and ``gloo_hosts``).
"""
from __future__ import annotations

from contracts.profile import (
    ModelCost,
    Profile,
    Provenance,
    ServerCost,
    StepFit,
    Transport,
)


def make_profile(cores: int = 4, step_intercept_s: float = 0.002,
                 step_s_per_sample: float = 0.0001, spread_cv: float = 0.0,
                 layer_param_counts: tuple[int, ...] = (1000, 10, 200_000, 50, 5000, 10),
                 backward_fraction: float = 0.6,
                 alpha_s: float = 1e-5, beta_s_per_byte: float = 1e-9,
                 gamma_s_per_byte: float = 0.0,
                 sharing_slowdown: dict[int, float] | None = None,
                 update_intercept_s: float = 1e-4, update_s_per_param: float = 1e-9,
                 model: str = "toy", quantum_s: float = 0.0,
                 collective_alpha_s: dict[str, float] | None = None,
                 cpu_fraction: float = 0.0, balance_delay_s: float = 0.0,
                 server_update_s: float = 0.0) -> Profile:
    layers = tuple(layer_param_counts)
    steps = tuple(StepFit(threads=t, step_intercept_s=step_intercept_s / t,
                          step_s_per_sample=step_s_per_sample / t, spread_cv=spread_cv)
                  for t in (1, 2, 4))
    transports = tuple(Transport(b, alpha_s, beta_s_per_byte, gamma_s_per_byte,
                                 dict(collective_alpha_s or {}), cpu_fraction=cpu_fraction)
                       for b in ("mpi", "gloo"))
    return Profile(
        provenance=Provenance(host="test", cores=cores, created_utc="1970-01-01T00:00:00Z",
                              note="built in code by simulator.testing"),
        cores=cores,
        models=(ModelCost(model, sum(layers), layers, steps, backward_fraction,
                          server_update_s=server_update_s),),
        transports=transports,
        sharing_slowdown=dict(sharing_slowdown or {}),
        server=ServerCost(update_intercept_s, update_s_per_param),
        scheduler_quantum_s=quantum_s,
        balance_delay_s=balance_delay_s,
    )


def gloo_hosts(p: int, bytes_per_s: float):
    """(SimPy environment, ranks 0..P-1, gloo's ``MessageComm``) over P hosts of one rank
    each, joined by links of ``bytes_per_s`` with no latency, no bursts and no CPU a
    message: a collective's times are then closed forms of its bytes."""
    import simpy

    from contracts.cluster import Link
    from simulator.model.comm import MessageComm
    from simulator.model.network import Routes
    from simulator.model.recorder import Recorder
    env, ranks = simpy.Environment(), tuple(range(p))
    transport = Transport("gloo", 0.0, 0.0)
    comm = MessageComm(env, Routes(ranks, Link(bytes_per_s, 0.0), transport), transport,
                       Recorder(ranks))
    return env, ranks, comm


class Tracer:
    """A point-to-point layer for ``comm.collectives``' generators that records every
    message: ``sends`` holds (time, src, dst, bytes) in the order ranks post them. Every
    message arrives one second after it is posted, whatever its size; reductions take
    no time. A rank's sends in order are its partners and message sizes."""

    def __init__(self, placement: tuple[int, ...]):
        import types

        import simpy
        self.env = simpy.Environment()
        self.routes = types.SimpleNamespace(placement=tuple(placement), link=None,
                                            crosses=lambda src, dst: False)   # no link
        self.sends: list[tuple[float, int, int, float]] = []
        self.stages: list[tuple[float, float]] = []
        self._arrived: dict = {}

    def _event(self, key):
        ev = self._arrived.get(key)
        if ev is None:
            ev = self._arrived[key] = self.env.event()
        return ev

    def isend(self, src, dst, n_bytes, tag):
        self.sends.append((self.env.now, src, dst, n_bytes))
        arrived = self._event((dst, src, tag))
        self.env.timeout(1.0).callbacks.append(lambda _ev: arrived.succeed())
        return arrived

    def recv(self, dst, src, tag):
        return self._event((dst, src, tag))

    def reduce(self, n_bytes):
        return self.env.timeout(0)

    def stage(self, n_bytes):
        """A device's copy to or from host memory: recorded in ``stages``, no time."""
        self.stages.append((self.env.now, n_bytes))
        return self.env.timeout(0)

    def on_host(self):
        return self


def trace(collective, ranks: tuple[int, ...], n_bytes: float,
          placement: tuple[int, ...] | None = None) -> Tracer:
    """Run ``collective(p2p, ranks, i, n_bytes, tag)`` for every rank; the ``Tracer``."""
    tracer = Tracer(placement or tuple(range(len(ranks))))
    for i in range(len(ranks)):
        tracer.env.process(collective(tracer, ranks, i, n_bytes, "t"))
    tracer.env.run()
    return tracer


def sends_of(tracer: Tracer, rank: int) -> list[tuple[int, float]]:
    """(partner, bytes) of every message ``rank`` sent, in the order it sent them."""
    return [(dst, n) for _t, src, dst, n in tracer.sends if src == rank]
