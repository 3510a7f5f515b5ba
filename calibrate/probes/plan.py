"""What to measure: the probe plan, quick (about a minute) or full (about ten on 2 cores).

A plan is a frozen dataclass; the CLIs build it from ``--quick`` and override
single fields with flags. ``check_plan`` refuses what this machine cannot run
(too many ranks, messages larger than a quarter of the free memory) before
anything is started, so a bad request costs nothing and writes nothing.

Imports: psutil, calibrate.probes.rawio.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace

from calibrate.probes.rawio import CalibrationError

ALL_MODELS = ("cnn", "ps_cnn", "linear", "mlp", "vgg11")
MPI_ALGORITHMS = ("auto", "ring", "recursive_doubling", "reduce_scatter_allgather")
ALGORITHM_ENV = "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM"   # read by MPICH at MPI_Init
MAX_RANKS_PER_CORE = 4


def host_cores() -> int:
    return os.cpu_count() or 1


def powers_of_4(lo_bytes: int, hi_bytes: int) -> tuple[int, ...]:
    sizes, n = [], lo_bytes
    while n <= hi_bytes:
        sizes.append(n)
        n *= 4
    return tuple(sizes)


@dataclass(frozen=True)
class ProbePlan:
    models: tuple[str, ...]
    batches: tuple[int, ...]
    threads: tuple[int, ...]
    step_repeats_min: int          # timed steps per point, at least ...
    step_repeats_max: int          # ... and at most; in between, enough to fill point_s
    point_s: float                 # target measuring time per (model, batch, threads)
    warmup_steps: int              # excluded from every statistic
    sharing_model: str
    sharing_batch: int
    sharing_ks: tuple[int, ...]    # k single-thread processes at once
    sharing_window_s: float        # all k processes step until this deadline
    server_params: tuple[int, ...]
    server_grads: int              # m gradients summed per synchronous update
    server_repeats: int
    comm_workers: tuple[int, ...]
    comm_algorithms: tuple[str, ...]
    comm_sizes_bytes: tuple[int, ...]
    comm_repeats_small: int        # messages up to 64 KiB
    comm_repeats_large: int        # messages of 16 MiB and more (between: the mean of both)
    comm_warmup: int
    timeout_s: float               # per subprocess (mpirun, sharing workers)
    device: str = "cpu"            # where the compute probe steps: cpu or cuda (one GPU)
    # the idle waits (seconds, sleeping polls of ``real.launch.dist.wait``) the real server's
    # update is timed after, one curve point each (``compute_probe.server_update_rows``)
    server_idle_s: tuple[float, ...] = (0.0, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.03)
    # the scheduler probe (``calibrate.probes.sched_probe``): seconds two processes share one
    # core (the time slice), tries of the balance delay, timed steps of the woken-rank wait
    slice_s: float = 2.0
    balance_tries: int = 40
    wake_steps: int = 200

    def comm_repeats(self, n_bytes: int) -> int:
        if n_bytes <= 64 * 1024:
            return self.comm_repeats_small
        if n_bytes >= 16 * 2**20:
            return self.comm_repeats_large
        return (self.comm_repeats_small + self.comm_repeats_large) // 2


def full_plan(cores: int | None = None) -> ProbePlan:
    cores = cores or host_cores()
    return ProbePlan(
        models=ALL_MODELS, batches=(16, 32, 64, 128, 256),
        threads=tuple(range(1, cores + 1)), step_repeats_min=5, step_repeats_max=30,
        point_s=1.0, warmup_steps=2,
        sharing_model="cnn", sharing_batch=64, sharing_ks=tuple(range(1, 2 * cores + 1)),
        sharing_window_s=4.0,
        server_params=(1_000, 10_000, 100_000, 1_000_000, 10_000_000), server_grads=4,
        server_repeats=15,
        comm_workers=tuple(range(2, 2 * cores + 1)), comm_algorithms=MPI_ALGORITHMS,
        comm_sizes_bytes=powers_of_4(4, 64 * 2**20), comm_repeats_small=40,
        comm_repeats_large=5, comm_warmup=2, timeout_s=600.0)


def quick_plan(cores: int | None = None) -> ProbePlan:
    """About a minute: fewer batches and sizes, two ranks, the default and ring allreduce,
    half the scheduler probe's samples (time slices over 1 s, 20 balance tries, 100 steps)."""
    cores = cores or host_cores()
    return replace(
        full_plan(cores), batches=(16, 64), step_repeats_min=3, step_repeats_max=8,
        point_s=0.3, warmup_steps=1, sharing_ks=(1, 2, 2 * cores), sharing_window_s=1.5,
        server_params=(1_000, 100_000, 10_000_000), server_repeats=5,
        server_idle_s=(0.0, 0.002, 0.03), slice_s=1.0, balance_tries=20, wake_steps=100,
        comm_workers=(2,), comm_algorithms=("auto", "ring"),
        comm_sizes_bytes=powers_of_4(4, 4 * 2**20)[::2] + (16 * 2**20,),
        comm_repeats_small=10, comm_repeats_large=3, comm_warmup=1, timeout_s=120.0)


def parse_csv(text: str, kind=str) -> tuple:
    """'a,b,c' -> (a, b, c); CalibrationError naming the item that does not parse."""
    items = [s.strip() for s in text.split(",") if s.strip()]
    try:
        return tuple(kind(s) for s in items)
    except ValueError:
        raise CalibrationError(f"cannot read {text!r} as a comma-separated list of "
                               f"{kind.__name__}") from None


def available_bytes() -> int:
    import psutil
    return int(psutil.virtual_memory().available)


def check_plan(plan: ProbePlan, cores: int | None = None) -> None:
    """Refuse a plan this machine cannot run; the message names the option."""
    cores = cores or host_cores()
    unknown = sorted(set(plan.models) - set(ALL_MODELS))
    if unknown:
        raise CalibrationError(f"--models: unknown model(s) {', '.join(unknown)} "
                               f"(known: {', '.join(ALL_MODELS)})")
    bad_alg = sorted(set(plan.comm_algorithms) - set(MPI_ALGORITHMS))
    if bad_alg:
        raise CalibrationError(f"--mpi-allreduce: unknown {', '.join(bad_alg)} "
                               f"(known: {', '.join(MPI_ALGORITHMS)})")
    for name, values in (("--batches", plan.batches), ("--threads", plan.threads),
                         ("--sizes", plan.comm_sizes_bytes), ("--workers", plan.comm_workers),
                         ("--sharing", plan.sharing_ks), ("--server-params", plan.server_params)):
        if not values or min(values) < 1:
            raise CalibrationError(f"{name}: needs positive values, got {list(values)}")
    if max(plan.threads) > cores:
        raise CalibrationError(f"--threads {max(plan.threads)} is more than the {cores} cores "
                               "of this machine (oversubscribed threads are not a clean measurement)")
    limit = MAX_RANKS_PER_CORE * cores
    for name, values in (("--workers", plan.comm_workers), ("--sharing", plan.sharing_ks)):
        if max(values) > limit:
            raise CalibrationError(f"{name} {max(values)} is more than this machine can run "
                                   f"({MAX_RANKS_PER_CORE} per core x {cores} cores = {limit})")
    if min(plan.comm_workers) < 2:
        raise CalibrationError("--workers: communication needs at least 2 ranks")
    free = available_bytes()
    biggest = max(max(plan.comm_sizes_bytes), 4 * max(plan.server_params))
    if biggest > free // 4:
        raise CalibrationError(f"--sizes: {biggest} bytes is more than a quarter of the "
                               f"available memory ({free} bytes)")
