"""Busy-waiting MPI ranks on shared cores: how fast a rank that waits hands the core over.

``simulator.model.hardware.timeslice`` charges a message to a polling receiver
that shares its core with ``m - 1`` other busy processes the wait of a
round-robin of whole quanta, ``h(m) = (m - 1)^2 q / (2 m)`` (4.5 ms at m = 4,
q = 4 ms). That holds when the others compute. When they too wait inside an
MPI call, the waiting ranks of MPICH 5 (UCX on one host) call ``sched_yield``
many times a call (``strace -c`` counts them): they give the core up long
before their quantum, and a message's receiver runs again within microseconds.

This probe measures it: ``k`` ranks under ``mpirun`` call ``MPI_Allreduce`` on
``--bytes`` in a tight loop (nothing between the calls, so every rank that
waits, waits in MPI), and each rank reports the wall time per call, its share
of a core, and its context switches per call: *voluntary* ones (it slept) and
*involuntary* ones (it left the core runnable: preempted at a tick, or its own
``sched_yield``). Yields show as many involuntary switches per call and a call
far shorter than one hand-off of the time-slice model. The output puts the
model's ``h(m)`` beside each row (the profile's quantum, ``m`` = ranks per core).

    python -m calibrate.poll_probe --ranks 2,4,8 --bytes 200000 --calls 200

Runs on one host (the ranks share this machine's cores); ``UCX_TLS=tcp,self``
in the environment makes the ranks talk over TCP instead of shared memory.

Imports: numpy, mpi4py (rank side only), cli, contracts.profile, simulator.model.comm.closed_forms,
real.sweep (mpirun).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

import cli

PROG = "python -m calibrate.poll_probe"
WARMUP_CALLS = 10


# ------------------------------------------------------------------ rank side (under mpirun)

def _switches() -> tuple[int, int]:
    """(voluntary, involuntary) context switches of this process so far."""
    counts = {}
    with open("/proc/self/status") as f:
        for line in f:
            if "ctxt_switches" in line:
                key, value = line.split(":")
                counts[key.strip()] = int(value)
    return counts["voluntary_ctxt_switches"], counts["nonvoluntary_ctxt_switches"]


def rank_loop(n_bytes: int, calls: int) -> dict | None:
    """One rank's part: warm-up, then ``calls`` allreduces timed; rank 0 returns every
    rank's figures (others None)."""
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    buf = np.ones(max(1, n_bytes // 4), dtype=np.float32)
    for _ in range(WARMUP_CALLS):
        comm.Allreduce(MPI.IN_PLACE, buf)
    comm.Barrier()
    vol0, inv0 = _switches()
    cpu0, t0 = time.process_time(), time.perf_counter()
    for _ in range(calls):
        comm.Allreduce(MPI.IN_PLACE, buf)
    wall_s = time.perf_counter() - t0
    cpu_s = time.process_time() - cpu0
    vol1, inv1 = _switches()
    mine = {"rank": comm.rank, "call_s": wall_s / calls, "core_share": cpu_s / wall_s,
            "voluntary_per_call": (vol1 - vol0) / calls,
            "involuntary_per_call": (inv1 - inv0) / calls}
    every = comm.gather(mine)
    return {"ranks": comm.size, "bytes": buf.nbytes, "calls": calls, "per_rank": every} \
        if comm.rank == 0 else None


# ------------------------------------------------------------------ launcher side

def run_point(ranks: int, n_bytes: int, calls: int, timeout_s: float) -> dict:
    """``ranks`` ranks under mpirun; their figures (medians over the ranks)."""
    from real.launch.sweep import mpirun
    cmd = [mpirun(), "-n", str(ranks), sys.executable, "-m", "calibrate.poll_probe",
           "--rank-loop", "--bytes", str(n_bytes), "--calls", str(calls)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        tail = [ln for ln in done.stderr.splitlines() if ln.strip()][-1:] or ["no output"]
        raise RuntimeError(f"mpirun -n {ranks} failed (exit {done.returncode}): {tail[0]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return summarize(out)


def summarize(out: dict) -> dict:
    """Medians over the ranks of one point's figures."""
    import numpy as np
    per = out["per_rank"]
    med = {k: float(np.median([r[k] for r in per]))
           for k in ("call_s", "core_share", "voluntary_per_call", "involuntary_per_call")}
    return {"ranks": out["ranks"], "bytes": out["bytes"], "calls": out["calls"], **med}


def with_model(row: dict, cores: int, quantum_s: float) -> dict:
    """The time-slice model's hand-off wait for ``row``'s ranks on ``cores`` cores."""
    from simulator.model.comm.closed_forms import handoff_s
    per_core = math.ceil(row["ranks"] / cores)
    return {**row, "ranks_per_core": per_core,
            "model_handoff_s": handoff_s(row["ranks"], cores, quantum_s)}


def format_rows(rows: list[dict], cores: int, quantum_s: float) -> str:
    lines = [f"MPI_Allreduce in a tight loop on this machine's {cores} cores; time-slice model: "
             f"quantum {quantum_s * 1e3:.2f} ms (the shipped profile's)",
             f"{'ranks':>5} {'bytes':>9} {'ms/call':>8} {'core share':>10} {'vol/call':>8} "
             f"{'invol/call':>10} {'model hand-off ms':>17}"]
    for r in rows:
        lines.append(f"{r['ranks']:>5} {r['bytes']:>9} {r['call_s'] * 1e3:>8.3f} "
                     f"{r['core_share']:>10.2f} {r['voluntary_per_call']:>8.1f} "
                     f"{r['involuntary_per_call']:>10.1f} {r['model_handoff_s'] * 1e3:>17.2f}")
    return "\n".join(lines)


def build_parser() -> cli.Parser:
    p = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=cli.int_list(2, 64), default=[2, 4, 8],
                   help="rank counts to run, e.g. 2,4,8 (default: 2,4,8)")
    p.add_argument("--bytes", type=cli.int_in(4, 1 << 30), default=200_000,
                   help="bytes per allreduce (default: 200000)")
    p.add_argument("--calls", type=cli.int_in(1, 1_000_000), default=200,
                   help="timed allreduces per point (default: 200)")
    p.add_argument("--timeout", type=cli.positive_float, default=300.0,
                   help="seconds per point (default: 300)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--rank-loop", action="store_true", help=argparse.SUPPRESS)   # (a rank)
    return p


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


def run(args) -> int:
    if args.rank_loop:
        out = rank_loop(args.bytes, args.calls)
        if out is not None:
            print(json.dumps(out))
        return 0
    from contracts.profile import load_default
    quantum_s = load_default().scheduler_quantum_s
    cores = os.cpu_count() or 1
    rows = []
    try:
        for k in args.ranks:
            rows.append(with_model(run_point(k, args.bytes, args.calls, args.timeout),
                                   cores, quantum_s))
    except (RuntimeError, FileNotFoundError, subprocess.TimeoutExpired) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(rows, indent=1) if args.json else format_rows(rows, cores, quantum_s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
