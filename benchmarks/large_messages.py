"""Large messages at one shaped rate: where a 37 MB message's time goes (issue 38).

    sudo python -m benchmarks.large_messages --bandwidth 1gbit --out large.csv   # ~1 min

VGG-11's 37 MB gradients at P = 4 and 1 Gbit/s were predicted 10-15% too fast in four
schemes at once (phantom-4). This probe takes the candidates apart on four hosts of the
emulated cluster (``real.cluster``, the validations' queue of 1 MiB a shaper), ranks
started by mpirun, one a host, each operation ``--repeats`` times after one warm-up:

* ``mpi_one``: one message host 1 -> host 0 (MPI ``Send``/``Recv``);
* ``mpi_incast``: hosts 1-3 send one message each to host 0 at once (async_avg's last
  weights, ps_async's pushes): its port's rate three times over, or loss under the incast;
* ``mpi_allreduce``: MPI ``Allreduce`` of the message at P = 4 (mpi_allreduce's step;
  MPICH's reduce-scatter/allgather at this size), and ``mpi_allreduce_pairs``: two
  ``Allreduce`` of P = 2 at once (as many ranks moving as many bytes a rank-round);
* ``tcp_ring`` and ``mpi_ring``: every host sends one message to the next and receives
  one from the one before, all at once, over plain sockets (no library; the ranks sleep in
  the kernel) and with MPI ``Sendrecv`` (MPICH's progress polls while it waits): the
  machine moving four ports' worth at once;
* ``gloo_one``, ``gloo_gather``, ``gloo_scatter``: torch.distributed's gloo send/recv,
  gather to rank 0 and scatter from it;
* ``copy_fresh_*`` and ``copy_warm_*``: the message's bytes, in 34 tensors as VGG-11's
  gradients are, copied into one new tensor (``torch.cat``, ``real.training.step.flat_grads``:
  memory the allocator maps afresh, every page faulted in on first touch) or into one
  kept (``copy_``), by rank 0 alone (``_one``) or every rank at once (``_all``);
* ``mpi_allreduce_step`` and ``gather_scatter_step``: the schemes' own averaging
  (``real.schemes.mpi_allreduce.mpi_allreduce_mean``, ``real.schemes.gather_scatter.
  gather_scatter_mean``) on a stand-in model of those 34 gradients: the copies, the
  library's call and the mean, as a phantom step runs them between its sleeps.

Per operation and rank: the wall time, the rank's CPU (user, system), its time runnable
without a core (``/proc/self/schedstat``), its namespace's retransmitted TCP segments
(``/proc/net/snmp``); per operation the machine's busy cores (``/proc/stat``, every
namespace's softirq included). ``link_s`` is the time the message's bytes take through
the busiest port at ``--payload`` of the shaped rate (the calibrated payload share), which
is what the model's wire charges before any library or CPU cost. The ranks wait as the runs' do
(``real.launch.dist.SLEEPING_WAITS``: MPICH's heavy yield). Run it as root, alone on
the machine (``/work``'s quiet window): it measures the shared cores.

Imports: numpy, mpi4py and torch (rank side), pandas, real.cluster, contracts.units, cli.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cli
from contracts.units import parse_bandwidth

PROG = "python -m benchmarks.large_messages"
REPO_ROOT = Path(__file__).resolve().parents[1]
PREFIX = "large"
VGG11_GRAD_BYTES = 36_924_456
OPS = ("tcp_ring", "mpi_ring", "mpi_one", "mpi_incast", "mpi_allreduce", "mpi_allreduce_pairs",
       "gloo_one", "gloo_gather", "gloo_scatter",
       "copy_fresh_one", "copy_warm_one", "copy_fresh_all", "copy_warm_all",
       "mpi_allreduce_step", "gather_scatter_step")
TENSORS = 34                  # VGG-11's parameter tensors (the copies' pieces)
PORT = 5601


# ------------------------------------------------------------------ what the port alone takes

def link_s(op: str, n_bytes: int, p: int, rate_bytes_per_s: float) -> float:
    """The time ``op``'s bytes take through its busiest port at ``rate`` (no latency, no
    CPU): one message n / R; an incast or gather of P - 1 messages into one port or a
    scatter out of one (P - 1) n / R; the reduce-scatter/allgather allreduce
    2 (q - 1) / q n / R a rank (q = P, a power of two; each rank's port carries its own
    halves, in and out at once); two pairs at once n / R."""
    if op in ("mpi_one", "gloo_one", "mpi_allreduce_pairs", "tcp_ring", "mpi_ring"):
        return n_bytes / rate_bytes_per_s
    if op in ("mpi_incast", "gloo_gather", "gloo_scatter"):
        return (p - 1) * n_bytes / rate_bytes_per_s
    if op in ("mpi_allreduce", "mpi_allreduce_step"):
        return 2 * (p - 1) / p * n_bytes / rate_bytes_per_s
    if op == "gather_scatter_step":
        return 2 * (p - 1) * n_bytes / rate_bytes_per_s
    if op.startswith("copy_"):
        return float("nan")
    raise ValueError(f"unknown operation {op!r}")


# ------------------------------------------------------------------ rank side (under mpirun)

def _retrans() -> int:
    """This namespace's TCP RetransSegs (``/proc/net/snmp``)."""
    lines = [ln.split() for ln in Path("/proc/net/snmp").read_text().splitlines()
             if ln.startswith("Tcp:")]
    return int(lines[1][lines[0].index("RetransSegs")])


def _busy_s() -> float:
    """The machine's busy CPU seconds (``/proc/stat``: all but idle and iowait)."""
    v = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def _sched() -> tuple[float, float]:
    run_ns, wait_ns = Path("/proc/self/schedstat").read_text().split()[:2]
    return int(run_ns) / 1e9, int(wait_ns) / 1e9


def rank_rows(n_bytes: int, repeats: int, names=OPS) -> list[dict]:
    """Every operation of ``names`` ``repeats`` times after a warm-up; this rank's rows."""
    import numpy as np
    import torch
    import torch.distributed as dist
    from mpi4py import MPI

    from real.launch.dist import detect_launch, init_torch_distributed
    comm = MPI.COMM_WORLD
    r, p = comm.Get_rank(), comm.Get_size()
    a = np.ones(n_bytes // 4, dtype=np.float32)
    b = np.empty_like(a)
    parts = [np.empty_like(a) for _ in range(p)]
    pair = comm.Split(r // 2, r)
    torch.set_num_threads(1)
    init_torch_distributed(detect_launch(), 120.0)
    t = torch.ones(n_bytes // 4)
    t_parts = [torch.empty_like(t) for _ in range(p)]

    def mpi_one():
        if r == 1:
            comm.Send(a, 0)
        elif r == 0:
            comm.Recv(b, 1)

    def mpi_incast():
        if r == 0:
            MPI.Request.Waitall([comm.Irecv(parts[k], k) for k in range(1, p)])
        else:
            comm.Send(a, 0)

    def gloo_one():
        if r == 1:
            dist.send(t, 0)
        elif r == 0:
            dist.recv(t, 1)

    def mpi_ring():
        comm.Sendrecv(a, (r + 1) % p, recvbuf=b, source=(r - 1) % p)

    ring = _tcp_ring(comm, r, p)

    def tcp_ring():
        import threading
        sender = threading.Thread(target=ring[0].sendall, args=(memoryview(a).cast("B"),))
        sender.start()
        view, got = memoryview(b).cast("B"), 0
        while got < n_bytes // 4 * 4:
            got += ring[1].recv_into(view[got:])
        sender.join()

    model = torch.nn.ParameterList(torch.nn.Parameter(x) for x in torch.ones(n_bytes // 4)
                                   .tensor_split(TENSORS))
    for q in model:
        q.grad = torch.ones_like(q)
    grads = [q.grad for q in model]
    kept = torch.empty(n_bytes // 4)

    def copy_fresh(who):
        if who is None or r == who:
            torch.cat([g.reshape(-1) for g in grads])

    def copy_warm(who):
        if who is None or r == who:
            torch.cat([g.reshape(-1) for g in grads], out=kept)

    from real.schemes.gather_scatter import gather_scatter_mean
    from real.schemes.mpi_allreduce import mpi_allreduce_mean
    ops = {"copy_fresh_one": lambda: copy_fresh(0), "copy_warm_one": lambda: copy_warm(0),
           "copy_fresh_all": lambda: copy_fresh(None), "copy_warm_all": lambda: copy_warm(None),
           "mpi_allreduce_step": lambda: mpi_allreduce_mean(model, comm),
           "gather_scatter_step": lambda: gather_scatter_mean(model, r, p),
           "tcp_ring": tcp_ring, "mpi_ring": mpi_ring, "mpi_one": mpi_one, "mpi_incast": mpi_incast,
           "mpi_allreduce": lambda: comm.Allreduce(a, b, MPI.SUM),
           "mpi_allreduce_pairs": lambda: pair.Allreduce(a, b, MPI.SUM),
           "gloo_one": gloo_one,
           "gloo_gather": lambda: dist.gather(t, gather_list=t_parts if r == 0 else None, dst=0),
           "gloo_scatter": lambda: dist.scatter(t, scatter_list=t_parts if r == 0 else None,
                                                src=0)}
    rows = []
    for name in names:
        for rep in range(repeats + 1):
            comm.Barrier()
            busy0, (run0, wait0), re0 = _busy_s(), _sched(), _retrans()
            u0 = resource.getrusage(resource.RUSAGE_SELF)
            t0 = time.perf_counter()
            ops[name]()
            wall = time.perf_counter() - t0
            u1 = resource.getrusage(resource.RUSAGE_SELF)
            busy1, (run1, wait1), re1 = _busy_s(), _sched(), _retrans()
            if rep:
                rows.append({"op": name, "rank": r, "rep": rep - 1, "wall_s": wall,
                             "user_s": u1.ru_utime - u0.ru_utime,
                             "system_s": u1.ru_stime - u0.ru_stime,
                             "core_wait_s": wait1 - wait0, "retrans_segs": re1 - re0,
                             "machine_busy_s": busy1 - busy0})
    dist.destroy_process_group()
    return rows


def _tcp_ring(comm, r: int, p: int):
    """(socket to rank r + 1, socket from rank r - 1), TCP_NODELAY, opened before any clock."""
    import socket
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", PORT))
    srv.listen(1)
    me = os.environ["LARGE_ADDRESSES"].split(",")[r]
    addresses = comm.allgather(me)
    comm.Barrier()
    out = socket.create_connection((addresses[(r + 1) % p], PORT))
    inc = srv.accept()[0]
    for s in (out, inc):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    srv.close()
    return out, inc


def ranks_main(out_csv: Path, n_bytes: int, repeats: int, names=OPS) -> None:
    import pandas as pd
    from mpi4py import MPI
    rows = MPI.COMM_WORLD.gather(rank_rows(n_bytes, repeats, names), 0)
    if MPI.COMM_WORLD.Get_rank() == 0:
        pd.DataFrame([x for part in rows for x in part]).to_csv(out_csv, index=False)


# ------------------------------------------------------------------ summary

def summary(rows, n_bytes: int, rate_bytes_per_s: float):
    """Per operation: rank 0's median wall time (the slowest rank's for the allreduces, the
    time every rank has its sum), the port's time, the ranks' median CPU and core waits
    (ms), the retransmits a repeat (all ranks), and the machine's busy cores."""
    import pandas as pd
    out = []
    p = int(rows["rank"].max()) + 1
    for op in OPS:
        g = rows[rows["op"] == op]
        if g.empty:
            continue
        per_rep = g.groupby("rep")
        wall = (per_rep["wall_s"].max() if "allreduce" in op or op.endswith("_all")
                or op.endswith("_step") else g[g["rank"] == 0].set_index("rep")["wall_s"])
        busy = g[g["rank"] == 0].set_index("rep")["machine_busy_s"]
        out.append({"op": op, "measured_ms": 1e3 * wall.median(),
                    "min_ms": 1e3 * wall.min(), "max_ms": 1e3 * wall.max(),
                    "link_ms": 1e3 * link_s(op, n_bytes, p, rate_bytes_per_s),
                    "cpu_ms_rank": 1e3 * (g["user_s"] + g["system_s"]).median(),
                    "core_wait_ms_rank": 1e3 * g["core_wait_s"].median(),
                    "retrans_a_repeat": per_rep["retrans_segs"].sum().median(),
                    "busy_cores": float((busy / wall).median())})
    return pd.DataFrame(out)


def table(s) -> str:
    lines = ["| operation | measured ms (min-max) | ports alone ms | excess | CPU a rank ms | "
             "core waits a rank ms | retransmits a repeat | machine busy cores |",
             "|---|---|---|---|---|---|---|---|"]
    for x in s.itertuples():
        port = ("- | -" if x.link_ms != x.link_ms else
                f"{x.link_ms:.0f} | {x.measured_ms / x.link_ms - 1:+.1%}")
        lines.append(f"| {x.op} | {x.measured_ms:.0f} ({x.min_ms:.0f}-{x.max_ms:.0f}) | {port} | "
                     f"{x.cpu_ms_rank:.0f} | {x.core_wait_ms_rank:.0f} | "
                     f"{x.retrans_a_repeat:.0f} | {x.busy_cores:.2f} |")
    return "\n".join(lines)


# ------------------------------------------------------------------ driver

def build_parser() -> cli.Parser:
    p = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--bandwidth", default="1gbit", help="link rate, tc units")
    p.add_argument("--bytes", type=int, default=VGG11_GRAD_BYTES,
                   help="one message (default: VGG-11's gradients)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--workers", default="2,4", help="ranks (one a host), comma-separated, 2-4")
    p.add_argument("--payload", type=float, default=0.96,
                   help="TCP's payload share of the shaped rate (calibrate.link's)")
    p.add_argument("--ops", default=",".join(OPS), help="operations, comma-separated")
    p.add_argument("--out", help="CSV of every rank's rows (default: none)")
    p.add_argument("--ranks", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--raw", help=argparse.SUPPRESS)
    return p


def run(args) -> int:
    if args.ranks:
        ranks_main(Path(args.raw), args.bytes, args.repeats, args.ops.split(","))
        return 0
    import pandas as pd

    from real.cluster import mpi_env, mpirun_command
    from real.cluster.lifecycle import emulated_cluster
    from real.launch.dist import SLEEPING_WAITS
    rate = args.payload * parse_bandwidth(args.bandwidth)        # bytes/s
    workers = [int(w) for w in str(args.workers).split(",")]
    if any(not 2 <= w <= 4 for w in workers):
        return cli.usage_error(PROG, f"--workers {args.workers}: each from 2 to 4")
    unknown = set(args.ops.split(",")) - set(OPS)
    if unknown:
        return cli.usage_error(PROG, f"--ops: no operation {', '.join(sorted(unknown))} "
                                     f"(choose from {', '.join(OPS)})")
    frames = []
    with tempfile.TemporaryDirectory(prefix="large-") as tmp, \
            emulated_cluster(4, args.bandwidth, prefix=PREFIX, queue_bytes=2**20,
                             host_queue_packets=0) as cluster:
        for p in workers:
            raw = Path(tmp) / f"rows-{p}.csv"
            argv = [sys.executable, "-m", "benchmarks.large_messages", "--ranks", "--raw",
                    str(raw), "--bytes", str(args.bytes), "--repeats", str(args.repeats),
                    "--ops", args.ops]
            env = os.environ | mpi_env(cluster) | SLEEPING_WAITS | {
                "MASTER_ADDR": cluster.addresses[0], "GLOO_SOCKET_IFNAME": cluster.interface,
                "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1",
                "LARGE_ADDRESSES": ",".join(cluster.addresses),
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
            done = subprocess.run(mpirun_command(cluster, p, argv), env=env, cwd=REPO_ROOT,
                                  capture_output=True, text=True, timeout=600)
            if done.returncode != 0 or not raw.exists():
                tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
                print(f"{PROG}: the ranks failed (exit {done.returncode}): {tail}",
                      file=sys.stderr)
                return 1
            frames.append(pd.read_csv(raw).assign(workers=p))
    rows = pd.concat(frames, ignore_index=True)
    if args.out:
        rows.to_csv(args.out, index=False)
    for p, g in rows.groupby("workers"):
        print(f"\nP = {p}: {args.bytes} B at {args.bandwidth} ({args.payload:g} payload: "
              f"{rate / 1e6:.1f} MB/s), one rank a host, median of {args.repeats}")
        print(table(summary(g, args.bytes, rate)))
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
