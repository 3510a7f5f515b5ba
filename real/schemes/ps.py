"""Parameter server over mpi4py point-to-point messages (seed 003, algorithm 1).

Layout: rank 0 is the server and holds the weights w; ranks 1..P are the P
workers (``mpirun -n P+1``; ``EXTRA_RANKS`` in this package says so to the
sweep).  The server has no training rows of its own: its rows (batch size 0)
hold the time of each update (``compute_s``) and of its messages (``comm_s``).

Messages are numpy buffers: a header ``[version, done]`` (int64) then the
float32 vector (gradients up, weights down).  ``version`` counts the server's
updates, so a gradient computed on version v and applied when the server is at
version u has staleness u - v.

Update rule: ``w <- w - lr * g``, where g is the *mean* of the workers'
gradients (each the gradient of the mean loss on its batch).  The sheet sums
per-sample gradients over all clients; the mean is that sum divided by the
global batch, so ``--lr`` means what it means for serial SGD and allreduce.
The server's optimizer is ``torch.optim.SGD`` on its own model, so momentum and
the per-epoch learning-rate decay behave as in every other scheme.

* ``ps_sync``: each iteration the server receives one push from every worker
  (in arrival order), averages, steps once and sends the new w to all.
  Workers take their slice of each global batch (as allreduce does), so the
  losses match single-process training; staleness is always 0.
* ``ps_async``: the server applies each push alone as it arrives
  (``Recv`` from ``ANY_SOURCE``) and answers that worker with the current w;
  workers train on their own 1/P shard at their own pace.  The staleness of
  every applied gradient goes into the record as a histogram, and the order of
  the pushes as ``push_order`` (per update: the worker, the version its gradient
  was computed on, the training time it was applied at, and where the server's
  turn went: the wait for the push's header, the rest of its receive, the answer's
  send): the measured schedule, which ``simulator.measured_schedule`` turns into a
  schedule the replay can train on.

With ``--target-accuracy`` the server scores w at the end of each of its
epochs; once the target is reached it answers every worker's next push with
``done`` instead of w, and the workers stop.

Imports: mpi4py, numpy, torch, real (data, dist, models, step).
"""
from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Callable
from functools import partial

import numpy as np
import torch

from real.launch.dist import wait
from real.training.models import flat_params, load_flat_params
from real.training.step import decay_lr, flat_grads, load_flat_grads

SERVER = 0
HEADER, VECTOR = 1, 2        # message tags


class Link:
    """The messages between one rank and another, each with a deadline (``--timeout``)."""

    def __init__(self, world, timeout_s: float):
        self.world, self.timeout_s = world, timeout_s

    def send(self, dest: int, version: int, vec: np.ndarray | None, done: bool = False) -> int:
        header = np.array([version, int(done)], dtype=np.int64)
        reqs = [self.world.Isend(header, dest, HEADER)]
        if vec is not None:
            reqs.append(self.world.Isend(vec, dest, VECTOR))
        for r in reqs:
            wait(r, self.timeout_s, f"parameter server: send to rank {dest}")
        return header.nbytes + (vec.nbytes if vec is not None else 0)

    def recv(self, source: int, vec: np.ndarray) -> tuple[int, int, bool]:
        """(source, version, done); ``vec`` is filled unless done. ``header_s``: how long
        the header took to come (the wait for a push), the rest being the vector's."""
        from mpi4py import MPI
        header, status = np.empty(2, dtype=np.int64), MPI.Status()
        t0 = time.perf_counter()
        wait(self.world.Irecv(header, source, HEADER), self.timeout_s,
             f"parameter server: receive from {'any worker' if source < 0 else f'rank {source}'}",
             status)
        self.header_s = time.perf_counter() - t0
        src, done = status.Get_source(), bool(header[1])
        if not done:    # MPI keeps the order of two messages from one sender
            wait(self.world.Irecv(vec, src, VECTOR), self.timeout_s,
                 f"parameter server: receive from rank {src}")
        return src, int(header[0]), done


def _setup(ctx):
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    return world, Link(world, ctx.cfg.timeout), flat_params(ctx.model).numpy()


# --- workers -----------------------------------------------------------------

def _worker(ctx, batches_of_epoch, sync: bool, setup) -> list[float]:
    """Pull w, compute the gradient of one batch, push it, pull the new w; repeat.
    ``setup``: ``_setup(ctx)``, built before training."""
    world, link, w = setup
    log, it, epoch_s = ctx.log, 0, []
    _, version, _ = link.recv(SERVER, w)
    load_flat_params(ctx.model, torch.from_numpy(w))
    stop = False                # the server reached --target-accuracy: it answers "done"
    for epoch in range(ctx.cfg.epochs):
        t_epoch = log.now()
        for x, y, scale in batches_of_epoch(epoch):
            t0 = log.now()
            loss = ctx.compute.forward_backward(ctx.model, x, y, scale)
            g = flat_grads(ctx.model).cpu().numpy()
            t1 = log.now()
            sent = link.send(SERVER, version, g)
            _, version, stop = link.recv(SERVER, w)
            if not stop:
                load_flat_params(ctx.model, torch.from_numpy(w))
            log.add(epoch, it, len(y), t0, t1, log.now(), sent, loss, sync=sync)
            ctx.progress(it, loss)
            it += 1
            if stop:
                break
        epoch_s.append(log.now() - t_epoch)
        if stop:
            break
    if not sync and not stop:
        link.send(SERVER, version, None, done=True)
    return epoch_s


def _global_batches(ctx):
    def of_epoch(epoch):
        for x, y, n in ctx.shard.global_batches(ctx.global_batch, ctx.worker_index, ctx.workers,
                                                ctx.global_seed(epoch)):
            yield x, y, len(y) * ctx.workers / n
    return of_epoch


def _own_batches(ctx):
    def of_epoch(epoch):
        for x, y in ctx.shard.batches(ctx.batch_size, ctx.batch_seed(epoch)):
            yield x, y, 1.0
    return of_epoch


# --- server ------------------------------------------------------------------

def server_update(model, optimizer, grad: np.ndarray, w: np.ndarray) -> None:
    """The server's update, as both servers apply it: ``grad`` (flat float32) into the
    model's ``.grad`` tensors, one step of its optimizer, the new weights into ``w``
    (the flat vector the server sends). ``calibrate.probes.compute_probe.server_update_rows``
    times this function per model, so the simulator's server charges what the server runs."""
    load_flat_grads(model, torch.from_numpy(grad))
    optimizer.step()
    w[:] = flat_params(model).numpy()


class Server:
    """The weights, the update, and what the record keeps about them."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.world, self.link, self.w = _setup(ctx)
        self.grad = np.empty_like(self.w)          # each push is received into it
        self.version = 0
        self.update_s: list[float] = []
        self.staleness: Counter = Counter()
        self.pushes: dict[str, list] = {"worker": [], "read": [], "t_s": [], "header_s": [],
                                        "vector_s": [], "answer_s": []}

    def pushed(self, worker: int, read: int, t_s: float) -> None:
        """The push about to be applied (to version ``self.version``): ps_async's order."""
        self.pushes["worker"].append(int(worker))
        self.pushes["read"].append(int(read))
        self.pushes["t_s"].append(round(float(t_s), 6))

    def turn(self, recv_s: float, answer_s: float) -> None:
        """Where the server's turn of the last push went: the wait for its header
        (``Link.header_s``), the rest of its receive (the vector), the answer's send."""
        header_s = min(self.link.header_s, recv_s)
        for key, s in (("header_s", header_s), ("vector_s", recv_s - header_s),
                       ("answer_s", answer_s)):
            self.pushes[key].append(round(float(s), 6))

    def apply(self, mean_grad: np.ndarray) -> None:
        t0 = self.ctx.log.now()
        server_update(self.ctx.model, self.ctx.optimizer, mean_grad, self.w)
        self.version += 1
        self.update_s.append(self.ctx.log.now() - t0)

    def curve_point(self, per_epoch: int, every: int) -> None:
        """An evaluation point of the server's weights after ``version`` updates, if it is
        one: every ``every`` updates and each ``per_epoch`` (``real.records.curve``)."""
        if self.ctx.curve is None:
            return
        self.ctx.curve.weights = lambda: self.w
        self.ctx.curve.after_step(self.version, per_epoch, per_epoch * self.ctx.cfg.epochs, every)

    def broadcast(self, done: bool = False) -> int:
        """The new w to every worker, or (``done``: the target is reached) the end."""
        return sum(self.link.send(r, self.version, None if done else self.w, done)
                   for r in range(1, self.world.Get_size()))

    def record(self, extra: dict) -> None:
        extra.update(server_rank=SERVER, server_updates=self.version,
                     server_update_s=self.update_s,
                     server_update_median_s=statistics.median(self.update_s)
                     if self.update_s else None,
                     staleness_histogram={int(k): v for k, v in sorted(self.staleness.items())},
                     staleness_max=max(self.staleness, default=0),
                     staleness_mean=(sum(k * v for k, v in self.staleness.items())
                                     / max(1, sum(self.staleness.values()))))
        if self.pushes["worker"]:
            extra.update(push_order=self.pushes)


def serve_sync(ctx, s: Server, acc: np.ndarray) -> list[float]:
    """The synchronous server's training; ``s`` and ``acc`` (the sum of an iteration's
    pushes, a vector like w) are built before it (``prepare_sync``)."""
    log, workers = ctx.log, ctx.workers
    per_epoch = ctx.shard.global_batches_per_epoch(ctx.global_batch, workers)
    grad = s.grad
    epoch_s, t, stop = [], log.now(), False
    sent = s.broadcast()                                # the first w: a communication-only row
    log.add(0, -1, 0, t, t, log.now(), sent, None)
    for epoch in range(ctx.cfg.epochs):
        for i in range(per_epoch):
            t0 = log.now()
            acc[:] = 0.0
            for _ in range(workers):
                _, version, _ = s.link.recv(_any(), grad)
                s.staleness[s.version - version] += 1
                acc += grad
            t1 = log.now()
            s.apply(acc / workers)
            t2 = log.now()
            s.curve_point(per_epoch, ctx.cfg.eval_every)
            stop = i == per_epoch - 1 and ctx.curve is not None and ctx.curve.reached()
            sent = s.broadcast(done=stop)
            # compute_s = the update; comm_s = receiving pushes + sending w
            log.add(epoch, epoch * per_epoch + i, 0, t1, t2, t2 + (t1 - t0) + (log.now() - t2),
                    sent, None)
            ctx.progress(s.version, 0.0)
        decay_lr(ctx.optimizer, ctx.cfg.lr_decay)
        epoch_s.append(log.now() - t)
        t = log.now()
        if stop:
            break
    s.record(ctx.extra)
    return epoch_s


def serve_async(ctx, s: Server) -> list[float]:
    """The asynchronous server's training; ``s`` is built before it (``prepare_async``)."""
    log, grad = ctx.log, s.grad
    from real.training.data import shard
    n = len(ctx.shard)
    per_epoch = sum(-(-len(range(n)[shard(n, r, ctx.workers)]) // ctx.batch_size)
                    for r in range(ctx.workers))
    epoch_s, t, done = [], log.now(), 0
    start, paused = t, (lambda: ctx.curve.paused_s if ctx.curve is not None else 0.0)
    sent = s.broadcast()                                # the first w: a communication-only row
    log.add(0, -1, 0, t, t, log.now(), sent, None)
    stop = False                # --target-accuracy reached: every later push is answered "done"
    while done < ctx.workers:
        t0 = log.now()
        src, version, finished = s.link.recv(_any(), grad)
        if finished or stop:
            if stop and not finished:
                s.link.send(src, s.version, None, done=True)
            done += 1
            continue
        s.staleness[s.version - version] += 1
        t1 = log.now()
        s.apply(grad)
        t2 = log.now()
        s.pushed(src - 1, version, t2 - start - paused())        # ranks 1..P: workers 0..P-1
        s.curve_point(per_epoch, ctx.cfg.eval_every * ctx.workers)
        stop = (s.version % per_epoch == 0 and ctx.curve is not None
                and ctx.curve.reached())
        t3 = log.now()
        sent = s.link.send(src, s.version, None if stop else s.w, done=stop)
        s.turn(t1 - t0, log.now() - t3)
        done += stop
        epoch = min((s.version - 1) // per_epoch, ctx.cfg.epochs - 1)
        log.add(epoch, s.version - 1, 0, t1, t2, t2 + (t1 - t0) + (log.now() - t2), sent, None)
        ctx.progress(s.version, 0.0)
        if s.version % per_epoch == 0:
            decay_lr(ctx.optimizer, ctx.cfg.lr_decay)
            epoch_s.append(log.now() - t)
            t = log.now()
    if len(epoch_s) < ctx.cfg.epochs and not stop:
        epoch_s.append(log.now() - t)
    s.record(ctx.extra)
    return epoch_s


def _any() -> int:
    from mpi4py import MPI
    return MPI.ANY_SOURCE


def prepare_sync(ctx) -> Callable[[], list[float]]:
    """ps_sync's training of this rank, its set-up done: the server's ``Server`` (a copy of
    w, the push buffer) and its sum of pushes, a worker's copy of w to receive into; the
    first w's send and receive are training (the model's first iteration prices them)."""
    if ctx.worker_index is None:
        s = Server(ctx)
        return partial(serve_sync, ctx, s, np.zeros_like(s.w))
    return partial(_worker, ctx, _global_batches(ctx), True, _setup(ctx))


def prepare_async(ctx) -> Callable[[], list[float]]:
    """ps_async's training of this rank, its set-up done (as ``prepare_sync``)."""
    if ctx.worker_index is None:
        return partial(serve_async, ctx, Server(ctx))
    return partial(_worker, ctx, _own_batches(ctx), False, _setup(ctx))


def train_sync(ctx) -> list[float]:
    return prepare_sync(ctx)()


def train_async(ctx) -> list[float]:
    return prepare_async(ctx)()
