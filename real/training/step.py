"""The single-process pieces every scheme shares: batches, one SGD step, evaluation.

The schemes in ``real/schemes/`` put their distributed part around these, so the
difference between two schemes is the few lines that communicate.

Imports: torch, real.records.timing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from real.records.timing import IterationLog


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

    def global_batches_per_epoch(self, global_batch: int, n_parts: int) -> int:
        full, rest = divmod(len(self), global_batch)
        return full + (1 if rest >= n_parts else 0)

    def global_batches(self, global_batch: int, part: int, n_parts: int, seed: int):
        """Part ``part`` of each of one epoch's global mini-batches: (x, y, global batch size).

        Every part draws the same order (``seed`` does not depend on the rank) and
        cuts each global batch ``order[i*G:(i+1)*G]`` into ``n_parts`` contiguous
        slices, so the union of the parts' batch i is the single-process batch i.
        A last global batch with fewer samples than parts is dropped: some part
        would have nothing to train on.
        """
        g = torch.Generator().manual_seed(seed)
        order = torch.randperm(len(self), generator=g)
        for start in range(0, len(self), global_batch):
            idx = order[start:start + global_batch]
            if len(idx) < n_parts:
                return
            lo, hi = part * len(idx) // n_parts, (part + 1) * len(idx) // n_parts
            yield self.x[idx[lo:hi]], self.y[idx[lo:hi]], len(idx)


def forward_backward(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
                     scale: float = 1.0) -> float:
    """Zero the gradients, run forward and backward; returns the (unscaled) loss.

    ``scale`` multiplies the gradients: a worker holding n_r of a global batch of
    n samples split over P workers uses n_r * P / n, so that the mean over workers
    is the gradient of the global batch's mean loss even when slices differ by one.
    """
    model.zero_grad(set_to_none=True)
    loss = F.nll_loss(model(x), y)
    (loss * scale if scale != 1.0 else loss).backward()
    return loss.item()


def flat_grads(model: torch.nn.Module) -> torch.Tensor:
    """All gradients as one new contiguous float32 vector, in ``model.parameters()`` order,
    on the model's device (``.cpu()`` it for MPI)."""
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                      for p in model.parameters()])


def load_flat_grads(model: torch.nn.Module, flat: torch.Tensor) -> None:
    """Set every parameter's ``.grad`` from a vector made by ``flat_grads`` (on any device)."""
    offset = 0
    for p in model.parameters():
        g = flat[offset:offset + p.numel()].view_as(p)
        if p.grad is None:
            p.grad = g.to(p.device, copy=True)
        else:
            p.grad.copy_(g)
        offset += p.numel()


def sgd_step(model, optimizer, x, y) -> float:
    loss = forward_backward(model, x, y)
    optimizer.step()
    return loss


class RealCompute:
    """A worker's compute, done: forward + backward, and the optimizer's step.

    The schemes call their compute through ``ctx.compute``; a phantom run puts
    ``real.phantom.PhantomCompute`` there, which sleeps the same phases instead.
    """
    mode = "real"

    def forward_backward(self, model, x, y, scale: float = 1.0) -> float | None:
        return forward_backward(model, x, y, scale)

    def update(self, optimizer, batch: int) -> None:
        optimizer.step()

    def step(self, model, optimizer, x, y) -> float | None:
        loss = self.forward_backward(model, x, y)
        self.update(optimizer, len(y))
        return loss


REAL_COMPUTE = RealCompute()


@torch.no_grad()
def evaluate(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
             batch_size: int = 1000) -> tuple[float, float]:
    """(mean loss, accuracy) on a test set; the model is put back in training mode."""
    model.eval()
    device = next(model.parameters()).device
    total_loss, correct = 0.0, 0
    for start in range(0, len(y), batch_size):
        out = model(x[start:start + batch_size].to(device))
        yb = y[start:start + batch_size].to(device)
        total_loss += F.nll_loss(out, yb, reduction="sum").item()
        correct += (out.argmax(1) == yb).sum().item()
    model.train()
    n = max(1, len(y))
    return total_loss / n, correct / n


def decay_lr(optimizer, lr_decay: float) -> None:
    """Multiply the learning rate by (1 - lr_decay): seed 001 lowers it by 1% each epoch."""
    for group in optimizer.param_groups:
        group["lr"] *= 1.0 - lr_decay


def curve_point(ctx, steps_done: int) -> None:
    """An evaluation point after this step, if it is one (``real.records.curve``)."""
    if ctx.curve is not None:
        ctx.curve.after_step(steps_done)


def stopped(ctx) -> bool:
    """The run's target accuracy is reached (``real.records.curve``): stop training."""
    return ctx.curve is not None and ctx.curve.stop


def local_epochs(ctx, log: IterationLog, after_step=None, stop_check=None):
    """Plain local SGD over this rank's shard, epoch by epoch.

    ``after_step(epoch, it) -> (bytes_sent, sync)`` runs the scheme's communication
    after an update (timed as communication); returning None means nothing was sent.
    Yields once per epoch so the caller can time epochs. ``stop_check()`` at each epoch
    end, or a stop learnt in ``after_step``, ends training early (``--target-accuracy``).
    """
    cfg, it = ctx.cfg, 0
    for epoch in range(cfg.epochs):
        for x, y in ctx.shard.batches(ctx.batch_size, ctx.batch_seed(epoch)):
            t0 = log.now()
            loss = ctx.compute.step(ctx.model, ctx.optimizer, x, y)
            t1 = log.now()
            sent, sync = (after_step(epoch, it) if after_step else None) or (0, False)
            log.add(epoch, it, len(y), t0, t1, log.now(), sent, loss, sync)
            ctx.progress(it, loss)
            curve_point(ctx, it + 1)
            it += 1
            if stopped(ctx):
                yield epoch
                return
        decay_lr(ctx.optimizer, cfg.lr_decay)
        yield epoch
        if stop_check is not None and stop_check():
            return


def synchronous_epochs(ctx, sync_grads, model=None) -> list[float]:
    """Gradient-synchronous data parallelism: every worker takes its slice of each global batch.

    ``sync_grads() -> bytes_sent`` replaces this worker's gradients by the mean
    over workers (the scheme's distributed part, timed as one synchronising
    call); then every worker takes the same SGD step.  ``model`` is what runs
    forward (DDP's wrapper); returns the epoch times.
    """
    cfg, log, it, epoch_s = ctx.cfg, ctx.log, 0, []
    model = model or ctx.model
    for epoch in range(cfg.epochs):
        t_epoch = log.now()
        for x, y, n_global in ctx.shard.global_batches(ctx.global_batch, ctx.worker_index,
                                                       ctx.workers, ctx.global_seed(epoch)):
            t0 = log.now()
            loss = ctx.compute.forward_backward(model, x, y, scale=len(y) * ctx.workers / n_global)
            t1 = log.now()
            sent = sync_grads()
            t2 = log.now()
            ctx.compute.update(ctx.optimizer, len(y))
            step_s = log.now() - t2
            # The update is compute too: shift the start back by its duration.
            log.add(epoch, it, len(y), t0 - step_s, t1, t2, sent, loss, sync=True)
            ctx.progress(it, loss)
            curve_point(ctx, it + 1)
            it += 1
        decay_lr(ctx.optimizer, cfg.lr_decay)
        epoch_s.append(log.now() - t_epoch)
        if ctx.curve is not None and ctx.curve.agree(ctx):     # --target-accuracy reached
            break
    return epoch_s
