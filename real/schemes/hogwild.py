"""HogWild!: P processes update one model in shared memory without locks (seed 000, part 2).

    python -m real.train --schemes hogwild --workers 4

As in pytorch/examples' ``mnist_hogwild``: the model's parameters are moved to
shared memory (``share_memory()``), P processes are forked from this one
(torch.multiprocessing), each runs plain SGD on its own 1/P shard with its own
optimizer and writes its updates straight into the shared tensors; nobody
locks, so updates can overwrite each other (the algorithm's point).  Each
process uses floor(cores / P) threads, at least 1.  The final model is the
shared one, evaluated by the parent.

Each process times its own steps (rows with ``rank`` = process index) and
sends them back through a queue.  The training span is from the first
process's start to the last one's end (the fork is not in it), and
``extra.updates_per_s`` is all processes' steps over that span.  A process that
dies ends the run: the others are killed and the run is recorded as failed.
With ``--target-accuracy``, process 0 scores the shared model at the end of
each of its epochs and, once it is reached, sets an event every process
checks before each step.

Imports: torch, real (context, data, dist, step, timing).
"""
from __future__ import annotations

import os
import queue
import sys

import torch
import torch.multiprocessing as mp

from real.launch.context import fault_hook
from real.training.data import shard
from real.launch.dist import threads_per_rank
from real.training.step import Shard, decay_lr, sgd_step
from real.records.timing import IterationLog

POLL_S = 0.2


def _process(ctx, index: int, threads: int, results, start, stop) -> None:
    """One HogWild process: SGD on shard ``index`` of the shared model."""
    torch.set_num_threads(threads)
    cfg, model = ctx.cfg, ctx.model
    part = shard(len(ctx.shard), index, ctx.workers)
    data = Shard(ctx.shard.x[part], ctx.shard.y[part])
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
    log, fault, it, epoch_s = IterationLog(index), fault_hook(index), 0, []
    curve = ctx.curve if index == 0 else None     # process 0 copies the shared weights
    start.wait()
    t_begin = log.now()
    for epoch in range(cfg.epochs):
        t_epoch = log.now()
        for x, y in data.batches(ctx.batch_size, cfg.seed + 1000 * epoch + index):
            if stop.is_set():
                break
            fault(it)
            t0 = log.now()
            loss = sgd_step(model, opt, x, y)
            t1 = log.now()
            log.add(epoch, it, len(y), t0, t1, t1, 0, loss)
            if index == 0 and it % cfg.log_every == 0:
                print(f"iteration {it:5d}  loss {loss:.4f}", flush=True)
            if curve is not None:
                curve.after_step(it + 1)
            it += 1
        decay_lr(opt, cfg.lr_decay)
        epoch_s.append(log.now() - t_epoch)
        if curve is not None and curve.reached():     # --target-accuracy: everyone stops
            stop.set()
        if stop.is_set():
            break
    results.put((index, log.rows, epoch_s, t_begin, log.now(),
                 (_plain(curve.points), curve.paused_s) if curve is not None else None))


def _plain(points: list[dict]) -> list[dict]:
    """Weights as numpy arrays: pickled by value through the queue, not as shared memory
    that would vanish with this process."""
    return [{**p, "weights": p["weights"].numpy()} for p in points]


def train(ctx) -> list[float]:
    p = ctx.workers
    threads = ctx.cfg.threads or threads_per_rank(os.cpu_count() or 1, p)
    ctx.model.share_memory()
    mpctx = mp.get_context("fork")    # children inherit the data and the shared model
    results, start, stop = mpctx.Queue(), mpctx.Barrier(p), mpctx.Event()
    procs = [mpctx.Process(target=_process, args=(ctx, i, threads, results, start, stop),
                           daemon=True) for i in range(p)]
    for proc in procs:
        proc.start()
    done = _collect(procs, results, p)
    rows = [row for _, rs, *_ in done for row in rs]
    if ctx.curve is not None and done[0][5] is not None:
        ctx.curve.points, ctx.curve.paused_s = done[0][5]
    ctx.log.rows[:] = rows
    t_first, t_last = min(d[3] for d in done), max(d[4] for d in done)
    ctx.train_span = (t_first, t_last)
    ctx.extra.update(hogwild_processes=p, threads_per_process=threads, start_method="fork",
                     updates_per_s=len(rows) / max(t_last - t_first, 1e-9),
                     steps_per_process=[len(rs) for _, rs, *_ in done])
    # An epoch ends when its last process finishes it.
    return [max(d[2][e] for d in done if e < len(d[2]))
            for e in range(max(len(d[2]) for d in done))]


def _collect(procs, results, p) -> list:
    done = {}
    try:
        while len(done) < p:
            try:
                item = results.get(timeout=POLL_S)
                done[item[0]] = item
                continue
            except queue.Empty:
                pass
            for i, proc in enumerate(procs):
                if i not in done and proc.exitcode not in (None, 0):
                    raise RuntimeError(f"hogwild process {i} died (exit code {proc.exitcode})")
    finally:
        for proc in procs:
            if proc.is_alive() and proc.pid is not None:
                proc.join(timeout=5 if len(done) == p else 0)
                if proc.is_alive():
                    proc.kill()
                    print(f"hogwild: killed process {proc.pid}", file=sys.stderr)
    return [done[i] for i in sorted(done)]
