"""Orchestration of one training run: launch, data, model, scheme, record.

The per-process training loop lives in ``real/schemes``; this module does what
is the same for every scheme: set threads, load the data, build identical
models on every rank, time the training apart from start-up and data loading,
gather every rank's timings and write the record (rank 0).

Imports: mpi4py, psutil, torch, tqdm, real (context, data, devices, dist, environment,
launchers, load, models, schemes, step, timing), cli, contracts.record.
"""
from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any, NamedTuple

from real import schemes
from contracts import record
from cli import launched_rank, usage_error

from real.launch.devices import backend_of, device_problem, select_device
from real.launch.dist import (
    detect_launch,
    init_torch_distributed,
    listen_locally,
    make_comm,
    select_mpi_allreduce,
    sleeping_waits,
    threads_per_rank,
)
from real.launch.launchers import LaunchError, host_name, hosts_of
from real.launch.supervise import Heartbeat
from real.records.timing import IterationLog, ResourceMeter, split_wait

PROG = "python -m real.train"
RANK_STARTS_AT = "start barrier's exit"    # a rank's start of training (start_training)
ABORT_GRACE_S = 2.0


def run(args) -> int:
    import psutil
    import torch

    startup_s = time.time() - psutil.Process().create_time()
    hb = Heartbeat.from_env()                 # the recorder of real.launch.supervise, if any
    cvars = {}
    if schemes.SCHEMES[args.algorithm].picks_mpi_allreduce:   # before MPI_Init: detect_launch
        cvars = select_mpi_allreduce(args.mpi_allreduce)
    listen_locally()                          # before MPI_Init too: MPICH reads it there
    waits = sleeping_waits() if (getattr(args, "compute", "real") == "phantom"
                                 and os.environ.get("PSGD_CLUSTER")) else {}
    from real.launch.context import fault_hook
    fault_hook(launched_rank())(-1)           # (test-only: a rank lost during start-up)
    hb.phase("join")                          # from here a rank waits for its peers
    try:
        launch = detect_launch()
    except LaunchError as e:
        return usage_error(PROG, str(e))
    problem = _launch_problem(args, launch) or device_problem(args, launch)
    if problem:
        return usage_error(PROG, problem)
    device = select_device(args, launch)      # before NCCL joins: it uses the current GPU
    if launch.kind == "env":                  # TorchComm needs the group
        init_torch_distributed(launch, args.timeout, backend_of(args))
    comm = make_comm(launch, args.timeout)
    if args.algorithm in schemes.TORCH_DISTRIBUTED:
        init_torch_distributed(launch, args.timeout, backend_of(args))
    hosts = hosts_of(comm.allgather_obj(host_name()))
    workers = _workers(args, launch)
    if args.algorithm in schemes.RANK_BASED and launch.kind == "single":
        print(f"{PROG}: note: {args.algorithm} started without a launcher runs as P = 1; "
              f"start P ranks with mpirun -n P (or torchrun)", file=sys.stderr)
    ranks_here = workers if schemes.SCHEMES[args.algorithm].own_processes else launch.local_size
    threads = args.threads or threads_per_rank(os.cpu_count() or 1, ranks_here)
    torch.set_num_threads(threads)
    global_batch = args.global_batch or args.batch_size * workers
    if global_batch % workers:
        return usage_error(PROG, f"--global-batch {global_batch} is not a multiple of the "
                                 f"{workers} workers")
    run_id = args.run_id or _default_run_id(args, launch, comm)
    hb.announce(run_id=run_id, config=vars(args), launcher=launch.kind,
                world_size=launch.world_size)

    hb.phase("load")
    t0 = time.monotonic()
    try:
        compute, data = _compute_and_data(args)
    except ValueError as e:                   # DataError, PhantomError: one line each
        return usage_error(PROG, str(e))
    data_load_s = time.monotonic() - t0
    if global_batch > len(data.train_y):
        return usage_error(PROG, f"--batch-size {args.batch_size} (a global batch of "
                                 f"{global_batch}) is more than the {len(data.train_y)} "
                                 "training samples")

    from real.records.environment import environment
    env = environment(launch, threads, hosts, device)
    env["workers"] = workers
    if cvars:
        env["mpi_cvars"] = cvars
    if waits:
        env["sleeping_waits"] = waits             # shared cores: waiting ranks must not spin
    from real.records.identity import run_settings
    rec = record.RunRecord(run_id=run_id, config=vars(args).copy(), environment=env,
                           identity=record.identity(run_settings(args, workers,
                                                                 env.get("cluster"))))
    rec.timings = {"startup_s": startup_s, "data_load_s": data_load_s}
    hb.announce(environment=env, identity=rec.identity)
    hb.phase("sync")
    ctx = None
    try:
        ctx = _context(args, launch, comm, data, workers, global_batch, device, compute)
        ctx.heartbeat = hb
        if hb.fd is not None and not schemes.SCHEMES[args.algorithm].own_processes:
            ctx.log.stream(hb.rows)
        if cvars:
            ctx.extra.update(mpi_allreduce_algorithm=args.mpi_allreduce, mpi_cvars=cvars)
        _train(ctx, rec, data)
    except Exception as e:  # noqa: BLE001 - any failure becomes a failed record
        rec.status = "failed"
        rec.failure = {"cause": _failure_cause(e, launch.rank), "rank": launch.rank}
        if ctx is not None:
            ctx.log.flush()                   # the recorder keeps the completed iterations
            ctx.log.close()
            rec.iterations = split_wait(list(ctx.log.rows)) if hb.fd is None else []
        hb.failed(rec.failure["cause"])
        traceback.print_exc()
        if launch.is_root:
            record.write(rec, args.out)
            print(f"failed: {rec.failure['cause']}; record {args.out}/{run_id}", file=sys.stderr)
        _abort_peers(launch)
        return 1
    ctx.log.close()
    hb.phase("done")
    _close_torch_distributed()
    if launch.is_root:
        path = record.write(rec, args.out)
        acc = rec.results["test_accuracy"]
        print(f"done: {rec.timings['train_wall_s']:.2f} s training, " + (
            f"test accuracy {acc:.4f}" if acc is not None else "phantom compute: no accuracy")
            + f", record {path}", file=sys.stderr)
        if rec.disturbed:
            from real.records.load import summary
            print(f"disturbed: {summary(rec.load)}; its times are not this machine's",
                  file=sys.stderr)
        if rec.testbed_bound:
            from real.records.testbed import summary as testbed_summary
            print(f"testbed-bound: {testbed_summary(rec.testbed)}", file=sys.stderr)
    return 0


def _compute_and_data(args):
    """The compute (real, or the phantom's sleeps) and the training set: loaded for a real
    run, a placeholder of the same size for a phantom (``real.phantom.run``)."""
    from real.training.step import REAL_COMPUTE
    if args.compute == "phantom":
        from real.training.models import default_dataset
        from real.phantom.run import phantom_compute, placeholder_data
        return phantom_compute(args), placeholder_data(
            args.dataset or default_dataset(args.model), args.train_size)
    from real.training.data import DataError, load_dataset
    try:
        return REAL_COMPUTE, load_dataset(args.dataset or _default_dataset(args.model),
                                          args.data_dir, download=args.download,
                                          train_size=args.train_size,
                                          test_size=args.test_size, seed=args.seed)
    except DataError as e:
        raise ValueError(str(e)) from None


def _launch_problem(args, launch) -> str | None:
    """Why this scheme cannot run under this launch, or None."""
    alg, scheme = args.algorithm, schemes.SCHEMES[args.algorithm]
    if scheme.talks == "mpi" and launch.kind != "mpi":
        n = scheme.ranks(args.workers or 2)
        return (f"{alg} talks through mpi4py: run it as mpirun -n {n} {PROG} --schemes {alg} "
                f"..." + (f" (or srun --mpi=pmi2 -n {n})" if launch.launcher == "srun" else ""))
    if scheme.own_processes and launch.kind != "single":
        return f"hogwild starts its own processes: run {PROG} --schemes hogwild --workers P"
    if scheme.server and launch.world_size <= 1:
        return f"{alg} needs a server rank and at least one worker: mpirun -n P+1 for P workers"
    return None


def _workers(args, launch) -> int:
    scheme = schemes.SCHEMES[args.algorithm]
    if scheme.own_processes:
        return args.workers or 1
    return launch.world_size - scheme.first_worker_rank


def _context(args, launch, comm, data, workers: int, global_batch: int, device=None,
             compute=None):
    import torch

    from real.launch.context import RunContext
    from real.training.data import shard
    from real.launch.devices import synchronizer
    from real.training.models import build_model
    from real.training.step import REAL_COMPUTE, Shard

    compute = compute or REAL_COMPUTE
    torch.manual_seed(args.seed)            # same seed on every rank: identical start weights
    model = (compute.model() if compute.mode == "phantom" else
             build_model(args.model, data.input_shape, data.num_classes))
    device = device or torch.device("cpu")
    model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    scheme = schemes.SCHEMES[args.algorithm]
    index = launch.rank - scheme.first_worker_rank
    whole = scheme.global_batch or scheme.own_processes or index < 0
    part = slice(None) if whole else shard(len(data.train_y), index, workers)
    train = Shard(torch.from_numpy(data.train_x[part]).to(device),
                  torch.from_numpy(data.train_y[part]).to(device))
    per_worker = global_batch // workers
    if scheme.global_batch:
        per_epoch = train.global_batches_per_epoch(global_batch, workers)
    elif scheme.own_processes:
        per_epoch = Shard(train.x[shard(len(train), 0, workers)],
                          train.y[shard(len(train), 0, workers)]).batches_per_epoch(per_worker)
    else:
        per_epoch = train.batches_per_epoch(per_worker)
    return RunContext(cfg=args, launch=launch, comm=comm, model=model, optimizer=opt,
                      shard=train, log=IterationLog(launch.rank, sync=synchronizer(device)),
                      progress=_progress(args, launch, args.epochs * per_epoch, index >= 0,
                                         Heartbeat.from_env(), workers),
                      workers=workers, worker_index=index if index >= 0 else None,
                      batch_size=per_worker, global_batch=global_batch, compute=compute,
                      sleeps=compute if compute.mode == "phantom" else None,
                      curve=None if compute.mode == "phantom" else
                      _curve_log(args, launch, model, data, index, per_epoch))


def _curve_log(args, launch, model, data, index: int, per_epoch: int):
    """Evaluation points: psgd's every worker, else the first worker (or the server, which
    sets its own weights source and epoch length) copies its weights; with a target, rank
    0 scores epoch ends at once (``real.records.curve``)."""
    from real.records.curve import CurveLog, scorer
    from real.training.models import flat_params
    scheme = schemes.SCHEMES[args.algorithm]
    evaluates = scheme.every_worker_evaluates or (index == 0 and not scheme.server)
    score = scorer(model, data) if args.target_accuracy is not None and launch.is_root else None
    return CurveLog(args.eval_every, per_epoch, args.epochs * per_epoch,
                    (lambda: flat_params(model)) if evaluates else None,
                    args.target_accuracy, score)


def _close_torch_distributed() -> None:
    """Leave the gloo group before exit: a process that exits with it open can abort in teardown."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _failure_cause(e: Exception, rank: int) -> str:
    """One line: who noticed what.  gloo's errors name a socket, not a rank: say what they mean."""
    text = " ".join(str(e).split())
    if "gloo" in text and ("peer" in text.lower() or "timed out" in text.lower()
                           or "read error" in text.lower()):
        detail = text.split("] ", 1)[-1][:200]
        return f"rank {rank}: a peer rank died or hung (gloo: {detail})"
    return f"rank {rank}: {type(e).__name__}: {text}"


def _abort_peers(launch) -> None:
    """After a failure under MPI, end the other ranks instead of leaving them in a collective.

    A rank other than 0 first gives rank 0 (which has usually hit the same failure)
    a moment to write the failed record: MPI_Abort ends every rank at once.
    """
    if launch.kind == "mpi" and launch.world_size > 1:
        from mpi4py import MPI
        if not launch.is_root:
            time.sleep(ABORT_GRACE_S)
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)


class Meters(NamedTuple):
    """What a rank measures its training window with (``real.records``)."""
    probe: Any         # testbed.RankProbe: the testbed's figures
    usage: Any         # timing.ResourceMeter: CPU% and peak RSS
    load: Any          # load.RankMeter: the CPU the rank got and waited for


def start_training(comm, launch, threads: int, prepare: Callable[[], Callable],
                   meters=None, clock: Callable[[], float] = time.monotonic):
    """Set up this rank's training, then leave the barrier that starts it together with the
    others: returns (``Meters``, the scheme's training call, t_start, the barrier's exit).

    Everything before that barrier is set-up, outside the timed window (``train_wall_s``,
    ``rank_starts_s``): the scheme's ``prepare`` (``schemes.prepared``: its module's import,
    the parameter server's ``Server``, async_avg's ``Holder``), the testbed probe (rank 0's
    also samples the emulated cluster's shapers, ``real.cluster.linkstats``: 10-30 ms at
    3-9 namespaces) and the load meter (``RankMeter``: 5-55 ms a rank with 6-13 ranks on
    two cores). Each piece done after the barrier started that rank's training late by
    its time, inside the window and in no iteration row, and held back its peers on the
    shared cores; a scheme whose workers first wait for rank 0 (the parameter server)
    waited that much for the first w. The meters' and the probe's windows open between a
    first barrier, once every rank's set-up is done (a rank's set-up would count as another
    process's CPU in the windows of the ranks already waiting), and the start barrier.
    ``meters``: (probe, usage, load) classes, the real ones by default (tests pass
    stand-ins)."""
    from real.records.load import RankMeter
    from real.records.testbed import RankProbe
    probe_class, usage_class, load_class = meters or (RankProbe, ResourceMeter, RankMeter)
    train = prepare()
    probe, load = probe_class(sample_links=launch.is_root), load_class(threads)
    comm.barrier()
    built = Meters(probe.start(), usage_class(), load.start())
    comm.barrier()
    return built, train, clock()


def _train(ctx, rec, data) -> None:
    import torch

    from real.records.environment import weights_digest

    from real.records.load import assess
    from real.training.step import evaluate
    from real.records.testbed import judge_run
    comm, launch = ctx.comm, ctx.launch
    hb = ctx.heartbeat or Heartbeat(None)
    start_digests = comm.allgather_obj(weights_digest(ctx.model))
    if len(set(start_digests)) != 1:
        raise RuntimeError(f"ranks start from different weights: {start_digests}")
    initial = _initial_weights(ctx)
    meters, train, t_start = start_training(
        comm, launch, torch.get_num_threads(),
        lambda: schemes.prepared(ctx.cfg.algorithm, ctx))
    epoch_s = train()
    t_end = time.monotonic()
    if ctx.train_span:                      # hogwild: its processes' own first start, last end
        t_start, t_end = ctx.train_span
    usage = meters.usage.stop()
    # Every rank's load window ends together: a rank that finished first waits (MPI polls
    # a core) inside its own window, not as "another process" in the others' windows.
    comm.barrier()
    load = meters.load.stop()
    probes = comm.gather_obj(meters.probe.stop(ctx.sleeps))
    ends = comm.gather_obj((t_start, t_end, usage, ctx.log.rows, load))
    phantom = ctx.compute.mode == "phantom"
    final_digests = comm.allgather_obj(weights_digest(ctx.model))
    curve = {} if phantom else _scored_curve(ctx, data, t_start, ends, initial)
    hb.phase("eval")                          # rank 0 alone from here: no peer to wait for
    if not launch.is_root:
        return
    rows = split_wait([row for _, _, _, rs, _ in ends for row in rs])
    rec.disturbed, rec.load = assess([e[4] for e in ends])
    judge_run(rec, [e[4] for e in ends], probes, phantom, ctx.model, rows)
    from real.phantom.run import compute_record
    rec.compute = compute_record(ctx.compute, ctx.batch_size)
    t_eval = time.monotonic()
    test_loss, test_acc = (None, None) if phantom else evaluate(
        ctx.model, torch.from_numpy(data.test_x), torch.from_numpy(data.test_y))
    first = schemes.first_worker_rank(ctx.cfg.algorithm)   # the server has no loss
    root_rows = [r for r in rows if r["rank"] == first and r["loss"] is not None]
    rec.iterations = rows
    starts = [e[0] for e in ends]
    rec.timings.update(train_wall_s=max(e[1] for e in ends) - min(starts),
                       rank_starts_s=[t - min(starts) for t in starts],
                       epoch_s=epoch_s, eval_s=time.monotonic() - t_eval)
    if not ctx.train_span:                  # (hogwild's start: its processes' first)
        rec.timings["rank_starts_at"] = RANK_STARTS_AT
    rec.results = {"final_loss": root_rows[-1]["loss"] if root_rows else None,
                   "test_loss": test_loss, "test_accuracy": test_acc,
                   "loss_curve": [[r["iteration"], r["loss"]] for r in root_rows
                                  if r["iteration"] % ctx.cfg.log_every == 0],
                   "train_samples": len(data.train_y), "test_samples": len(data.test_y),
                   "data_source": data.source, **curve}
    if phantom:
        rec.results["accuracy"] = rec.compute["accuracy"]
    from real.records.tcpstats import per_host
    rec.comm = {"bytes_sent_per_rank": _per_rank(rows, "bytes_sent", comm.size),
                "backend": comm.backend, "tcp": per_host([e[4] for e in ends])}
    rec.resources = {"cpu_util_percent_per_rank": [e[2]["cpu_util_percent"] for e in ends],
                     "peak_rss_bytes_per_rank": [e[2]["peak_rss_bytes"] for e in ends]}
    rec.extra.update(ctx.extra, start_weights_identical=True,
                     final_weights_identical=len(set(final_digests)) == 1)


def _initial_weights(ctx):
    from real.training.models import flat_params
    return flat_params(ctx.model) if ctx.launch.is_root else None


def _scored_curve(ctx, data, t_start: float, ends, initial) -> dict:
    """The accuracy curve (every rank takes part: psgd averages its workers' copies);
    the final point is at the end of the run's training span."""
    from real.records.curve import scored_curve
    wall_s = max(e[1] for e in ends) - min(e[0] for e in ends) if ends else 0.0
    return scored_curve(ctx, data, t_start, t_start + wall_s, initial)


def _per_rank(rows, key, n) -> list[int]:
    """Totals per rank (hogwild: per process, which can outnumber the one MPI rank)."""
    totals = [0] * max([n] + [r["rank"] + 1 for r in rows])
    for r in rows:
        totals[r["rank"]] += int(r[key] or 0)
    return totals


def _progress(args, launch, total: int, shows: bool, hb: Heartbeat | None = None,
              workers: int = 1):
    """The first worker (rank 0, or rank 1 when rank 0 is a server) shows progress: a bar
    over all iterations, named by the scheme and P as the record counts it (workers, not
    ranks: ps_sync under mpirun -n 3 is P = 2), the loss every --log-every iterations, and, with
    ``--progress-file``, 'done total' in that file at most once a second (what
    ``real.sweep`` shows for its running point). Under a launcher the bar is on even
    though stderr is a pipe: mpirun and torchrun pass it on to the user's terminal.

    Every rank also checks the test-only fault hook here (``real.launch.context.fault_hook``).
    """
    from real.launch.context import fault_hook
    fault = fault_hook(launch.rank)
    beat = (hb or Heartbeat(None)).beat
    first = schemes.first_worker_rank(args.algorithm)
    if launch.rank != first or not shows:
        def quiet(it, loss):
            fault(it)
            beat(it)
        return quiet
    from tqdm import tqdm

    visible = sys.stderr.isatty() or (launch.kind != "single" and not args.progress_file)
    bar = tqdm(total=total, desc=f"{args.algorithm} P={workers}", unit="it",
               disable=not visible, leave=False, mininterval=0.5)
    note = _ProgressFile(args.progress_file, total) if args.progress_file else None

    def update(it, loss):
        fault(it)
        beat(it)
        bar.update(1)
        if note:
            note.update(it + 1)
        if it % args.log_every == 0 and loss is not None:      # phantom compute: no loss
            bar.write(f"iteration {it:5d}  loss {loss:.4f}", file=sys.stdout)
        if it + 1 == total:
            bar.close()
    return update


class _ProgressFile:
    """'done total' in a small file, replaced atomically at most once a second."""

    def __init__(self, path: str, total: int):
        self.path, self.total, self.at = path, total, 0.0

    def update(self, done: int) -> None:
        now = time.monotonic()
        if now - self.at < 1.0 and done < self.total:
            return
        self.at = now
        tmp = f"{self.path}.tmp"
        try:
            with open(tmp, "w") as f:
                f.write(f"{done} {self.total}\n")
            os.replace(tmp, self.path)
        except OSError:
            pass                    # progress is a courtesy; training goes on


def _default_dataset(model: str) -> str:
    from real.training.models import DEFAULT_DATASET
    return DEFAULT_DATASET[model]


def _default_run_id(args, launch, comm) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S") if launch.is_root else None
    workers = _workers(args, launch)
    return f"{args.algorithm}-P{workers}-{comm.bcast_obj(stamp)}"
