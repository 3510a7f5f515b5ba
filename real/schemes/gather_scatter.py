"""Gradient averaging through rank 0 with gather and scatter on gloo (seed 002, part 2a).

After each backward pass every rank copies its gradients into one flat
tensor; rank 0 gathers the P tensors, takes their element-wise mean and
scatters it back; every rank loads the mean into ``.grad`` and steps.  Each
worker trains on its slice of every global batch (``Shard.global_batches``),
so with the same seed the losses equal single-process training at that batch.

Bytes sent are the payload this rank hands to the calls: its gradient to
``gather`` and, on rank 0, the P mean copies to ``scatter``.

Imports: torch, real.training.step.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from real.training.step import flat_grads, load_flat_grads, synchronous_epochs


def gather_scatter_mean(model, rank: int, size: int) -> int:
    """Replace ``.grad`` by the mean over ranks via rank 0; returns payload bytes sent."""
    flat = flat_grads(model)
    parts = [torch.empty_like(flat) for _ in range(size)] if rank == 0 else None
    dist.gather(flat, gather_list=parts, dst=0)
    sent = flat.nbytes
    if rank == 0:
        mean = torch.stack(parts).sum(0) / size
        dist.scatter(flat, scatter_list=[mean] * size, src=0)
        sent += size * mean.nbytes
    else:
        dist.scatter(flat, src=0)
    load_flat_grads(model, flat)
    return sent


def train(ctx) -> list[float]:
    rank, size = dist.get_rank(), dist.get_world_size()
    return synchronous_epochs(ctx, lambda: gather_scatter_mean(ctx.model, rank, size))
