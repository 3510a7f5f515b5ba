"""Plain mini-batch SGD in one process: the P = 1 baseline of every speedup.

Imports: real.training.step.
"""
from __future__ import annotations

from real.records.curve import agreed_stop
from real.training.step import local_epochs


def train(ctx) -> list[float]:
    epoch_s, t = [], ctx.log.now()
    for _ in local_epochs(ctx, ctx.log, stop_check=lambda: agreed_stop(ctx)):
        epoch_s.append(ctx.log.now() - t)
        t = ctx.log.now()
    return epoch_s
