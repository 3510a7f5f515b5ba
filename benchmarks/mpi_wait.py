"""What a waiting MPI rank costs: its CPU while it waits, and what each way to wait adds
to a message's latency.

Two ranks under MPICH's ``mpirun``. Rank 0 sleeps ``--gap-ms`` (a compute phase),
notes the time and sends ``--bytes``; rank 1 has posted the receive and waits for it,
then notes the time. Both clocks are the host's ``CLOCK_MONOTONIC`` (one kernel, also
across the emulated cluster's namespaces), so the latency is the arrival time less the
send time. Rank 1 reports its CPU time over the loop as a share of the wall time: a
rank that spins takes its core (100%), one that sleeps nearly none.

Ways to wait (``--ways``), each a run:

* ``test-spin``: ``real.launch.dist.wait`` as the schemes use it: ``Test`` in a loop
  (MPICH's ``MPID_Progress_test``: no yield, ``src/mpid/ch4/src/ch4_progress.h``);
* ``blocking``: ``MPI_Wait`` (``MPID_Progress_wait``: a progress poll, then
  ``MPID_Thread_yield``, i.e. ``sched_yield``);
* ``heavy-yield``: ``MPI_Wait`` with ``MPIR_CVAR_ENABLE_HEAVY_YIELD=1``: the yield is a
  ``nanosleep`` of 1 ns instead (``src/mpid/common/thread/mpidu_thread_fallback.h``);
* ``throttle``: ``Test`` in a loop with ``MPIR_CVAR_CH4_PROGRESS_THROTTLE=1``,
  ``..._NO_PROGRESS_COUNT=N`` and heavy yield: after N polls that made no progress, each
  poll ends in that nanosleep (``ch4_progress.h``, ``MPIDI_progress_test``);
* ``test-sleep``: ``Test`` in a loop with sleeps between polls, 50 us at first and
  doubling up to ``--sleep-us`` (``real.launch.dist.wait`` with ``poll_s``);
* ``test-sleep-fine``: the same with the thread's timer slack at 1 ns, as a phantom
  rank's main thread has it (its compute sleeps set it), and ``heavy-yield-fine``
  likewise;
* ``heavy-yield-slack``: heavy yield with the thread's timer slack at ``--slack-us``:
  the kernel may end each 1 ns nanosleep that much later, so each poll sleeps about
  that long.

On one host the ranks use shared memory; with ``--cluster PREFIX`` they run on hosts
0 and 1 of that emulated cluster over its shaped TCP link (``real.cluster.mpi_env``)::

    python benchmarks/mpi_wait.py --calls 200 --gap-ms 20
    python benchmarks/mpi_wait.py --cluster psgd --calls 200 --gap-ms 20    # as root
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
import cli  # noqa: E402

PROG = "python benchmarks/mpi_wait.py"

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WAYS = {
    "test-spin": {},
    "blocking": {},
    "heavy-yield": {"MPIR_CVAR_ENABLE_HEAVY_YIELD": "1"},
    "throttle": {"MPIR_CVAR_ENABLE_HEAVY_YIELD": "1", "MPIR_CVAR_CH4_PROGRESS_THROTTLE": "1",
                 "MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT": "64"},
    "test-sleep": {},
    "test-sleep-fine": {},
    "heavy-yield-fine": {"MPIR_CVAR_ENABLE_HEAVY_YIELD": "1"},
    "heavy-yield-slack": {"MPIR_CVAR_ENABLE_HEAVY_YIELD": "1"},
}


def rank_loop(way: str, calls: int, gap_s: float, n_bytes: int, sleep_s: float,
              slack_s: float) -> None:
    import numpy as np
    from mpi4py import MPI

    from real.launch.dist import wait
    world = MPI.COMM_WORLD
    if way.endswith("-fine"):
        from real.phantom.sleep import set_timer_slack
        set_timer_slack(1)
        way = way.removesuffix("-fine")
    if way.endswith("-slack"):
        from real.phantom.sleep import set_timer_slack
        set_timer_slack(int(slack_s * 1e9))
        way = way.removesuffix("-slack")
    buf = np.zeros(max(1, n_bytes), dtype=np.uint8)
    stamps = np.zeros(calls)
    world.Barrier()
    cpu0, t0 = time.process_time(), time.monotonic()
    for i in range(calls):
        if world.rank == 0:
            time.sleep(gap_s)
            stamps[i] = time.monotonic()
            world.Send(buf, dest=1, tag=i)
        else:
            req = world.Irecv(buf, source=0, tag=i)
            if way == "test-spin" or way == "throttle":
                wait(req, 60.0, "probe")
            elif way == "test-sleep":
                wait(req, 60.0, "probe", poll_s=sleep_s)
            else:
                req.Wait()
            stamps[i] = time.monotonic()
    wall = time.monotonic() - t0
    cpu = time.process_time() - cpu0
    sent = world.gather(stamps)
    share = world.gather(cpu / wall)
    if world.rank == 0:
        latency = np.sort(sent[1] - sent[0])
        print(json.dumps({"way": way, "waiting_rank_cpu_share": share[1],
                          "latency_p50_s": float(np.quantile(latency, 0.5)),
                          "latency_p99_s": float(np.quantile(latency, 0.99))}))


def launch(way: str, args) -> dict:
    env = os.environ | WAYS[way] | {"PYTHONPATH": str(ROOT)}
    rank = [sys.executable, str(Path(__file__).resolve()), "--rank-loop", way,
            "--calls", str(args.calls), "--gap-ms", str(args.gap_ms), "--bytes", str(args.bytes),
            "--sleep-us", str(args.sleep_us), "--slack-us", str(args.slack_us)]
    if args.cluster:
        from real.cluster import mpi_env, mpirun_command, read_state
        cluster = read_state(args.cluster)
        cmd, env = mpirun_command(cluster, 2, rank), env | mpi_env(cluster)
    else:
        from real.launch.dist import isolated
        from real.launch.sweep import mpirun
        cmd = isolated([mpirun(), "-n", "2", *rank])
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode:
        raise RuntimeError(f"{way}: exit {done.returncode}: {done.stderr[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def build_parser() -> cli.Parser:
    p = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--ways", default=",".join(WAYS))
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--gap-ms", type=float, default=20.0, help="rank 0's sleep before a send")
    p.add_argument("--bytes", type=int, default=8)
    p.add_argument("--sleep-us", type=float, default=50.0, help="test-sleep's poll interval")
    p.add_argument("--slack-us", type=float, default=500.0,
                   help="heavy-yield-slack's timer slack")
    p.add_argument("--cluster", default=None, help="an emulated cluster's prefix")
    p.add_argument("--rank-loop", default=None, help=argparse.SUPPRESS)
    return p


def run(args) -> int:
    if args.rank_loop:
        rank_loop(args.rank_loop, args.calls, args.gap_ms / 1e3, args.bytes, args.sleep_us / 1e6,
                  args.slack_us / 1e6)
        return 0
    print(f"{'way':>16} {'waiting rank CPU':>16} {'latency p50 ms':>14} {'p99 ms':>8}   "
          f"({'cluster ' + args.cluster if args.cluster else 'one host'}, {args.bytes} B)")
    for way in args.ways.split(","):
        r = launch(way, args)
        print(f"{way:>16} {r['waiting_rank_cpu_share']:>16.1%} "
              f"{r['latency_p50_s'] * 1e3:>14.3f} {r['latency_p99_s'] * 1e3:>8.3f}")
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
