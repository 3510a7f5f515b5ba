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


class MpiComm(Comm):
    backend = "mpi"

    def __init__(self):
        from mpi4py import MPI
        self.MPI = MPI
        self.world = MPI.COMM_WORLD
        self.rank, self.size = self.world.Get_rank(), self.world.Get_size()

    def allreduce_sum_(self, buf):
        self.world.Allreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM)

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


def make_comm(launch: Launch) -> Comm:
    if launch.kind == "mpi":
        return MpiComm()
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
