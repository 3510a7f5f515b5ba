"""Which samples a worker's batch holds: the data order of ``real.train``, by scheme.

``real.train`` draws batches two ways (``real.schemes``):

* global-batch schemes (serial, gather_scatter, allreduce, ddp, mpi_allreduce,
  ps_sync): one order of the whole training set per epoch,
  ``randperm(N, seed + 1000 * epoch)``; global batch j is
  ``order[j*G:(j+1)*G]`` (G = P * batch) and worker w's part of it is the
  contiguous slice ``[w*n//P, (w+1)*n//P)``; a last global batch with fewer
  than P samples is dropped;
* per-worker schemes (psgd, async_avg, hogwild, ps_async): worker w trains on
  the contiguous shard ``shard(N, w, P)`` in the order
  ``randperm(len(shard), seed + 1000 * epoch + rank)``, where rank is w, or
  w + 1 under a parameter server (rank 0 is the server).

``BatchOrder`` gives the sample indices of (worker, epoch, batch) either way,
so the replay trains on exactly the samples the real run would have.

Imports: torch, real.training.data, real.schemes.
"""
from __future__ import annotations

import math

import torch

from real import schemes
from real.training.data import shard


class BatchOrderError(ValueError):
    """A schedule whose batches do not fit the data it is replayed on."""


class BatchOrder:
    def __init__(self, scheme: str, workers: int, batch: int, n_samples: int, seed: int):
        self.scheme, self.workers, self.batch = scheme, workers, batch
        self.n, self.seed = n_samples, seed
        self.global_batch = scheme in schemes.GLOBAL_BATCH
        self.rank_offset = schemes.first_worker_rank(scheme)
        self._orders: dict[tuple[int, int], torch.Tensor] = {}

    def batches_per_epoch(self, part: int) -> int:
        """Iterations per epoch of worker ``part`` in ``real.train``."""
        if self.global_batch:
            full, rest = divmod(self.n, self.batch * self.workers)
            return full + (1 if rest >= self.workers else 0)
        sl = shard(self.n, part, self.workers)
        return math.ceil((sl.stop - sl.start) / self.batch)

    def check(self, iterations_per_epoch: int) -> None:
        """The schedule's iterations per epoch must be every worker's real count."""
        for w in range(self.workers):
            real_count = self.batches_per_epoch(w)
            if real_count != iterations_per_epoch:
                raise BatchOrderError(
                    f"the schedule has {iterations_per_epoch} iterations per epoch, but worker "
                    f"{w} of {self.workers} has {real_count} batches of {self.batch} in "
                    f"{self.n} samples; simulate with the same training set size")

    def indices(self, part: int, epoch: int, j: int) -> torch.Tensor:
        """Sample indices of batch ``j`` of ``epoch`` of worker (or global-batch part) ``part``."""
        if self.global_batch:
            g = self.batch * self.workers
            order = self._order(-1, epoch, self.n, self.seed + 1000 * epoch)
            idx = order[j * g:(j + 1) * g]
            if len(idx) < self.workers:
                raise BatchOrderError(f"epoch {epoch} has no global batch {j}")
            return idx[part * len(idx) // self.workers:(part + 1) * len(idx) // self.workers]
        sl = shard(self.n, part, self.workers)
        order = self._order(part, epoch, sl.stop - sl.start,
                            self.seed + 1000 * epoch + part + self.rank_offset)
        idx = order[j * self.batch:(j + 1) * self.batch]
        if len(idx) == 0:
            raise BatchOrderError(f"worker {part} has no batch {j} in epoch {epoch}")
        return idx + sl.start

    def _order(self, part: int, epoch: int, length: int, seed: int) -> torch.Tensor:
        key = (part, epoch)
        if key not in self._orders:
            # Orders of epochs before this one are no longer needed.
            for old in [k for k in self._orders if k[0] == part and k[1] < epoch - 1]:
                del self._orders[old]
            self._orders[key] = torch.randperm(length, generator=torch.Generator().manual_seed(seed))
        return self._orders[key]
