"""One allreduce, two ways to wait for it: MPI's blocking ``Allreduce`` against a
non-blocking ``Iallreduce`` waited in sleeping polls (``real.launch.dist.wait``).

psgd's closing average (``real.schemes.psgd.average_weights``) goes through
``Comm.allreduce_sum_``: ``Iallreduce``, then ``Test`` with sleeps of 50 us doubling up to
``PSGD_WAIT_SLEEP_S`` (1 ms in phantom runs). MPICH advances a non-blocking collective only
inside the progress poll of ``MPI_Test`` (``MPIR_Test_impl`` -> ``MPID_Progress_test``), so
each stage of its schedule waits for the ranks' next polls. mpi_allreduce's steps call the
blocking ``Allreduce`` (``real/schemes/mpi_allreduce.py``), whose wait polls MPICH's
progress in a loop with a 1 ns nanosleep (``MPIR_CVAR_ENABLE_HEAVY_YIELD``).

Under ``mpirun -n P`` each round the ranks meet at a barrier, rank 0 sleeps ``--late-ms``
(the others wait that long in the call, as psgd's ranks wait for the last one in), then
every rank calls the allreduce of ``--bytes``; rank 0 (the last in) times its call, both
ways alternating, ``--repeats`` rounds after ``--warmup``. Prints the median, p10 and p90 a
way (ms). On one host the ranks talk through shared memory:

    mpirun -n 2 python benchmarks/iallreduce_polls.py --late-ms 13
    mpirun -n 4 python benchmarks/iallreduce_polls.py --late-ms 0

Run it on a quiet machine (``/work/bin/quiet`` here); docs/results/phantom.md quotes it.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from real.launch.dist import SLEEPING_WAITS  # noqa: E402

for _k, _v in SLEEPING_WAITS.items():          # as a phantom run sets them, before MPI_Init
    os.environ.setdefault(_k, _v)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="mpirun -n P python benchmarks/iallreduce_polls.py",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--bytes", type=int, default=39360, help="allreduce size (default: "
                    "the phantom validations' CNN, 39360)")
    ap.add_argument("--late-ms", type=float, default=13.0,
                    help="how long after the others rank 0 enters (default: 13)")
    ap.add_argument("--repeats", type=int, default=40, help="timed rounds (default: 40)")
    ap.add_argument("--warmup", type=int, default=5, help="rounds not timed (default: 5)")
    a = ap.parse_args(argv)
    import numpy as np
    from mpi4py import MPI
    from real.launch.dist import wait
    world = MPI.COMM_WORLD
    buf = np.ones(a.bytes // 4, dtype=np.float32)
    times: dict[str, list[float]] = {"blocking Allreduce": [], "Iallreduce, sleeping polls": []}
    for i in range(a.warmup + a.repeats):
        for way in times:
            world.Barrier()
            if world.Get_rank() == 0:
                time.sleep(a.late_ms / 1e3)
            t0 = time.monotonic()
            if way.startswith("blocking"):
                world.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
            else:
                wait(world.Iallreduce(MPI.IN_PLACE, buf, op=MPI.SUM), 60.0, "allreduce")
            if i >= a.warmup:
                times[way].append((time.monotonic() - t0) * 1e3)
            buf[:] = 1.0
    if world.Get_rank() == 0:
        print(f"P = {world.Get_size()}, {a.bytes} bytes, rank 0 in {a.late_ms:g} ms after "
              f"the others; its call, ms (median, p10, p90 over {a.repeats}):")
        for way, v in times.items():
            q = np.percentile(v, [10, 90])
            print(f"  {way:<28}{statistics.median(v):7.2f}{q[0]:7.2f}{q[1]:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
