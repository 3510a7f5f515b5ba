"""How this process was launched, and the communicators every scheme uses.

One script runs three ways (as nanoGPT's ``train.py`` does):

* plain ``python -m real.train``: one process (``single``);
* ``mpirun -n P python -m real.train``: MPICH's hydra sets ``PMI_RANK`` / ``PMI_SIZE``
  (Open MPI sets ``OMPI_COMM_WORLD_*``); mpi4py gives rank and size;
* ``torchrun --nproc-per-node P -m real.train``: ``RANK`` / ``WORLD_SIZE`` are set.

Under MPI, torch.distributed (gloo) is set up from MPI: rank 0 picks a free port
and broadcasts ``addr:port``; nobody has to export MASTER_ADDR by hand.
``Comm`` hides which of the two carries the few whole-model calls (average,
gather, broadcast of Python objects) so a scheme's distributed part stays short.
"""
from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from datetime import timedelta

import numpy as np


@dataclass(frozen=True)
class Launch:
    kind: str          # single | mpi | torchrun
    rank: int
    world_size: int
    local_size: int    # ranks on this host

    @property
    def is_root(self) -> bool:
        return self.rank == 0


def detect_launch() -> Launch:
    env = os.environ
    if "PMI_RANK" in env or "OMPI_COMM_WORLD_RANK" in env or "PMI_SIZE" in env:
        from mpi4py import MPI
        world = MPI.COMM_WORLD
        local = world.Split_type(MPI.COMM_TYPE_SHARED)
        local_size = local.Get_size()
        local.Free()
        return Launch("mpi", world.Get_rank(), world.Get_size(), local_size)
    if "RANK" in env and "WORLD_SIZE" in env:
        size = int(env["WORLD_SIZE"])
        return Launch("torchrun", int(env["RANK"]), size,
                      int(env.get("LOCAL_WORLD_SIZE", size)))
    return Launch("single", 0, 1, 1)


def threads_per_rank(cores: int, ranks_on_host: int) -> int:
    """floor(cores / ranks on this host), at least 1: no oversubscribed BLAS threads."""
    return max(1, cores // max(1, ranks_on_host))


def free_port(addr: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


class Comm:
    """Whole-model communication for the schemes that are not about the collective itself."""
    rank: int
    size: int
    backend: str

    def allreduce_sum_(self, buf: np.ndarray) -> None: ...
    def allgather_obj(self, obj): ...
    def gather_obj(self, obj, root: int = 0): ...
    def bcast_obj(self, obj, root: int = 0): ...
    def barrier(self) -> None: ...


class SingleComm(Comm):
    rank, size, backend = 0, 1, "none"

    def allreduce_sum_(self, buf):
        pass

    def allgather_obj(self, obj):
        return [obj]

    def gather_obj(self, obj, root=0):
        return [obj]

    def bcast_obj(self, obj, root=0):
        return obj

    def barrier(self):
        pass


class PeerTimeout(RuntimeError):
    """A peer did not answer within the run's --timeout: it died, hung or is far too slow."""


def wait(request, timeout_s: float, what: str, status=None) -> None:
    """Complete an MPI request, or raise ``PeerTimeout`` after ``timeout_s`` seconds.

    A blocking MPI call never returns when its peer is gone; polling ``Test``
    keeps the deadline in Python's hands (MPI spins on the core either way).
    """
    deadline = time.monotonic() + timeout_s
    while not (request.Test(status) if status is not None else request.Test()):
        if time.monotonic() > deadline:
            raise PeerTimeout(f"no answer within {timeout_s:g} s in {what} "
                              "(a peer rank died or hung)")


class MpiComm(Comm):
    backend = "mpi"

    def __init__(self, timeout_s: float = 3600.0):
        from mpi4py import MPI
        self.MPI = MPI
        self.world = MPI.COMM_WORLD
        self.rank, self.size = self.world.Get_rank(), self.world.Get_size()
        self.timeout_s = timeout_s

    def allreduce_sum_(self, buf):
        # Non-blocking + deadline, so a dead peer ends the run after --timeout.
        wait(self.world.Iallreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM),
             self.timeout_s, "MPI allreduce")

    def allgather_obj(self, obj):
        return self.world.allgather(obj)

    def gather_obj(self, obj, root=0):
        return self.world.gather(obj, root=root)

    def bcast_obj(self, obj, root=0):
        return self.world.bcast(obj, root=root)

    def barrier(self):
        self.world.Barrier()


class TorchComm(Comm):
    """torch.distributed (gloo) for runs launched by torchrun."""
    backend = "gloo"

    def __init__(self):
        import torch.distributed as dist
        self.dist = dist
        self.rank, self.size = dist.get_rank(), dist.get_world_size()

    def allreduce_sum_(self, buf):
        import torch
        t = torch.from_numpy(buf)
        self.dist.all_reduce(t)

    def allgather_obj(self, obj):
        out = [None] * self.size
        self.dist.all_gather_object(out, obj)
        return out

    def gather_obj(self, obj, root=0):
        out = [None] * self.size if self.rank == root else None
        self.dist.gather_object(obj, out, dst=root)
        return out

    def bcast_obj(self, obj, root=0):
        box = [obj]
        self.dist.broadcast_object_list(box, src=root)
        return box[0]

    def barrier(self):
        self.dist.barrier()


def make_comm(launch: Launch, timeout_s: float = 3600.0) -> Comm:
    if launch.kind == "mpi":
        return MpiComm(timeout_s)
    if launch.kind == "torchrun":
        return TorchComm()
    return SingleComm()


def init_torch_distributed(launch: Launch, timeout_s: float, backend: str = "gloo") -> None:
    """Join a torch.distributed group; under MPI the rendezvous address comes from rank 0.

    ``timeout_s`` bounds every collective, so a dead peer ends the run instead of hanging it.
    """
    import torch.distributed as dist
    if dist.is_initialized():
        return
    timeout = timedelta(seconds=timeout_s)
    if launch.kind == "torchrun":
        dist.init_process_group(backend, timeout=timeout)
        return
    if launch.kind == "single":
        addr, port = "127.0.0.1", free_port()
    else:
        from mpi4py import MPI
        addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
        port = free_port(addr) if launch.rank == 0 else None
        addr, port = MPI.COMM_WORLD.bcast((addr, port), root=0)
    dist.init_process_group(backend, init_method=f"tcp://{addr}:{port}", rank=launch.rank,
                            world_size=launch.world_size, timeout=timeout)


# --- MPICH's allreduce algorithm (seed 004) ------------------------------------

MPI_ALLREDUCE_ALGORITHMS = ("auto", "ring", "recursive_doubling", "reduce_scatter_allgather")


def select_mpi_allreduce(algorithm: str, environ=os.environ) -> dict[str, str]:
    """Put MPICH's control variables for ``algorithm`` into ``environ``; returns what was set.

    MPICH reads them once, in MPI_Init, which mpi4py calls on ``from mpi4py import
    MPI``: so this must run before ``detect_launch``.  Device-level collectives are
    switched off for a named algorithm, else ch4's own selection could bypass the
    CVAR.  Where the named algorithm cannot serve a call MPICH falls back to its
    automatic choice (``MPIR_CVAR_COLLECTIVE_FALLBACK`` stays at its default):
    MPI_Init itself all-reduces a few integers, too few for
    reduce_scatter_allgather; the gradient buffer (count >= P) is served by all three.
    """
    if algorithm not in MPI_ALLREDUCE_ALGORITHMS:
        raise ValueError(f"unknown MPI allreduce algorithm {algorithm!r}")
    cvars = {"MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": algorithm}
    if algorithm != "auto":
        cvars["MPIR_CVAR_DEVICE_COLLECTIVES"] = "none"
    environ.update(cvars)
    return cvars
