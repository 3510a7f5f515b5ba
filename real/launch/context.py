"""What a scheme gets to run with: config, communicator, model, data, log.

Imports: torch, real (dist, step, timing).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from real.launch.dist import Comm, Launch
from real.training.step import REAL_COMPUTE, Shard
from real.records.timing import IterationLog

FAULT_RANK_ENV = "PSGD_FAULT_RANK"
FAULT_ITER_ENV = "PSGD_FAULT_AT_ITER"
FAULT_SIGNAL_ENV = "PSGD_FAULT_SIGNAL"


@dataclass
class RunContext:
    """One process's view of a run.

    ``shard`` is what this process may draw batches from: its own 1/P of the
    training set for the per-worker schemes (psgd, async_avg, ps_async), the whole
    set for the global-batch schemes (each worker cuts its slice out of every
    global batch, see ``Shard.global_batches``) and for hogwild (whose processes
    cut their shards themselves).
    """
    cfg: Any                       # argparse.Namespace of real.train
    launch: Launch
    comm: Comm
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    shard: Shard
    log: IterationLog
    progress: Callable[[int, float], None] = lambda it, loss: None
    extra: dict = field(default_factory=dict)   # scheme-specific results for the record
    workers: int = 1               # processes that train (a parameter server is not one)
    worker_index: int | None = 0   # this process's index among them (None: the server)
    batch_size: int = 64           # per worker and step
    global_batch: int = 64         # samples per synchronous step over all workers
    train_span: tuple[float, float] | None = None  # set by schemes that time training themselves
    curve: Any = None              # real.records.curve.CurveLog: this process's evaluation points
    heartbeat: Any = None          # real.launch.supervise.Heartbeat: phases and iterations for the recorder
    sleeps: Any = None             # phantom compute: its summary() of sleeps (real.phantom.compute)
    compute: Any = REAL_COMPUTE    # forward, backward, update: done (real) or slept (real.phantom)

    def batch_seed(self, epoch: int) -> int:
        """Shuffling seed: differs per rank and epoch, reproducible from --seed."""
        return self.cfg.seed + 1000 * epoch + self.launch.rank

    def global_seed(self, epoch: int) -> int:
        """Seed of an epoch's global order: the same on every rank (equal to serial's rank 0)."""
        return self.cfg.seed + 1000 * epoch


def fault_hook(rank: int, environ=os.environ) -> Callable[[int], None]:
    """Test-only fault injection: ``PSGD_FAULT_RANK=r PSGD_FAULT_AT_ITER=i`` make rank r die at
    iteration i.

    The process ends with ``os._exit(1)``: no clean-up, no record, as a crash would;
    with ``PSGD_FAULT_SIGNAL=9`` it is killed by that signal instead (SIGKILL: as the
    out-of-memory killer or ``kill -9`` would), and with ``PSGD_FAULT_SIGNAL=hang``
    it stops there for good, as a rank stuck in a call that never returns.
    """
    if environ.get(FAULT_RANK_ENV, "") != str(rank):
        return lambda it: None
    at = int(environ.get(FAULT_ITER_ENV, "0"))
    how = environ.get(FAULT_SIGNAL_ENV, "")

    def check(it: int) -> None:
        if it >= at:
            import signal
            import sys
            import time
            print(f"rank {rank}: fault injected at iteration {it} ({FAULT_RANK_ENV}), "
                  f"{'hanging' if how == 'hang' else 'dying'}", file=sys.stderr, flush=True)
            if how == "hang":
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
                while True:
                    time.sleep(3600)
            if how.isdigit():
                os.kill(os.getpid(), int(how))
            os._exit(1)
    return check
