"""Communication probes, run under ``mpirun -n P``: collectives against message size.

For each backend and each operation the training schemes use:

=========  ===========================  ==========================================
op         mpi4py (MPICH)               torch.distributed (gloo)
=========  ===========================  ==========================================
allreduce  ``Allreduce(IN_PLACE, SUM)``  ``all_reduce`` (sum)
bcast      ``Bcast`` from rank 0         ``broadcast`` from rank 0
gather     ``Gather`` to rank 0          ``gather`` to rank 0
scatter    ``Scatter`` from rank 0       ``scatter`` from rank 0
sendrecv   ping-pong 0 <-> 1             ``send`` / ``recv`` ping-pong 0 <-> 1
=========  ===========================  ==========================================

``n_bytes`` is the buffer of one rank (for gather/scatter: what each rank sends
or receives; the root holds P of them). Ping-pong records half the round trip.
Before every repetition all ranks meet at a barrier; each rank times its own
call; the fit takes, per repetition, the max over ranks (the collective is done
when the last rank is) and then the mean over repetitions (``fit_comm``).

MPICH picks its allreduce algorithm from ``MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM``,
read once at ``MPI_Init``: so one ``mpirun`` per algorithm, and the variable is
set here before ``mpi4py.MPI`` is imported. Every row says which algorithm ran.

Imports: mpi4py, numpy, torch, calibrate.probes.plan, real.launch.dist.
"""
from __future__ import annotations

import os
import socket
import time

import numpy as np

from calibrate.probes.plan import ALGORITHM_ENV, ProbePlan

MPI_OPS = ("allreduce", "bcast", "gather", "scatter", "sendrecv")
GLOO_OPS = ("allreduce", "bcast", "gather", "scatter", "sendrecv")


def select_algorithm(algorithm: str) -> None:
    """Must run before ``from mpi4py import MPI``: MPICH reads its CVARs at init."""
    if algorithm == "auto":
        os.environ.pop(ALGORITHM_ENV, None)
    else:
        os.environ[ALGORITHM_ENV] = algorithm


def mpi_call(comm, op: str, n_bytes: int):
    """A no-argument function doing one ``op`` on ``n_bytes`` per rank with mpi4py."""
    from mpi4py import MPI
    rank, size = comm.Get_rank(), comm.Get_size()
    buf = np.zeros(max(1, n_bytes // 4), dtype=np.float32)
    big = np.zeros(buf.size * size, dtype=np.float32) if rank == 0 else None
    if op == "allreduce":
        return lambda: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    if op == "bcast":
        return lambda: comm.Bcast(buf, root=0)
    if op == "gather":
        return lambda: comm.Gather(buf, big, root=0)
    if op == "scatter":
        return lambda: comm.Scatter(big, buf, root=0)
    if op == "sendrecv":
        if rank == 0:
            return lambda: (comm.Send(buf, dest=1), comm.Recv(buf, source=1))
        if rank == 1:
            return lambda: (comm.Recv(buf, source=0), comm.Send(buf, dest=0))
        return None                      # ranks 2.. only meet at the barriers
    raise ValueError(op)


def gloo_call(op: str, n_bytes: int):
    import torch
    import torch.distributed as dist
    rank, size = dist.get_rank(), dist.get_world_size()
    t = torch.zeros(max(1, n_bytes // 4))
    parts = [torch.zeros_like(t) for _ in range(size)] if rank == 0 else None
    if op == "allreduce":
        return lambda: dist.all_reduce(t)
    if op == "bcast":
        return lambda: dist.broadcast(t, src=0)
    if op == "gather":
        return lambda: dist.gather(t, gather_list=parts, dst=0)
    if op == "scatter":
        return lambda: dist.scatter(t, scatter_list=parts, src=0)
    if op == "sendrecv":
        if rank == 0:
            return lambda: (dist.send(t, dst=1), dist.recv(t, src=1))
        if rank == 1:
            return lambda: (dist.recv(t, src=0), dist.send(t, dst=0))
        return None
    raise ValueError(op)


def time_op(call, barrier, repeats: int, warmup: int, scale: float = 1.0,
            counters=None) -> list[tuple[float, ...]]:
    """Barrier, then time ``call``: (wall s, this process's CPU s, all its threads) per
    repetition, and with ``counters`` (a function returning numbers, e.g.
    ``threads.device_thread``) their changes over the call; each times ``scale``; warm-up
    repetitions are dropped. Ranks without a call return []."""
    times = []
    for rep in range(warmup + repeats):
        barrier()
        if call is None:
            continue
        k0 = counters() if counters else ()
        t0, c0 = time.perf_counter(), time.process_time()
        call()
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        k1 = counters() if counters else ()
        if rep >= warmup:
            times.append((dt * scale, dc * scale, *((b - a) * scale for a, b in zip(k0, k1))))
    return times


def sweep(plan: ProbePlan, backend: str, ops, make_call, barrier, meta: dict) -> list[dict]:
    rows = []
    for op in ops:
        for n_bytes in plan.comm_sizes_bytes:
            call = make_call(op, n_bytes)
            scale = 0.5 if op == "sendrecv" else 1.0     # half round trip
            times = time_op(call, barrier, plan.comm_repeats(n_bytes), plan.comm_warmup, scale)
            rows += [{**meta, "backend": backend, "op": op, "bytes": n_bytes, "rep": i,
                      "time_s": t, "cpu_s": c} for i, (t, c) in enumerate(times)]
            del call
    return rows


EAGER_SIZES = tuple(2**k for k in range(6, 19))      # 64 B .. 256 KiB
LATE_RECEIVER_S = 0.02


def eager_max_bytes(comm) -> int:
    """The largest message whose blocking ``Send`` returns before its receive is posted
    (eager: MPI buffers it); above it the send waits for the receiver (rendezvous).
    Rank 1 posts each receive 20 ms late; 0 if even the smallest size waits."""
    rank, largest = comm.Get_rank(), 0
    for n in EAGER_SIZES:
        buf = np.zeros(n // 4, dtype=np.float32)
        comm.Barrier()
        if rank == 0:
            t0 = time.perf_counter()
            comm.Send(buf, dest=1, tag=7)
            if time.perf_counter() - t0 < LATE_RECEIVER_S / 2:
                largest = n
        elif rank == 1:
            time.sleep(LATE_RECEIVER_S)
            comm.Recv(buf, source=0, tag=7)
    return comm.bcast(largest, root=0)


def run(plan: ProbePlan, algorithm: str, with_gloo: bool, other_ops: bool,
        gloo_timeout_s: float = 120.0) -> tuple[list[dict], dict] | None:
    """This rank's part of one comm probe; rank 0 gets (all rows, metadata), the others None."""
    select_algorithm(algorithm)
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    cores = os.cpu_count() or 1
    meta = {"workers": size, "rank": rank}
    ops = MPI_OPS if other_ops else ("allreduce",)
    rows = sweep(plan, "mpi", ops, lambda op, n: mpi_call(comm, op, n), comm.Barrier,
                 {**meta, "algorithm": algorithm})
    for r in rows:
        if r["op"] != "allreduce":
            r["algorithm"] = "-"
    eager = eager_max_bytes(comm) if other_ops else None
    if with_gloo:
        import torch
        import torch.distributed as dist

        from real.launch.dist import detect_launch, init_torch_distributed
        torch.set_num_threads(1)
        init_torch_distributed(detect_launch(), gloo_timeout_s)
        rows += sweep(plan, "gloo", GLOO_OPS, gloo_call, dist.barrier, {**meta, "algorithm": "-"})
        dist.destroy_process_group()
    gathered = comm.gather(rows, root=0)
    env_seen = comm.gather(os.environ.get(ALGORITHM_ENV, ""), root=0)
    if rank != 0:
        return None
    import mpi4py
    info = {"workers": size, "cores": cores, "oversubscribed": size > cores,
            "algorithm": algorithm, "algorithm_env": ALGORITHM_ENV,
            "algorithm_env_per_rank": env_seen, "host": socket.gethostname(), "mpi4py": mpi4py.__version__,
            "eager_max_bytes": eager,
            "mpi_library": MPI.Get_library_version().splitlines()[0].strip(),
            "mpi_vendor": "%s %d.%d.%d" % ((MPI.get_vendor()[0],) + tuple(MPI.get_vendor()[1]))}
    return [r for part in gathered for r in part], info
