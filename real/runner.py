"""Orchestration of one training run: launch, data, model, scheme, record.

The per-process training loop lives in ``real/schemes``; this module does what
is the same for every scheme: set threads, load the data, build identical
models on every rank, time the training apart from start-up and data loading,
gather every rank's timings and write the record (rank 0).
"""
from __future__ import annotations

import os
import sys
import time
import traceback

from . import record, schemes
from .cli import usage_error
from .dist import detect_launch, make_comm, threads_per_rank
from .timing import IterationLog, ResourceMeter, split_wait

PROG = "python -m real.train"


def run(args) -> int:
    import psutil
    import torch

    startup_s = time.time() - psutil.Process().create_time()
    launch = detect_launch()
    comm = make_comm(launch)
    threads = args.threads or threads_per_rank(os.cpu_count() or 1, launch.local_size)
    torch.set_num_threads(threads)
    run_id = args.run_id or _default_run_id(args, launch, comm)

    from .data import DataError, load_dataset
    t0 = time.monotonic()
    try:
        data = load_dataset(args.dataset or _default_dataset(args.model), args.data_dir,
                            download=args.download, train_size=args.train_size,
                            test_size=args.test_size, seed=args.seed)
    except DataError as e:
        return usage_error(PROG, str(e))
    data_load_s = time.monotonic() - t0

    from .train import environment
    env = environment(launch, threads)
    env["workers"] = launch.world_size
    rec = record.RunRecord(run_id=run_id, config=vars(args).copy(), environment=env)
    rec.timings = {"startup_s": startup_s, "data_load_s": data_load_s}
    try:
        ctx = _context(args, launch, comm, data)
        _train(ctx, rec, data)
    except Exception as e:  # noqa: BLE001 - any failure becomes a failed record
        rec.status = "failed"
        rec.failure = {"cause": f"{type(e).__name__}: {e}", "rank": launch.rank}
        traceback.print_exc()
        if launch.is_root:
            record.write(rec, args.out)
        return 1
    if launch.is_root:
        path = record.write(rec, args.out)
        r = rec.results
        print(f"done: {rec.timings['train_wall_s']:.2f} s training, test accuracy "
              f"{r['test_accuracy']:.4f}, record {path}", file=sys.stderr)
    return 0


def _context(args, launch, comm, data):
    import torch

    from .context import RunContext
    from .data import shard
    from .models import build_model

    torch.manual_seed(args.seed)            # same seed on every rank: identical start weights
    model = build_model(args.model, data.input_shape, data.num_classes)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    n_ranks = comm.size
    part = shard(len(data.train_y), launch.rank, n_ranks)
    x = torch.from_numpy(data.train_x[part])
    y = torch.from_numpy(data.train_y[part])
    from .step import Shard
    return RunContext(cfg=args, launch=launch, comm=comm, model=model, optimizer=opt,
                      shard=Shard(x, y), log=IterationLog(launch.rank),
                      progress=_progress(args, launch, len(y)))


def _train(ctx, rec, data) -> None:
    import torch

    from .step import evaluate
    from .train import weights_digest
    comm, launch = ctx.comm, ctx.launch
    start_digests = comm.allgather_obj(weights_digest(ctx.model))
    if len(set(start_digests)) != 1:
        raise RuntimeError(f"ranks start from different weights: {start_digests}")
    comm.barrier()
    meter = ResourceMeter()
    t_start = time.monotonic()
    epoch_s = schemes.get(ctx.cfg.algorithm).train(ctx)
    t_end = time.monotonic()
    usage = meter.stop()
    ends = comm.gather_obj((t_start, t_end, usage, ctx.log.rows))
    final_digests = comm.allgather_obj(weights_digest(ctx.model))
    if not launch.is_root:
        return
    rows = split_wait([row for _, _, _, rs in ends for row in rs])
    t_eval = time.monotonic()
    test_loss, test_acc = evaluate(ctx.model, torch.from_numpy(data.test_x),
                                   torch.from_numpy(data.test_y))
    root_rows = [r for r in rows if r["rank"] == 0 and r["loss"] is not None]
    rec.iterations = rows
    rec.timings.update(train_wall_s=max(e[1] for e in ends) - min(e[0] for e in ends),
                       epoch_s=epoch_s, eval_s=time.monotonic() - t_eval)
    rec.results = {"final_loss": root_rows[-1]["loss"] if root_rows else None,
                   "test_loss": test_loss, "test_accuracy": test_acc,
                   "loss_curve": [[r["iteration"], r["loss"]] for r in root_rows
                                  if r["iteration"] % ctx.cfg.log_every == 0],
                   "train_samples": len(data.train_y), "test_samples": len(data.test_y),
                   "data_source": data.source}
    rec.comm = {"bytes_sent_per_rank": _per_rank(rows, "bytes_sent", comm.size),
                "backend": comm.backend}
    rec.resources = {"cpu_util_percent_per_rank": [e[2]["cpu_util_percent"] for e in ends],
                     "peak_rss_bytes_per_rank": [e[2]["peak_rss_bytes"] for e in ends]}
    rec.extra.update(ctx.extra, start_weights_identical=True,
                     final_weights_identical=len(set(final_digests)) == 1)


def _per_rank(rows, key, n) -> list[int]:
    totals = [0] * n
    for r in rows:
        totals[r["rank"]] += int(r[key] or 0)
    return totals


def _progress(args, launch, n_samples):
    """Rank 0: a progress bar over all iterations and the loss every --log-every iterations."""
    if not launch.is_root:
        return lambda it, loss: None
    from tqdm import tqdm

    total = args.epochs * -(-n_samples // args.batch_size)
    bar = tqdm(total=total, desc=f"{args.algorithm} P={launch.world_size}", unit="it",
               disable=None, leave=False)

    def update(it, loss):
        bar.update(1)
        if it % args.log_every == 0:
            bar.write(f"iteration {it:5d}  loss {loss:.4f}", file=sys.stdout)
        if it + 1 == total:
            bar.close()
    return update


def _default_dataset(model: str) -> str:
    from .models import DEFAULT_DATASET
    return DEFAULT_DATASET[model]


def _default_run_id(args, launch, comm) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S") if launch.is_root else None
    return f"{args.algorithm}-P{launch.world_size}-{comm.bcast_obj(stamp)}"
