"""The single-process pieces every scheme shares: batches, one SGD step, evaluation.

The schemes in ``real/schemes/`` put their distributed part around these, so the
difference between two schemes is the few lines that communicate.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .timing import IterationLog


@dataclass
class Shard:
    """This rank's training samples (a view on the dataset, no copy)."""
    x: torch.Tensor
    y: torch.Tensor

    def __len__(self) -> int:
        return len(self.y)

    def batches_per_epoch(self, batch_size: int) -> int:
        return math.ceil(len(self) / batch_size)

    def batches(self, batch_size: int, seed: int):
        """Shuffled mini-batches of one epoch; the order depends only on ``seed``."""
        g = torch.Generator().manual_seed(seed)
        order = torch.randperm(len(self), generator=g)
        for start in range(0, len(self), batch_size):
            idx = order[start:start + batch_size]
            yield self.x[idx], self.y[idx]


def forward_backward(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Zero the gradients, run forward and backward; returns the loss (log-prob models)."""
    model.zero_grad(set_to_none=True)
    loss = F.nll_loss(model(x), y)
    loss.backward()
    return loss.item()


def sgd_step(model, optimizer, x, y) -> float:
    loss = forward_backward(model, x, y)
    optimizer.step()
    return loss


@torch.no_grad()
def evaluate(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
             batch_size: int = 1000) -> tuple[float, float]:
    """(mean loss, accuracy) on a test set; the model is put back in training mode."""
    model.eval()
    total_loss, correct = 0.0, 0
    for start in range(0, len(y), batch_size):
        out = model(x[start:start + batch_size])
        yb = y[start:start + batch_size]
        total_loss += F.nll_loss(out, yb, reduction="sum").item()
        correct += (out.argmax(1) == yb).sum().item()
    model.train()
    n = max(1, len(y))
    return total_loss / n, correct / n


def decay_lr(optimizer, lr_decay: float) -> None:
    """Multiply the learning rate by (1 - lr_decay): seed 001 lowers it by 1% each epoch."""
    for group in optimizer.param_groups:
        group["lr"] *= 1.0 - lr_decay


def local_epochs(ctx, log: IterationLog, after_step=None):
    """Plain local SGD over this rank's shard, epoch by epoch.

    ``after_step(epoch, it) -> (bytes_sent, sync)`` runs the scheme's communication
    after an update (timed as communication); returning None means nothing was sent.
    Yields once per epoch so the caller can time epochs.
    """
    cfg, it = ctx.cfg, 0
    for epoch in range(cfg.epochs):
        for x, y in ctx.shard.batches(cfg.batch_size, ctx.batch_seed(epoch)):
            t0 = log.now()
            loss = sgd_step(ctx.model, ctx.optimizer, x, y)
            t1 = log.now()
            sent, sync = (after_step(epoch, it) if after_step else None) or (0, False)
            log.add(epoch, it, len(y), t0, t1, log.now(), sent, loss, sync)
            ctx.progress(it, loss)
            it += 1
        decay_lr(ctx.optimizer, cfg.lr_decay)
        yield epoch
