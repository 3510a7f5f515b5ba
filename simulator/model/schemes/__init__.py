"""The training schemes, each the per-rank loop of what it computes and communicates.

A scheme is a ``Scheme``, and every property of it is stated here once: the library
that moves its data (``backend``; which the user may choose, which run on accelerator
hosts), whether it runs in lock step (``synchronous``, ``lock_step``), whether it has a
parameter server and the server's rank (``server``, ``server_rank``), what a step sends
(``exchange``, one of ``EXCHANGES``), whether it can run on several hosts, and
``start(env, setup)`` which launches one SimPy process per rank. Engines, tools and
reports ask these properties and never compare a scheme's name. Loops receive their
collaborators (worker, comm, recorder, plan) and share ``train_step``. ``weights`` and
``evaluate`` say how a replay reads the scheme's update schedule (``contracts.schedule``).

Rank numbering, as ``real.train`` numbers its ranks and every run record says: a
parameter server is rank 0 and the P workers ranks 1..P; without a server the workers
are ranks 0..P-1. (The server runs on the host after the workers': ``engine.placement``.)

Imports: its own modules (base, collective, holder, local, ps).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from simulator.model.schemes import collective, fusion, holder, local, ps
from simulator.model.schemes.base import Plan, Setup

# what one step of each scheme sends (``Scheme.exchange``)
EXCHANGES = {
    "none": "nothing: one worker",
    "average": "the weights, averaged by an allreduce every K steps or once at the end",
    "holder": "the weights, swapped with the holder in rank 0 every K steps",
    "shared": "nothing: the workers update one model in shared memory",
    "gather_scatter": "the gradient, gathered at rank 0, and their mean, scattered back",
    "per_tensor": "one allreduce of each gradient tensor",
    "flat": "one allreduce of the flat gradient",
    "buckets": "allreduces of gradient buckets as the backward makes them ready",
    "fused": "allreduces of fused buffers of the ready gradients, once a cycle",
    "push_pull": "the gradient to the server, the weights back",
}
OVERLAPPED = ("buckets", "fused")      # exchanges that run beside the backward
PERIODIC = ("average", "holder")       # exchanges every K steps (--average-every; 0: at the end)


@dataclass(frozen=True)
class Scheme:
    name: str
    backend: str                       # mpi | gloo | nccl (the default; see engine.machine)
    start: Callable                    # start(env, setup): launch the rank processes
    synchronous: bool                  # every rank meets every iteration (fast path ok)
    exchange: str = "none"             # what a step sends: a key of EXCHANGES
    server: bool = False               # a parameter-server rank (rank 0) besides the P workers
    polls: bool = False                # ranks busy-wait in MPI calls (MPICH), taking a core
    single_host: bool = False          # needs all workers on one host (shared memory)
    single_worker: bool = False
    weights: str = "shared"            # replay: one shared weight vector, or a replica per worker
    evaluate: str = "weights"          # replay: the model scored (weights | average | holder)
    meets_every_step: bool = False     # not synchronous, yet every rank meets every iteration
    chosen_backend: bool = False       # the user picks its library (--backend; nccl on devices)
    on_devices: bool = True            # runs on accelerator hosts
    gloo_on_devices: bool = False      # with gloo on accelerator hosts (through host memory)
    default_every: int = 0             # K where --average-every is 0 (0: at the end only)
    in_all: bool = True                # one of --schemes all (the others: on accelerator hosts)

    @property
    def lock_step(self) -> bool:
        """Every rank meets every iteration: the steps repeat, and one slow message holds
        up the step."""
        return self.synchronous or self.meets_every_step

    def averaging_every(self, every: int) -> int:
        """K, the steps from one exchange of the weights to the next: ``every`` (a run's
        ``--average-every``), else the scheme's default; 0 for a scheme whose exchange is
        not every K steps (``PERIODIC``) or that averages once at the end."""
        return (every or self.default_every) if self.exchange in PERIODIC else 0

    @property
    def overlaps_backward(self) -> bool:
        """Its collectives run beside the backward (ddp's buckets, Horovod's cycles)."""
        return self.exchange in OVERLAPPED

    @property
    def multi_host(self) -> bool:
        return not self.single_host

    def ranks(self, workers: int) -> int:
        """Processes of a run of ``workers`` workers: the server is a rank too."""
        return workers + (1 if self.server else 0)

    def server_rank(self, workers: int) -> int | None:
        """The parameter server's rank, or None: rank 0, as a run record numbers it."""
        return 0 if self.server else None

    def worker_ranks(self, workers: int) -> tuple[int, ...]:
        """The workers' ranks: 1..P after a server, else 0..P-1."""
        first = 1 if self.server else 0
        return tuple(range(first, first + workers))


SCHEMES: dict[str, Scheme] = {s.name: s for s in (
    Scheme("serial", "mpi", local.start_serial, True, single_worker=True),
    Scheme("psgd", "mpi", local.start_psgd, True, "average", polls=True, weights="replicas",
           evaluate="average"),
    Scheme("async_avg", "mpi", holder.start_async_avg, False, "holder", polls=True,
           weights="replicas", evaluate="holder", default_every=holder.DEFAULT_K),
    Scheme("hogwild", "mpi", local.start_hogwild, False, "shared", single_host=True,
           on_devices=False),
    Scheme("gather_scatter", "gloo", collective.start_gather_scatter, True, "gather_scatter"),
    Scheme("allreduce", "gloo", collective.start_allreduce, True, "per_tensor",
           chosen_backend=True, gloo_on_devices=True),
    Scheme("ddp", "gloo", collective.start_ddp, True, "buckets", chosen_backend=True,
           gloo_on_devices=True),
    Scheme("mpi_allreduce", "mpi", collective.start_mpi_allreduce, True, "flat", polls=True),
    Scheme("horovod", "gloo", fusion.start_horovod, True, "fused",   # nccl on accelerator hosts
           chosen_backend=True, in_all=False),
    # ps_sync meets every iteration, but its workers start one by one (no fast path)
    Scheme("ps_sync", "mpi", ps.start_ps_sync, False, "push_pull", server=True, polls=True,
           meets_every_step=True),
    Scheme("ps_async", "mpi", ps.start_ps_async, False, "push_pull", server=True, polls=True),
)}

__all__ = ["EXCHANGES", "SCHEMES", "Scheme", "Plan", "Setup"]
