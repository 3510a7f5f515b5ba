"""Which allreduce MPICH runs on one host under mpi4py, and how long each takes.

    python benchmarks/mpich_allreduce_path.py --workers 3,4 --bytes 400000 --calls 300

MPICH's ch4 device picks its shared-memory release/gather allreduce on one host
only where MPI is single-threaded (``maint/tuning/coll/ch4/posix_generic.json``:
``is_multi_threaded=no``); mpi4py initialises MPI with ``MPI_THREAD_MULTIPLE``
unless told otherwise. Two checks, each under ``mpirun -n P`` of the MPICH next to
this interpreter:

* *usable*: release/gather forced (``MPIR_CVAR_ALLREDUCE_POSIX_INTRA_ALGORITHM``)
  with ``MPIR_CVAR_COLLECTIVE_FALLBACK=error``, at mpi4py's default thread level and
  at ``single``: MPICH refuses it where it cannot run it;
* *time*: the median time of one ``Allreduce`` of ``--bytes`` (float32) over
  ``--calls`` calls after 20 warm-up ones (the slowest rank's median), for ``auto``
  and for each algorithm forced with ``MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM``, once
  with the device's collectives on (as ``auto`` runs) and once off (as
  ``real.launch.dist.select_mpi_allreduce`` runs a named algorithm).

If ``auto`` runs Rabenseifner's reduce-scatter/allgather it takes what the forced
one takes. Run it on a quiet machine (``/work``'s ``quiet`` wrapper, or nothing else
running): ranks share the cores. Rank mode (``--rank-mode``) is what mpirun starts.

Imports: cli; mpi4py and numpy (rank mode only).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import cli

PROG = "python benchmarks/mpich_allreduce_path.py"

FORCED = ("reduce_scatter_allgather", "recursive_doubling", "ring")


def rank_main(thread_level: str, n_bytes: int, calls: int) -> None:
    import mpi4py
    mpi4py.rc.thread_level = thread_level
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    a = np.ones(max(1, n_bytes // 4), dtype=np.float32)
    b = np.empty_like(a)
    for _ in range(20):
        comm.Allreduce(a, b)
    comm.Barrier()
    times = []
    for _ in range(calls):
        t0 = MPI.Wtime()
        comm.Allreduce(a, b)
        times.append(MPI.Wtime() - t0)
    medians = comm.gather(float(np.median(times)), root=0)
    if comm.rank == 0:
        print(f"{max(medians) * 1e6:.0f}")


def launch(p: int, env: dict, args: list[str]) -> subprocess.CompletedProcess:
    here = Path(sys.executable).parent
    cmd = [str(here / "mpirun"), "-n", str(p), sys.executable, __file__, "--rank-mode", *args]
    return subprocess.run(cmd, env=os.environ | env, capture_output=True, text=True, timeout=600)


def build_parser() -> cli.Parser:
    ap = cli.Parser(prog=PROG, description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default=[3, 4], type=cli.worker_counts, metavar="P",
                    help=f"{cli.WORKERS_HELP}, on this host")
    ap.add_argument("--bytes", type=int, default=400_000, help="bytes per allreduce")
    ap.add_argument("--calls", type=int, default=300, help="timed calls per run")
    ap.add_argument("--rank-mode", nargs=3, metavar=("LEVEL", "BYTES", "CALLS"),
                    help=argparse.SUPPRESS)
    return ap


def run(a) -> int:
    if a.rank_mode:
        rank_main(a.rank_mode[0], int(a.rank_mode[1]), int(a.rank_mode[2]))
        return 0
    workers = a.workers
    forced_rg = {"MPIR_CVAR_ALLREDUCE_POSIX_INTRA_ALGORITHM": "release_gather",
                 "MPIR_CVAR_COLLECTIVE_FALLBACK": "error"}
    for level in ("multiple", "single"):
        done = launch(2, forced_rg, [level, "4096", "10"])
        said = "runs" if done.returncode == 0 else "refused (" + (
            [ln for ln in done.stdout.splitlines() + done.stderr.splitlines()
             if "not usable" in ln] or ["exit %d" % done.returncode])[0].strip() + ")"
        print(f"release/gather forced at thread level {level}: {said}")
    print(f"\nmedian time of one Allreduce of {a.bytes} B, microseconds (thread level multiple)")
    print("P  auto  " + "  ".join(f"{f} (device on/off)" for f in FORCED))
    for p in workers:
        cells = [launch(p, {}, ["multiple", str(a.bytes), str(a.calls)]).stdout.strip()]
        for algorithm in FORCED:
            on = launch(p, {"MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": algorithm},
                     ["multiple", str(a.bytes), str(a.calls)]).stdout.strip()
            off = launch(p, {"MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": algorithm,
                          "MPIR_CVAR_DEVICE_COLLECTIVES": "none"},
                      ["multiple", str(a.bytes), str(a.calls)]).stdout.strip()
            cells.append(f"{on}/{off}")
        print(f"{p}  " + "  ".join(cells))
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
