"""Per-layer gradient all_reduce on gloo (seed 002, part 2b).

After backward, each parameter tensor's gradient is summed over ranks with
``all_reduce(SUM)`` and divided by P (gloo has no average), one call per
tensor, as the sheet asks.  Same data split as ``gather_scatter``, so with
the same seed both give the same losses.

Imports: torch, real.training.step.
"""
from __future__ import annotations

import torch.distributed as dist

from real.training.step import synchronous_epochs


def allreduce_mean(model, size: int) -> int:
    """Average every gradient over ranks in place; returns payload bytes sent."""
    sent = 0
    for p in model.parameters():
        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
        p.grad /= size
        sent += p.grad.nbytes
    return sent


def train(ctx) -> list[float]:
    size = dist.get_world_size()
    return synchronous_epochs(ctx, lambda: allreduce_mean(ctx.model, size))
