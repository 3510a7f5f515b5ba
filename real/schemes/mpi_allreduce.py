"""Data-parallel training with one MPI Allreduce of a flat gradient buffer (seed 004, algorithm 1).

Each step: copy the gradients into one contiguous float32 buffer, Allreduce it
in place (SUM), divide by P, copy back, step.  MPICH's algorithm for it is
chosen with ``--mpi-allreduce`` (ring, recursive_doubling,
reduce_scatter_allgather, auto) through ``MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM``,
set before MPI starts (``real.launch.dist.select_mpi_allreduce``).

The call is the blocking ``Allreduce`` because the CVAR governs it (the
non-blocking one has its own algorithms); a dead peer is therefore ended by
mpirun, which kills every rank when one exits abnormally.

Imports: mpi4py, torch, real.training.step.
"""
from __future__ import annotations

import torch
from mpi4py import MPI

from real.training.step import flat_grads, load_flat_grads, synchronous_epochs


def mpi_allreduce_mean(model, world) -> int:
    buf = flat_grads(model).cpu().numpy()       # host memory: MPI here is not CUDA-aware
    world.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    buf /= world.Get_size()
    load_flat_grads(model, torch.from_numpy(buf))
    return buf.nbytes


def train(ctx) -> list[float]:
    world = MPI.COMM_WORLD
    return synchronous_epochs(ctx, lambda: mpi_allreduce_mean(ctx.model, world))
