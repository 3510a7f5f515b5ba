"""Training schemes by name. Each module has ``train(ctx) -> list[float]`` (epoch times, s);
one that builds something before its first step (the parameter server's ``Server`` and
buffers, async_avg's ``Holder``) also has ``prepare(ctx)``, which builds it and returns the
training as a call (``prepared``): the runner prepares before the barrier that starts the
timed window, so the window holds training, not set-up.

A scheme is a ``Scheme`` and every property ``real`` needs of it is stated here once:
how it is launched (one process; its own P processes, hogwild's ``--workers P``; or one
process per rank under mpirun, torchrun or srun), what it talks through (mpi4py, a
torch.distributed group, or ``real.launch.dist``'s either), whether its workers take slices of
one global batch, whether it has a parameter server, and whether it runs as a phantom.
Code asks these properties and never compares a scheme's name; the module-level tuples
are views of them.

How each scheme lays out its ranks and data:

* ``server``: a rank that does not train.  The parameter server is rank 0 and
  the P workers are ranks 1..P, so P workers need ``mpirun -n P+1``; a sweep
  point "P workers" launches ``ranks(P)`` ranks.  Every run record and the simulator
  (``simulator.model.schemes.Scheme.server_rank``) number them so.
* ``global_batch``: gradient-synchronous schemes; all workers shuffle the whole
  training set with the same seed and each takes its slice of every global
  batch (``--global-batch G``, G/P per worker), so their step i sees exactly the
  samples of single-process step i.  The others train on a disjoint 1/P shard
  with their own shuffle.
* ``talks``: ``torch`` needs a torch.distributed (gloo) group (under mpirun it is
  set up from MPI); ``mpi`` talks through mpi4py and runs under mpirun only.

Imports: nothing at load (the scheme modules are imported by name when run); they import
torch, mpi4py for the MPI schemes, and real (step, dist, models, data, context, timing).
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

PERIODIC = ("average", "holder")    # exchanges every K steps (--average-every; 0: at the end)


@dataclass(frozen=True)
class Scheme:
    name: str
    launch: str                  # single: one process | own: its P processes | ranks: one a rank
    talks: str = "none"          # none | mpi (mpi4py, mpirun only) | torch (a gloo/nccl group)
                                 # | comm (real.launch.dist: MPI or torch.distributed)
    global_batch: bool = False   # the workers take slices of one global batch
    server: bool = False         # a parameter-server rank that does not train (rank 0)
    exchange: str = "none"       # what a step sends: a key of simulator.model.schemes.EXCHANGES
    default_every: int = 0       # K where --average-every is 0 (0: at the end only)
    ends_with_done: bool = False # each worker's last message is a "done" to the server
    every_worker_evaluates: bool = False   # each worker's weights are a model (psgd)
    gloo_on_cuda: bool = False   # gloo runs it on CUDA tensors (its all_reduce; DDP uses only that)
    lock_step: bool = True       # every rank meets every iteration (simulator's Scheme.lock_step)

    @property
    def rank_based(self) -> bool:
        """One process per rank, started by a launcher."""
        return self.launch == "ranks"

    @property
    def single_process(self) -> bool:
        """One process, P = 1 only (the baseline)."""
        return self.launch == "single"

    @property
    def own_processes(self) -> bool:
        """Starts its own P processes on this machine, sharing one model in memory."""
        return self.launch == "own"

    @property
    def phantom(self) -> bool:
        """Runs as a phantom (``--compute phantom``: its messages real, its compute slept,
        ``real.phantom``): the schemes whose ranks talk, that is the rank-based ones."""
        return self.rank_based

    @property
    def baseline(self) -> bool:
        """The P = 1 baseline of every scheme's speedup that has no P = 1 run of its own."""
        return self.single_process

    @property
    def picks_mpi_allreduce(self) -> bool:
        """``--mpi-allreduce`` picks MPICH's algorithm for its step's one allreduce of the
        flat gradient (set before MPI_Init)."""
        return self.exchange == "flat"

    @property
    def allreduces_each_tensor(self) -> bool:
        """Its step is one gloo allreduce per gradient tensor: a run's ``comm_s`` times
        gloo's ring steps inside training (``calibrate.fits.fit_comm.run_allreduce_alpha``)."""
        return self.exchange == "per_tensor"

    @property
    def compute_row_holds_comm(self) -> bool:
        """Its rows' ``compute_s`` holds communication: DDP's bucket all-reduces start in
        backward's hooks, and the autograd engine's final callback waits for each before
        ``backward()`` returns (``Reducer::finalize_backward``: ``bucket.future_work->wait()``,
        ``torch/csrc/distributed/c10d/reducer.cpp``), so its rows are no samples of the step
        alone (``calibrate.fits.runs``)."""
        return self.exchange == "buckets"

    @property
    def optimizer_per_worker(self) -> bool:
        """Each worker updates the shared weights with its own optimizer (its momentum
        buffer, its epochs): hogwild's processes on one model in memory."""
        return self.own_processes

    @property
    def epochs_by_updates(self) -> bool:
        """Its optimizer's epoch counts the updates it applied: a parameter server that
        applies each worker's gradient as it comes (not in lock step)."""
        return self.server and not self.lock_step

    def waits_between_steps(self, every: int) -> bool:
        """A rank waits for others between its steps: the exchange of every step, or of
        every K (``every``; the scheme's default K where 0). Not so without messages (one
        process; a model shared in memory) or averaging once at the end (K = 0)."""
        if self.exchange in ("none", "shared"):
            return False
        if self.exchange in PERIODIC:
            return bool(self.averaging_every(every))
        return True

    def averaging_every(self, every: int) -> int:
        """K, the steps from one exchange of the weights to the next: ``every`` (a run's
        ``--average-every``), else the scheme's default; 0 for a scheme whose exchange is
        not every K steps (``PERIODIC``) or that averages once at the end."""
        return (every or self.default_every) if self.exchange in PERIODIC else 0

    def ranks(self, workers: int) -> int:
        """Processes to launch for ``workers`` training workers."""
        return workers + (1 if self.server else 0)

    @property
    def first_worker_rank(self) -> int:
        return 1 if self.server else 0


SCHEMES: dict[str, Scheme] = {s.name: s for s in (
    Scheme("serial", "single", global_batch=True),
    Scheme("psgd", "ranks", "comm", exchange="average", every_worker_evaluates=True),
    Scheme("async_avg", "ranks", "mpi", exchange="holder", default_every=10, lock_step=False),
    Scheme("hogwild", "own", exchange="shared", lock_step=False),
    Scheme("gather_scatter", "ranks", "torch", global_batch=True, exchange="gather_scatter"),
    Scheme("allreduce", "ranks", "torch", global_batch=True, exchange="per_tensor",
           gloo_on_cuda=True),
    Scheme("ddp", "ranks", "torch", global_batch=True, exchange="buckets", gloo_on_cuda=True),
    Scheme("mpi_allreduce", "ranks", "mpi", global_batch=True, exchange="flat"),
    Scheme("ps_sync", "ranks", "mpi", global_batch=True, exchange="push_pull", server=True),
    Scheme("ps_async", "ranks", "mpi", exchange="push_pull", server=True, ends_with_done=True,
           lock_step=False),
)}
# views of the properties, by name
RANK_BASED = tuple(n for n, s in SCHEMES.items() if s.rank_based)
GLOBAL_BATCH = tuple(n for n, s in SCHEMES.items() if s.global_batch)
TORCH_DISTRIBUTED = tuple(n for n, s in SCHEMES.items() if s.talks == "torch")
MPI_ONLY = tuple(n for n, s in SCHEMES.items() if s.talks == "mpi")


def get(name: str):
    if name not in SCHEMES:
        raise ValueError(f"unknown algorithm {name!r}; valid: {', '.join(SCHEMES)}")
    return importlib.import_module(f"{__name__}.{name}")


def prepared(name: str, ctx) -> Callable[[], list[float]]:
    """Scheme ``name``'s training of ``ctx``, ready to start: its module imported (about 3 ms
    a rank with 6-13 ranks on two cores) and what its ``prepare`` builds before the first
    step, built. Calling the result trains and returns the epoch times."""
    module = get(name)
    prepare = getattr(module, "prepare", None)
    return prepare(ctx) if prepare is not None else partial(module.train, ctx)


def ranks_for(name: str, workers: int) -> int:
    """Processes to launch for ``workers`` training workers of scheme ``name``."""
    return SCHEMES[name].ranks(workers)


def first_worker_rank(name: str) -> int:
    return SCHEMES[name].first_worker_rank
