"""torch DistributedDataParallel on gloo (seed 002 part 3, seed 004).

DDP all-reduces gradients in buckets while backward still runs, so the
communication cannot be timed apart from compute: a row's ``compute_s`` holds
forward + backward (with the overlapped all-reduce) + update and ``comm_s`` is
zero.  A communication hook counts the bytes of every bucket it all-reduces.
Same data split as ``gather_scatter`` / ``allreduce``.

In a phantom run (``real.phantom``) the hook also notes when each step's first
bucket was launched, and the record keeps how long before the end of the
step's backward compute that was (``ddp_first_bucket_lead_s``: per step, the
last backward sleep's end minus the first launch; positive: the bucket's
all_reduce overlapped backward).

Imports: torch, real.training.step.
"""
from __future__ import annotations

import statistics
import time

import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel

from real.training.step import synchronous_epochs


def train(ctx) -> list[float]:
    device = next(ctx.model.parameters()).device
    ddp = DistributedDataParallel(ctx.model,
                                  device_ids=[device.index] if device.type == "cuda" else None)
    counter = {"bytes": 0, "first_t": None}
    leads: list[float] = []

    def counting_hook(state, bucket):
        if counter["first_t"] is None:
            counter["first_t"] = time.monotonic()
        counter["bytes"] += bucket.buffer().nbytes
        return allreduce_hook(state, bucket)

    ddp.register_comm_hook(dist.group.WORLD, counting_hook)
    stand_in = ctx.model if ctx.compute.mode == "phantom" else None

    def bytes_since_last():
        sent, counter["bytes"] = counter["bytes"], 0
        if stand_in is not None and counter["first_t"] is not None:
            leads.append(stand_in.backward_end_t - counter["first_t"])
        counter["first_t"] = None
        return sent

    ctx.extra["ddp_comm_overlapped"] = True
    epoch_s = synchronous_epochs(ctx, bytes_since_last, model=ddp)
    if leads:
        ctx.extra["ddp_first_bucket_lead_s"] = statistics.median(leads)
    return epoch_s
