"""DDP's ``no_sync()`` under gradient accumulation: the gradients cross once every K
iterations.

PyTorch's recipe for accumulation with DDP runs K - 1 micro-steps inside
``model.no_sync()`` and the K-th outside it: inside, DDP's forward leaves
``require_backward_grad_sync`` off, so the Reducer is not prepared for the backward
(``DistributedDataParallel._pre_forward``: ``prepare_for_backward`` only when
``require_backward_grad_sync``) and its autograd hooks return before copying a gradient
into a bucket (``Reducer::autograd_hook``: ``if (!expect_autograd_hooks_) return``,
``torch/csrc/distributed/c10d/reducer.cpp``): no bucket, no allreduce, no gradient copied
back; the buffers are still broadcast before every forward (``_sync_buffers`` hangs on
``require_forward_param_sync``, which ``no_sync`` leaves on). The K-th backward
allreduces the sum of the K gradients, its buckets overlapping that backward alone.

The engines take such a run as one iteration per K micro-steps (``grouped``): each
rank's K steps in a row, the gradient exchange over the last micro-step's backward
(``Plan.backward_fraction`` scaled to it); ``per_micro_step`` gives the result back in
micro-steps. So an iteration's mean is ``(K s + e) / K`` where every micro-step is ``s``
and the exchange exposes ``e`` after the last backward: DDP's exposed communication paid
once in K (``tests/test_no_sync.py``).

Imports: numpy, contracts.checks.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from contracts.checks import ConfigError


def sync_every(run, workload) -> int:
    """How many iterations a gradient exchange covers: ``workload.accumulation_steps``
    where the run is DDP (buckets) on accelerator hosts with ``workload.no_sync``, else
    1 (every iteration)."""
    if (not workload.no_sync or run.cluster.device is None
            or run.spec.exchange != "buckets"):
        return 1
    return workload.accumulation_steps


def sync_steps(iterations: int, every: int) -> np.ndarray:
    """Which of ``iterations`` micro-steps exchange the gradients: the last of each K
    (and the run's last, whatever its count)."""
    i = np.arange(iterations)
    return ((i + 1) % every == 0) | (i == iterations - 1)


def grouped(steps, plan, every: int, schedule: bool = False):
    """Each rank's micro-steps summed K at a time (the last group holds the rest) and the
    plan of one iteration a group: ``plan.iterations`` groups, the backward that the
    exchange overlaps the last micro-step's (``backward_fraction`` times the last
    micro-step's share of its group, in the ranks' means over the groups of K; the engines
    take one fraction for every group, so a last group of fewer than K micro-steps
    overlaps its exchange with less than its last backward). ``every`` 1: as given."""
    if every <= 1:
        return steps, plan
    if schedule:
        raise ConfigError("the update schedule with DDP's no_sync() is not modelled: "
                          "drop --no-sync or the schedule")
    bounds = np.flatnonzero(sync_steps(plan.iterations, every)) + 1
    starts = np.concatenate(([0], bounds[:-1]))
    sums = [np.add.reduceat(np.asarray(s, dtype=float), starts) for s in steps]
    full = np.diff(np.concatenate(([0], bounds))) == every
    full = full if full.any() else np.ones_like(full)
    last = float(np.mean([np.asarray(s, dtype=float)[bounds - 1][full].mean() for s in steps]))
    group = float(np.mean([s[full].mean() for s in sums]))
    share = last / group if group > 0 else 1.0
    return sums, replace(plan, iterations=len(bounds),
                         backward_fraction=plan.backward_fraction * share)


def per_micro_step(result, workload, iterations: int, every: int):
    """``result`` of a grouped run in micro-steps again: ``iterations`` a worker, the
    epoch its ``iterations_per_epoch`` of them (the time of all of them scaled)."""
    if every <= 1:
        return result
    per_epoch = workload.iterations_per_epoch(result.workers)
    return replace(result, iterations_per_worker=iterations, iterations_per_epoch=per_epoch,
                   epoch_s=result.time_s * per_epoch / iterations,
                   simulated_iterations=min(iterations, result.simulated_iterations * every))
