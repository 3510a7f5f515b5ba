"""Communication at two fidelities behind one interface (``Comm``).

* ``base``: the interface and its bookkeeping (waiting vs communicating, the
  CPU of sleeping ranks' calls);
* ``analytic``: a barrier, then the closed form (``simulator.model.comm.closed_forms``);
* ``message``: the messages of each algorithm (``collectives``) over the
  simulated network (``model.network``).

Imports: contracts.profile, its own modules, model (network, recorder).
"""
from __future__ import annotations

from contracts.profile import Transport
from simulator.model.comm.analytic import AnalyticComm
from simulator.model.comm.base import RENDEZVOUS_LEGS, Comm, call_cpu_s
from simulator.model.comm.message import MessageComm
from simulator.model.network import Routes
from simulator.model.recorder import Recorder

__all__ = ["AnalyticComm", "Comm", "MessageComm", "RENDEZVOUS_LEGS", "call_cpu_s", "make_comm"]


def make_comm(fidelity: str, env, routes: Routes, transport: Transport,
              recorder: Recorder) -> Comm:
    if fidelity == "analytic":
        return AnalyticComm(env, routes, transport, recorder)
    if fidelity == "message":
        return MessageComm(env, routes, transport, recorder)
    raise ValueError(f"unknown fidelity {fidelity!r} (analytic or message)")
