"""A pair's first message over MPICH's network module: which pairs MPI_Init connects, and
what a send costs that opens its pair's connection.

    python benchmarks/first_contact.py --ranks 6 --runs 30 --out first-contact.json   # one host

The parameter server's first w (``real.schemes.ps``) is rank 0's first message to each
worker. Its ranks talk through MPICH's ofi netmod as between hosts (``MPIR_CVAR_NOLOCAL=1``:
no shared memory, libfabric's tcp provider over loopback), each waiting in sleeping polls
(``real.launch.dist.wait``, ``--poll-ms``). In each run, right after ``MPI_Init``, every rank
lists its TCP connections (``/proc/net/tcp`` for the sockets it holds), and at the end the
ranks put the ends together (a gather before the sends would connect every rank to rank 0:
MPICH's ``Gatherv`` sends to the root directly): rank 0's peers after ``MPI_Init``, *connected
by MPI_Init* (``mpich.init_peers`` says which). Then rank 0 sends 39 kB (the CNN's w, header and vector, ``Link.send``) to each
worker in turn, each ``--gap-ms`` after the worker began to wait (its polls backed off), all
workers once, then all once more: a worker's first send against its second, per worker, as
medians over the runs in ms. A worker MPI_Init left unconnected pays the connection in its
first send (``model.comm.polls.connect_s``: one and a half of its intervals and 4 latencies,
then its next poll after w arrives).

Imports: mpi4py, numpy, real.launch.dist, real.schemes.ps.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import cli

PROG = "python benchmarks/first_contact.py"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NETMOD = {"MPIR_CVAR_NOLOCAL": "1", "MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp",
          "FI_TCP_IFACE": "lo"}


def tcp_ports(pid: int) -> tuple[list[int], list[tuple[int, int]]]:
    """The process's listening ports and its connections as (local port, remote port), from
    its socket descriptors and ``/proc/net/tcp``."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    listening, connected = [], []
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        f = line.split()
        if f[9] not in inodes:
            continue
        local, remote = int(f[1].split(":")[1], 16), int(f[2].split(":")[1], 16)
        (listening.append(local) if f[3] == "0A" else connected.append((local, remote)))
    return listening, connected


def peers_of_rank0(ends: list) -> list[int]:
    """Rank 0's connected peers from every rank's ``tcp_ports``: a connection rank 0 made
    ends at a peer's listening port; one it accepted starts at the port of a peer's own."""
    owner = {port: r for r, (listening, _) in enumerate(ends) for port in listening}
    local = {lp: r for r, (_, conns) in enumerate(ends) for lp, _ in conns}
    peers = set()
    for lp, rp in ends[0][1]:
        peer = owner.get(rp, local.get(rp))
        if peer not in (None, 0):
            peers.add(peer)
    return sorted(peers)


def rank_main(gap_s: float, out: str) -> None:
    import numpy as np
    from mpi4py import MPI

    from real.launch.dist import wait
    from real.schemes.ps import Link
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    mine = tcp_ports(os.getpid())      # before any message of ours; gathered at the end,
                                       # as a gather would connect every rank to rank 0
    link, w = Link(world, 600.0), np.zeros(9840, dtype=np.float32)
    times = {}
    for send in range(2):
        for k in range(1, size):
            wait(world.Ibarrier(), 600.0, "barrier")          # the worker begins to wait here
            if rank == 0:
                time.sleep(gap_s)
                t0 = time.perf_counter()
                link.send(k, send, w)
                times[f"{k},{send}"] = time.perf_counter() - t0
            elif rank == k:
                link.recv(0, w)
    wait(world.Ibarrier(), 600.0, "barrier")
    ends = world.gather(mine, root=0)
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"init_peers": peers_of_rank0(ends), "send_s": times}, f)


def summary(runs: list[dict], ranks: int) -> dict:
    """Per worker: connected by MPI_Init in every run or not, and its first and second
    send's medians (ms)."""
    out = {}
    for k in range(1, ranks):
        first = [r["send_s"][f"{k},0"] for r in runs]
        second = [r["send_s"][f"{k},1"] for r in runs]
        out[str(k)] = {"connected_by_init": all(k in r["init_peers"] for r in runs),
                       "first_ms": round(statistics.median(first) * 1e3, 3),
                       "second_ms": round(statistics.median(second) * 1e3, 3),
                       "first_less_second_ms": round(statistics.median(
                           [a - b for a, b in zip(first, second)]) * 1e3, 3)}
    return out


def build_parser() -> cli.Parser:
    p = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=cli.int_in(3, 33), default=6,
                   help="ranks: the server and its workers (6: rank 3 not connected at init)")
    p.add_argument("--runs", type=cli.positive_int, default=30, help="runs (mpirun each)")
    p.add_argument("--poll-ms", type=cli.nonnegative_float, default=1.0,
                   help="the ranks' longest sleep between polls (PSGD_WAIT_SLEEP_S), ms")
    p.add_argument("--gap-ms", type=cli.nonnegative_float, default=20.0,
                   help="how long each worker waits before its send, ms")
    p.add_argument("--out", default="first-contact.json", type=cli.output_file(),
                   help="JSON to write")
    p.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    return p


def run(args) -> int:
    if args.rank_main:
        rank_main(args.gap_ms / 1e3, args.out)
        return 0
    from contracts.files import atomic_write_text
    from real.launch.dist import SLEEPING_WAITS, WAIT_SLEEP_ENV
    env = (os.environ | SLEEPING_WAITS | NETMOD
           | {WAIT_SLEEP_ENV: str(args.poll_ms / 1e3), "PYTHONPATH": ROOT})
    mpirun = os.path.join(os.path.dirname(sys.executable), "mpirun")
    part = os.path.abspath(args.out + ".part")
    runs = []
    for _ in range(args.runs):
        argv = [mpirun, "-n", str(args.ranks), sys.executable, os.path.abspath(__file__),
                "--rank-main", "--gap-ms", str(args.gap_ms), "--out", part]
        if subprocess.run(argv, env=env, timeout=600).returncode:
            print(f"{PROG}: a run failed", file=sys.stderr)
            return 1
        with open(part) as f:
            runs.append(json.load(f))
    os.unlink(part)
    result = {"ranks": args.ranks, "runs": args.runs, "poll_ms": args.poll_ms,
              "gap_ms": args.gap_ms, "transport": "ofi tcp over loopback",
              "init_peers_of_rank0": runs[0]["init_peers"],
              "workers": summary(runs, args.ranks)}
    atomic_write_text(args.out, json.dumps(result, indent=1))
    cli.print_out(f"rank 0's peers after MPI_Init: {result['init_peers_of_rank0']}", *(
        f"worker {k}: {'connected' if v['connected_by_init'] else 'NOT connected'} by "
        f"MPI_Init; first send {v['first_ms']:.3f} ms, second {v['second_ms']:.3f} ms "
        f"(medians), first less second {v['first_less_second_ms']:+.3f} ms"
        for k, v in result["workers"].items()))
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
