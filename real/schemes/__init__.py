"""Training schemes by name. Each module has ``train(ctx) -> list[float]`` (epoch times, s).

``RANK_BASED`` schemes need one process per rank (mpirun / torchrun); the others
start their own processes (hogwild: ``--workers P``) or none (serial).

How each scheme lays out its ranks and data:

* ``EXTRA_RANKS``: ranks that do not train.  The parameter server is rank 0 and
  the P workers are ranks 1..P, so P workers need ``mpirun -n P+1``; a sweep
  point "P workers" must launch ``P + EXTRA_RANKS.get(name, 0)`` ranks.
* ``GLOBAL_BATCH``: gradient-synchronous schemes; all workers shuffle the whole
  training set with the same seed and each takes its slice of every global
  batch (``--global-batch G``, G/P per worker), so their step i sees exactly the
  samples of single-process step i.  The others train on a disjoint 1/P shard
  with their own shuffle.
* ``TORCH_DISTRIBUTED``: need a torch.distributed (gloo) group; under mpirun it
  is set up from MPI.  ``MPI_ONLY``: talk through mpi4py and run under mpirun only.

Imports: nothing at load (the scheme modules are imported by name when run); they import
torch, mpi4py for the MPI schemes, and real (step, dist, models, data, context, timing).
"""
from __future__ import annotations

import importlib

SCHEMES = ("serial", "psgd", "async_avg", "hogwild", "gather_scatter", "allreduce", "ddp",
           "mpi_allreduce", "ps_sync", "ps_async")
RANK_BASED = ("psgd", "async_avg", "gather_scatter", "allreduce", "ddp", "mpi_allreduce",
              "ps_sync", "ps_async")
GLOBAL_BATCH = ("serial", "gather_scatter", "allreduce", "ddp", "mpi_allreduce", "ps_sync")
TORCH_DISTRIBUTED = ("gather_scatter", "allreduce", "ddp")
MPI_ONLY = ("async_avg", "mpi_allreduce", "ps_sync", "ps_async")
EXTRA_RANKS = {"ps_sync": 1, "ps_async": 1}


def get(name: str):
    if name not in SCHEMES:
        raise ValueError(f"unknown algorithm {name!r}; valid: {', '.join(SCHEMES)}")
    return importlib.import_module(f"{__name__}.{name}")


def ranks_for(name: str, workers: int) -> int:
    """Processes to launch for ``workers`` training workers of scheme ``name``."""
    return workers + EXTRA_RANKS.get(name, 0)


def first_worker_rank(name: str) -> int:
    return EXTRA_RANKS.get(name, 0)
