"""The training schemes, each the per-rank loop of what it computes and communicates.

A scheme is a ``Scheme``: its backend (whose transport prices shared-memory
messages), whether it is synchronous (so the vectorised fast path can run it),
whether it needs a server rank or a single host, and ``start(env, setup)``
which launches one SimPy process per rank. Loops receive their collaborators
(worker, comm, recorder, plan) and share ``train_step``. ``weights`` and
``evaluate`` say how a replay reads the scheme's update schedule
(``contracts.schedule``).

Imports: its own modules (base, collective, holder, local, ps).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from simulator.model.schemes import collective, fusion, holder, local, ps
from simulator.model.schemes.base import Plan, Setup


@dataclass(frozen=True)
class Scheme:
    name: str
    backend: str                       # mpi | gloo | nccl (the default; see engine.machine)
    start: Callable                    # start(env, setup): launch the rank processes
    synchronous: bool                  # every rank meets every iteration (fast path ok)
    extra_rank: bool = False           # a parameter-server process after the P workers
    polls: bool = False                # ranks busy-wait in MPI calls (MPICH), taking a core
    single_host: bool = False          # needs all workers on one host (shared memory)
    single_worker: bool = False
    weights: str = "shared"            # replay: one shared weight vector, or a replica per worker
    evaluate: str = "weights"          # replay: the model scored (weights | average | holder)
    meets_every_step: bool = False     # not synchronous, yet every rank meets every iteration

    @property
    def lock_step(self) -> bool:
        """Every rank meets every iteration: the steps repeat, and one slow message holds
        up the step."""
        return self.synchronous or self.meets_every_step


SCHEMES: dict[str, Scheme] = {s.name: s for s in (
    Scheme("serial", "mpi", local.start_serial, True, single_worker=True),
    Scheme("psgd", "mpi", local.start_psgd, True, polls=True, weights="replicas",
           evaluate="average"),
    Scheme("async_avg", "mpi", holder.start_async_avg, False, polls=True,   # holder in rank 0
           weights="replicas", evaluate="holder"),
    Scheme("hogwild", "mpi", local.start_hogwild, False, single_host=True),
    Scheme("gather_scatter", "gloo", collective.start_gather_scatter, True),
    Scheme("allreduce", "gloo", collective.start_allreduce, True),
    Scheme("ddp", "gloo", collective.start_ddp, True),
    Scheme("mpi_allreduce", "mpi", collective.start_mpi_allreduce, True, polls=True),
    Scheme("horovod", "gloo", fusion.start_horovod, True),   # nccl on accelerator hosts
    # ps_sync meets every iteration, but its workers start one by one (no fast path)
    Scheme("ps_sync", "mpi", ps.start_ps_sync, False, extra_rank=True, polls=True,
           meets_every_step=True),
    Scheme("ps_async", "mpi", ps.start_ps_async, False, extra_rank=True, polls=True),
)}

__all__ = ["SCHEMES", "Scheme", "Plan", "Setup"]
