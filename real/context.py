"""What a scheme gets to run with: config, communicator, model, shard, log."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .dist import Comm, Launch
from .step import Shard
from .timing import IterationLog


@dataclass
class RunContext:
    cfg: Any                       # argparse.Namespace of real.train
    launch: Launch
    comm: Comm
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    shard: Shard
    log: IterationLog
    progress: Callable[[int, float], None] = lambda it, loss: None
    extra: dict = field(default_factory=dict)   # scheme-specific results for the record

    def batch_seed(self, epoch: int) -> int:
        """Shuffling seed: differs per rank and epoch, reproducible from --seed."""
        return self.cfg.seed + 1000 * epoch + self.launch.rank
