"""Whose polls a parameter-server message waits for: the sender's, the receiver's, or both.

    python benchmarks/ps_polls.py --out ps-polls.json      # one host, no root

``benchmarks/ps_sends.py`` timed ps_sync's send of w between namespaces and found it slower
with the runs' 1 ms poll than with 0.2 ms, but could not tell which side's poll it waited
for. Here two ranks on one host talk through MPICH's network module as they do between
hosts (``MPIR_CVAR_NOLOCAL=1``: no shared memory, libfabric's tcp provider over loopback,
where the bytes cross in microseconds), so what remains of a send's time is the ranks'
waiting. Rank 0 sleeps ``--gap-ms`` (the workers' step) and up to 2 ms more at random (so the
receiver's polls, which began at the same barrier, meet the message at any phase, as in a
training run whose steps vary), then sends ``--bytes`` with the
scheme's own ``real.schemes.ps.Link`` while rank 1 waits in ``Link.recv``, each waiting with
its own poll interval (``real.launch.dist.wait``: sleeps doubling from 50 us up to the
interval; 0 spins). Both read one clock (``time.perf_counter``, CLOCK_MONOTONIC on one host),
so per round: the send's time at the sender (start to its request complete) and the
receive's (the sender's start to the receiver's header and vector complete).

Written: per (sender poll, receiver poll), the medians and quartiles of both, in ms.

Imports: mpi4py, numpy, real.schemes.ps, real.launch.dist.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

import cli

PROG = "python benchmarks/ps_polls.py"
JITTER_S = 2e-3          # added to each gap at random: the receiver's polls at any phase
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _quartiles(xs: list[float]) -> dict:
    q = statistics.quantiles(xs, n=4)
    return {"median_ms": round(statistics.median(xs) * 1e3, 4),
            "q1_ms": round(q[0] * 1e3, 4), "q3_ms": round(q[2] * 1e3, 4)}


def _sleep_late_ms(lengths_s=(50e-6, 1e-3), sleeps: int = 200) -> dict:
    """How late ``time.sleep`` wakes in this rank, median per length (ms): the polls' own
    lateness, which every check of ``real.launch.dist.wait`` adds."""
    out = {}
    for length in lengths_s:
        late = []
        for _ in range(sleeps):
            t0 = time.perf_counter()
            time.sleep(length)
            late.append(time.perf_counter() - t0 - length)
        out[f"{length * 1e3:g}"] = round(statistics.median(late) * 1e3, 4)
    return out


def rank_main(pairs: list[tuple[float, float]], rounds: int, gap_s: float, n_bytes: int,
              out: str) -> None:
    import numpy as np
    from mpi4py import MPI

    from real.launch.dist import WAIT_SLEEP_ENV
    from real.schemes.ps import Link
    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    link = Link(world, 600.0)
    vec = np.zeros(n_bytes // 4, dtype=np.float32)
    stamp = np.zeros(2)
    result = {"sleep_late_ms": _sleep_late_ms() if rank == 0 else None}
    for send_poll, recv_poll in pairs:
        os.environ[WAIT_SLEEP_ENV] = str(send_poll if rank == 0 else recv_poll)
        sends, recvs, jitter = [], [], random.Random(0)
        for r in range(rounds + 3):
            world.Barrier()
            if rank == 0:
                time.sleep(gap_s + jitter.uniform(0.0, JITTER_S))   # the receiver's poll phase
                t0 = time.perf_counter()
                link.send(1, r, vec)
                t1 = time.perf_counter()
                got = np.empty(2)
                world.Recv(got, 1, 7)            # the receiver's clock reading, after the round
                if r >= 3:
                    sends.append(t1 - t0)
                    recvs.append(got[0] - t0)
            else:
                link.recv(0, vec)
                stamp[0] = time.perf_counter()
                world.Send(stamp, 0, 7)
        if rank == 0:
            result[f"{send_poll * 1e3:g},{recv_poll * 1e3:g}"] = {
                "send_poll_ms": send_poll * 1e3, "recv_poll_ms": recv_poll * 1e3,
                "send": _quartiles(sends), "received": _quartiles(recvs),
                "send_ms": [round(t * 1e3, 4) for t in sends],
                "received_ms": [round(t * 1e3, 4) for t in recvs]}
    if rank == 0:
        with open(out, "w") as f:
            json.dump(result, f, indent=1)


def poll_pairs(text: str) -> list[tuple[float, float]]:
    """``--pairs-ms``: sender:receiver poll intervals in ms, comma-separated -> seconds."""
    try:
        pairs = [tuple(float(v) / 1e3 for v in pair.split(":")) for pair in text.split(",")]
        if any(len(pair) != 2 or min(pair) < 0 for pair in pairs):
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give sender:receiver intervals in ms, "
                                         "comma-separated (e.g. 0:1,1:0)") from None
    return pairs


def build_parser() -> cli.Parser:
    p = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--pairs-ms", type=poll_pairs, default="0:0,0:0.2,0:1,1:0,0.2:0,1:1,0.2:0.2",
                   help="sender:receiver poll intervals, one set of rounds each (0: spin)")
    p.add_argument("--bytes", type=cli.positive_int, default=39360,
                   help="w (the CNN's 9,840 float32)")
    p.add_argument("--gap-ms", type=cli.nonnegative_float, default=20.0,
                   help="the sender's sleep before each send (the workers' step), ms")
    p.add_argument("--rounds", type=cli.positive_int, default=100,
                   help="timed rounds per pair (3 more before them are left out)")
    p.add_argument("--shm", action="store_true",
                   help="let MPICH use shared memory (CMA) as on one host, not its network module")
    p.add_argument("--out", default="ps-polls.json", type=cli.output_file(), help="JSON to write")
    p.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    return p


def run(args) -> int:
    if args.rank_main:
        rank_main(args.pairs_ms, args.rounds, args.gap_ms / 1e3, args.bytes, args.out)
        return 0
    from contracts.files import atomic_write_text
    from real.launch.dist import SLEEPING_WAITS
    part = os.path.abspath(args.out + ".part")
    env = os.environ | SLEEPING_WAITS | {"PYTHONPATH": ROOT}
    if not args.shm:
        env |= {"MPIR_CVAR_NOLOCAL": "1", "MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp",
                "FI_TCP_IFACE": "lo"}
    mpirun = os.path.join(os.path.dirname(sys.executable), "mpirun")
    pairs_ms = ",".join(f"{s * 1e3:g}:{r * 1e3:g}" for s, r in args.pairs_ms)
    argv_r = [mpirun, "-n", "2", sys.executable, os.path.abspath(__file__), "--rank-main",
              "--pairs-ms", pairs_ms, "--bytes", str(args.bytes), "--gap-ms",
              str(args.gap_ms), "--rounds", str(args.rounds), "--out", part]
    done = subprocess.run(argv_r, env=env, timeout=1200)
    if done.returncode:
        print(f"{PROG}: the run failed", file=sys.stderr)
        return 1
    with open(part) as f:
        result = {"bytes": args.bytes, "gap_ms": args.gap_ms, "rounds": args.rounds,
                  "transport": "shm" if args.shm else "ofi tcp over loopback",
                  "pairs": json.load(f)}
    os.unlink(part)
    atomic_write_text(args.out, json.dumps(result, indent=1))
    late = result["pairs"].pop("sleep_late_ms")
    cli.print_out(f"sleep lateness (median, ms): {late}", *(
        f"sender:receiver poll {key.replace(',', ':')} ms: send {v['send']['median_ms']:.3f}"
        f" ms, received {v['received']['median_ms']:.3f} ms (medians)"
        for key, v in result["pairs"].items()))
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
