"""Parallel SGD with model averaging (seed 000 part 1, seed 001 method 1).

Every rank starts from the same weights, runs SGD on its own disjoint 1/P shard,
and the weights are averaged with an MPI Allreduce, v = (1/P) * sum_i w_i:
once at the end (``--average-every 0``, the exercise's one-shot PSGD) or every
K local iterations (``--average-every K``).

Imports: torch, real (models, step).
"""
from __future__ import annotations

import torch

from real.records.curve import psgd_agreed_stop
from real.training.models import flat_params, load_flat_params
from real.training.step import local_epochs


def average_weights(ctx) -> int:
    """Replace the local weights by the mean over ranks; returns payload bytes sent."""
    flat = flat_params(ctx.model).numpy()
    ctx.comm.allreduce_sum_(flat)
    flat /= ctx.comm.size
    load_flat_params(ctx.model, torch.from_numpy(flat))
    return flat.nbytes


def train(ctx) -> list[float]:
    k = ctx.cfg.average_every
    log = ctx.log

    def every_k(epoch, it):
        if k and (it + 1) % k == 0:
            return average_weights(ctx), True
        return None

    epoch_s, t = [], log.now()
    for epoch in local_epochs(ctx, log, every_k, stop_check=lambda: psgd_agreed_stop(ctx)):
        epoch_s.append(log.now() - t)
        t = log.now()
    # One-shot (or final) averaging: a communication-only row, iteration -1.
    t0 = log.now()
    sent = average_weights(ctx)
    log.add(len(epoch_s) - 1, -1, 0, t0, t0, log.now(), sent, None, sync=True)
    epoch_s[-1] += log.now() - t
    return epoch_s
