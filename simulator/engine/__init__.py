"""The engines: run one prediction (``simulate``) or a sweep over P (``sweep``).

* ``run``: ``simulate(scheme, P, workload, cluster, profile) -> Result``; checks
  the inputs, builds the plan, picks the engine;
* ``des``: the SimPy engine, every scheme at either fidelity;
* ``fast``: the vectorised closed form of synchronous schemes with analytic
  communication (no events);
* ``placement``, ``result``: what both engines share;
* ``sweep``: ``simulate`` over schemes and worker counts, as rows.

Imports: ``contracts`` and ``simulator.model``; never torch or mpi4py.
"""
from __future__ import annotations

from simulator.engine.result import Result
from simulator.engine.run import simulate, steady_iteration_s

__all__ = ["Result", "simulate", "steady_iteration_s"]
