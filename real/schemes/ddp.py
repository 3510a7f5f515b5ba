"""torch DistributedDataParallel on gloo (seed 002 part 3, seed 004).

DDP all-reduces gradients in buckets while backward still runs, so the
communication cannot be timed apart from compute: a row's ``compute_s`` holds
forward + backward (with the overlapped all-reduce) + update and ``comm_s`` is
zero.  A communication hook counts the bytes of every bucket it all-reduces.
Same data split as ``gather_scatter`` / ``allreduce``.

Imports: torch, real.step.
"""
from __future__ import annotations

import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel

from ..step import synchronous_epochs


def train(ctx) -> list[float]:
    device = next(ctx.model.parameters()).device
    ddp = DistributedDataParallel(ctx.model,
                                  device_ids=[device.index] if device.type == "cuda" else None)
    counter = {"bytes": 0}

    def counting_hook(state, bucket):
        counter["bytes"] += bucket.buffer().nbytes
        return allreduce_hook(state, bucket)

    ddp.register_comm_hook(dist.group.WORLD, counting_hook)

    def bytes_since_last():
        sent, counter["bytes"] = counter["bytes"], 0
        return sent

    ctx.extra["ddp_comm_overlapped"] = True
    return synchronous_epochs(ctx, bytes_since_last, model=ddp)
