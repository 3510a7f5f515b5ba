"""ps_sync's broadcast of w, one worker after the other, with ranks that wait in sleeping polls.

    python benchmarks/ps_sends.py --bandwidth 1gbit --workers 3 --polls-ms 1,0.2 \
        --rounds 60 --out sends.json          # as root: P + 1 hosts of the emulated cluster

The parameter server of ``ps_sync`` sends w to its workers one after the other with the
scheme's own ``real.schemes.ps.Link`` (a header and the vector, each ``Isend`` waited by
``real.launch.dist.wait``) while each worker waits for it in ``Link.recv``. Here the
server (rank 0, host 0) sleeps ``--gap-ms`` (the workers' step), then sends ``--bytes``
to workers 1..P in order and times each send; the workers have waited the whole gap,
so their polls have backed off to the poll interval (``PSGD_WAIT_SLEEP_S``, each run
one of ``--polls-ms``). Written: per poll interval, each worker's median send time.

Imports: mpi4py, numpy, real.schemes.ps, real.cluster.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

PREFIX = "psgdps"


def rank_main(rounds: int, gap_s: float, n_bytes: int, out: str) -> None:
    import numpy as np
    from mpi4py import MPI

    from real.schemes.ps import SERVER, Link
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    link = Link(world, 600.0)
    vec = np.zeros(n_bytes // 4, dtype=np.float32)
    times: list[list[float]] = [[] for _ in range(size)]
    for r in range(rounds + 3):
        world.Barrier()
        if rank == SERVER:
            time.sleep(gap_s)
            for w in range(1, size):
                t0 = time.perf_counter()
                link.send(w, r, vec)
                times[w].append(time.perf_counter() - t0)
        else:
            link.recv(SERVER, vec)
    if rank == SERVER:
        medians = {str(w): statistics.median(t[3:]) for w, t in enumerate(times) if t}
        with open(out, "w") as f:
            json.dump({"median_send_s": medians, "rounds": rounds}, f)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/ps_sends.py",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--bandwidth", default="1gbit")
    p.add_argument("--workers", type=int, default=3, choices=(1, 2, 3))
    p.add_argument("--polls-ms", default="1,0.2", help="poll intervals, one run each")
    p.add_argument("--bytes", type=int, default=39360, help="w (the CNN's 9,840 float32)")
    p.add_argument("--gap-ms", type=float, default=30.0)
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--out", default="ps-sends.json")
    p.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.rank_main:
        rank_main(args.rounds, args.gap_ms / 1e3, args.bytes, args.out)
        return 0
    from real.cluster import emulated_cluster, mpi_env, mpirun_command
    from real.launch.dist import SLEEPING_WAITS, WAIT_SLEEP_ENV
    result = {"bandwidth": args.bandwidth, "workers": args.workers, "bytes": args.bytes,
              "gap_ms": args.gap_ms, "polls": {}}
    with emulated_cluster(args.workers + 1, args.bandwidth, prefix=PREFIX) as cluster:
        for poll in args.polls_ms.split(","):
            part = os.path.abspath(f"{args.out}.{poll}.part")
            argv_r = [sys.executable, os.path.abspath(__file__), "--rank-main", "--bytes",
                      str(args.bytes), "--gap-ms", str(args.gap_ms), "--rounds",
                      str(args.rounds), "--out", part]
            env = (os.environ | mpi_env(cluster) | SLEEPING_WAITS
                   | {WAIT_SLEEP_ENV: str(float(poll) / 1e3),
                      "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))})
            done = subprocess.run(mpirun_command(cluster, args.workers + 1, argv_r), env=env,
                                  timeout=600)
            if done.returncode:
                print(f"ps_sends: the run at {poll} ms failed", file=sys.stderr)
                return 1
            with open(part) as f:
                result["polls"][poll] = json.load(f)
            os.unlink(part)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
