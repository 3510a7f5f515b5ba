"""Asynchronous model averaging through a weight holder (seed 001, method 2).

Every rank trains on its own 1/P shard with local SGD.  Every K local steps
(``--average-every K``, ``DEFAULT_K`` when 0) a worker sends its weights w_i to
the holder and continues from the shared weights v it gets back; workers never
wait for each other, only for the holder's answer.

Layout: rank 0 is the holder *and* a worker (P workers = P ranks, as for the
other schemes).  Between two of its own steps it serves every request that
has arrived (``Iprobe``), so a request waits at most one of rank 0's steps; a
holder thread would compete with rank 0's training for the GIL and a core.
When rank 0 has finished its own shard it only serves, until every other
worker has sent its last weights.

Mixing rule (an elastic moving average)::

    v <- (1 - 1/P) * v + (1/P) * w_i        and then   w_i <- v

With P = 1 this is plain SGD; when the P workers come in turn, each
contributing the progress it made since it last read v, the result is close to
the synchronous mean v = (1/P) sum_i w_i of method 1, which is why 1/P is the
weight.  Rank 0 mixes its own weights the same way (locally).  The final
model is the holder's v after every worker's last weights are mixed in.

With ``--target-accuracy``, rank 0 scores v at the end of each of its epochs;
once it is reached, rank 0 stops and answers every further push with STOP
(unmixed): that worker stops too and sends its last weights as usual.

Imports: mpi4py, numpy, torch, real (dist, models, step).
"""
from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np
import torch

from . import SCHEMES
from real.launch.dist import wait
from real.training.models import flat_params, load_flat_params
from real.training.step import local_epochs

DEFAULT_K = SCHEMES["async_avg"].default_every
PUSH, DONE, REPLY, STOP = 1, 2, 3, 4      # message tags; STOP: the target accuracy is reached


class Holder:
    """The shared weights v on rank 0 and the mixing rule."""

    def __init__(self, v: np.ndarray, workers: int, world, timeout_s: float,
                 alive=lambda: None):
        self.v, self.alpha = v, 1.0 / workers
        self.world, self.timeout_s = world, timeout_s
        self.alive = alive             # tells the recorder (real.launch.supervise) a push came in
        self.buf = np.empty_like(v)
        self.done, self.mixes = 0, 0
        self.stopping = False             # --target-accuracy reached: answer pushes with STOP

    def mix(self, w: np.ndarray) -> None:
        self.v *= 1.0 - self.alpha
        self.v += self.alpha * w
        self.mixes += 1

    def serve(self, block: bool) -> int:
        """Answer the requests that have arrived (all of them, if ``block``); returns bytes sent."""
        from mpi4py import MPI
        sent, status = 0, MPI.Status()
        while True:
            if not self.world.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG, status):
                if not block or self.done == self.world.Get_size() - 1:
                    return sent
                req = self.world.Irecv(self.buf, MPI.ANY_SOURCE, MPI.ANY_TAG)
                wait(req, self.timeout_s, "async_avg: holder waiting for workers", status)
            else:
                self.world.Recv(self.buf, status.Get_source(), status.Get_tag())
            self.alive()
            if status.Get_tag() == DONE:
                self.mix(self.buf)
                self.done += 1
                continue
            if not self.stopping:
                self.mix(self.buf)
            wait(self.world.Isend(self.v, status.Get_source(), STOP if self.stopping else REPLY),
                 self.timeout_s, "async_avg: reply to a worker")
            sent += self.v.nbytes


def prepare(ctx) -> Callable[[], list[float]]:
    """This rank's training, its set-up done: rank 0's ``Holder`` (a copy of the weights as
    v, a receive buffer) is built before the barrier that starts the timed window."""
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    holder = Holder(flat_params(ctx.model).numpy(), ctx.workers, world, ctx.cfg.timeout,
                    ctx.heartbeat.alive if ctx.heartbeat else (lambda: None)) \
        if world.Get_rank() == 0 else None
    return partial(_train, ctx, world, holder)


def train(ctx) -> list[float]:
    return prepare(ctx)()


def _train(ctx, world, holder: Holder | None) -> list[float]:
    from mpi4py import MPI
    log = ctx.log
    k = SCHEMES["async_avg"].averaging_every(ctx.cfg.average_every)
    if holder is not None and ctx.curve is not None:
        ctx.curve.weights = lambda: holder.v          # the point scores the holder's mix

    def exchange(epoch, it):
        """Rank 0: mix own weights every K and serve requests; others: push/pull every K."""
        if holder is not None:
            if (it + 1) % k == 0:
                holder.mix(flat_params(ctx.model).numpy())
                load_flat_params(ctx.model, torch.from_numpy(holder.v))
            return holder.serve(block=False), False
        if (it + 1) % k:
            return None
        w = flat_params(ctx.model).numpy()
        v, status = np.empty_like(w), MPI.Status()
        reply = world.Irecv(v, 0, MPI.ANY_TAG)
        wait(world.Isend(w, 0, PUSH), ctx.cfg.timeout, "async_avg: push to the holder")
        wait(reply, ctx.cfg.timeout, "async_avg: waiting for the holder", status)
        if status.Get_tag() == STOP:          # the holder reached the target: stop here
            ctx.curve.stop = True
        else:
            load_flat_params(ctx.model, torch.from_numpy(v))
        return w.nbytes, False

    def holder_reached() -> bool:
        """Rank 0's epoch end: with a target, score the holder's mix now."""
        if holder is not None and ctx.curve is not None and ctx.curve.reached():
            holder.stopping = True
        return holder is not None and holder.stopping

    epoch_s, t = [], log.now()
    for _ in local_epochs(ctx, log, exchange, stop_check=holder_reached):
        epoch_s.append(log.now() - t)
        t = log.now()
    # The end: workers send their last weights; the holder mixes everyone's in.
    t0 = log.now()
    if holder is None:
        w = flat_params(ctx.model).numpy()
        wait(world.Isend(w, 0, DONE), ctx.cfg.timeout, "async_avg: final push")
        sent = w.nbytes
    else:
        holder.mix(flat_params(ctx.model).numpy())
        sent = holder.serve(block=True)
        load_flat_params(ctx.model, torch.from_numpy(holder.v))
        ctx.extra.update(async_avg_every=k, async_avg_mixes=holder.mixes,
                         async_avg_mixing="v <- (1 - 1/P) v + (1/P) w_i; worker continues from v")
    log.add(len(epoch_s) - 1, -1, 0, t0, t0, log.now(), sent, None, sync=False)
    epoch_s[-1] += log.now() - t
    return epoch_s
