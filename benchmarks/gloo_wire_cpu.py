"""Where gloo's CPU over a shaped link goes: per thread, per wake-up, per rate (a probe).

    python benchmarks/gloo_wire_cpu.py --rates 100mbit,200mbit,500mbit,1gbit,10gbit \
        --repeats 32 --out rates-5.csv    # as root, no other emulated cluster up; ~1 min
    python benchmarks/gloo_wire_cpu.py --summary rates-5.csv    # the table per rate, the split

``calibrate.link`` fits rank 0's process time over gloo's ping-pong against the size,
``c(n) = cpu_per_message + cpu_per_byte * n``. This probe takes that process time apart,
at several shaped rates on the same two hosts (a ``real.cluster`` of prefix ``psgdwc`` per
rate, one after the other): for every thread of each rank, the CPU it ran (the thread's
own clock) and the times it was put on a core (``/proc/self/task/TID/schedstat``'s
timeslices: a sleeping thread's wake-ups), grouped as the Python thread that calls
``send``/``recv`` (``main``), gloo's device thread (``loop``: ``gloo_tcp_loop``, whose
``Loop::run`` waits in ``epoll_wait`` and whose ``Pair::handleEvents`` reads what arrived,
``gloo/transport/tcp/loop.cc``, ``pair.cc``) and the rest (``other``). Patterns, after a
barrier, per size and repetition:

* ``pingpong``: rank 0 sends n and receives n back (``calibrate.link``'s probe);
* ``oneway``: rank 0 sends n, rank 1 receives it and answers 4 bytes: rank 0's row is
  the sender's CPU of n, rank 1's the receiver's;
* ``none``: no call: what reading the counters itself costs.

One row per rank, rate, pattern, size and repetition (two warm-ups dropped): wall time, the
process's CPU (``time.process_time``, all threads, as ``calibrate.link`` reads it) and, per
thread group, CPU s and timeslices. ``--summary`` prints, per rate, what ``per_rate`` derives
and the CPU a byte and a wake-up that explain every rate (``wakeup_split``).

Imports: pandas, calibrate.probes.threads, contracts.units, real.cluster.state; torch, calibrate.probes.comm_probe and real.cluster (the runs).
"""
from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys

import pandas as pd

from calibrate.probes.threads import GROUPS, thread_counters
from contracts.units import parse_bandwidth
from real.cluster.state import default_burst_bytes

PREFIX = "psgdwc"
SIZES = (8, 512, 4096, 16384, 65536, 262144, 1048576, 4194304)
PORT = 29571
# A TCP segment's payload on a 1500-byte MTU (less 20 IP, 20 TCP, 12 of timestamps); the largest
# packet TCP hands veth to segment later (GSO, 64 KiB): 45 segments, 45 full frames on the wire
SEGMENT_PAYLOAD_BYTES = 1448
GSO_PAYLOAD_BYTES = 45 * SEGMENT_PAYLOAD_BYTES
GSO_WIRE_BYTES = 45 * 1514


def pattern_call(pattern: str, rank: int, t, ack):
    import torch.distributed as dist
    if pattern == "none":
        return lambda: None
    if pattern == "pingpong":
        return ((lambda: (dist.send(t, 1), dist.recv(t, 1))) if rank == 0
                else (lambda: (dist.recv(t, 0), dist.send(t, 0))))
    return ((lambda: (dist.send(t, 1), dist.recv(ack, 1))) if rank == 0
            else (lambda: (dist.recv(t, 0), dist.send(ack, 0))))


def group_counters() -> tuple[float, ...]:
    """Per thread group (``GROUPS``' order): CPU s, then timeslices."""
    c = thread_counters()
    return tuple(v for g in GROUPS for v in (c[g][0] / 1e9, c[g][1]))


def rank_main(rate: str, sizes: list[int], repeats: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    from calibrate.probes.comm_probe import time_op
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, rows = dist.get_rank(), []
    ack = torch.zeros(1)
    counters = [f"{g}_{k}" for g in GROUPS for k in ("cpu_s", "slices")]
    for pattern in ("none", "oneway", "pingpong"):
        for n in sizes:
            t = torch.zeros(max(1, n // 4))
            reps = repeats if n <= 65536 else max(3, repeats // 4)
            times = time_op(pattern_call(pattern, rank, t, ack), dist.barrier, reps, warmup=2,
                            counters=group_counters)
            rows += [{"rate": rate, "rank": rank, "pattern": pattern, "bytes": n, "rep": i,
                      "wall_s": wall, "process_cpu_s": cpu, **dict(zip(counters, rest))}
                     for i, (wall, cpu, *rest) in enumerate(times)]
    with open(f"{out}.rank{rank}", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    dist.destroy_process_group()


def run_rate(rate: str, args) -> list[dict]:
    from real.cluster import emulated_cluster, netns_command, torch_env
    part = os.path.abspath(f"{args.out}.{rate}")
    argv = [sys.executable, os.path.abspath(__file__), "--rank-main", "--rates", rate,
            "--sizes", ",".join(map(str, args.sizes)), "--repeats", str(args.repeats),
            "--out", part]
    with emulated_cluster(2, rate, args.burst, prefix=PREFIX, subnet="10.213.0.0/24") as cluster:
        burst_bytes = cluster.burst_bytes
        procs = [subprocess.Popen(netns_command(cluster, r, argv),
                                  env=os.environ | torch_env(cluster, r, 2, PORT))
                 for r in range(2)]
        codes = [p.wait(timeout=600) for p in procs]
    if any(codes):
        raise RuntimeError(f"a rank failed at {rate} ({codes})")
    rows = []
    for r in range(2):
        with open(f"{part}.rank{r}") as f:
            rows += [row | {"burst_bytes": burst_bytes} for row in csv.DictReader(f)]
        os.unlink(f"{part}.rank{r}")
    return rows


def per_rate(rows: pd.DataFrame) -> pd.DataFrame:
    """Per rate and bucket (``real.cluster``'s default, 2 ms of the rate, where the rows do
    not name one): rank 0's CPU over the ping-pong halved, as ``calibrate.link`` fits it (the
    median over sizes up to 4 KiB, and the slope from 1 to 4 MiB), and the receiver's side
    of ``oneway`` (rank 1) from 1 to 4 MiB: bytes per wake-up of its device thread, the
    thread's CPU per wake-up, the process's CPU a byte. Medians over repetitions."""
    if "burst_bytes" not in rows:
        rows = rows.assign(burst_bytes=rows["rate"].map(
            lambda r: default_burst_bytes(parse_bandwidth(r) * 8)))
    out = []
    for (rate, burst), g in rows.groupby(["rate", "burst_bytes"]):
        med = {key: h.groupby("bytes").median(numeric_only=True)
               for key, h in g.groupby(["pattern", "rank"])}
        pp, rx = med[("pingpong", 0)], med[("oneway", 1)]
        lo, hi = 1 << 20, 4 << 20
        wakes = rx.loc[hi, "loop_slices"] - rx.loc[lo, "loop_slices"]
        out.append({"rate": rate, "bits_per_s": parse_bandwidth(rate) * 8, "burst_bytes": burst,
                    "message_cpu_us": pp.loc[pp.index <= 4096, "process_cpu_s"].median() / 2 * 1e6,
                    "cpu_ns_per_byte": (pp.loc[hi, "process_cpu_s"] - pp.loc[lo, "process_cpu_s"])
                    / (hi - lo) / 2 * 1e9,
                    "receiver_bytes_per_wakeup": (hi - lo) / wakes,
                    "receiver_wakeup_cpu_us": (rx.loc[hi, "loop_cpu_s"] - rx.loc[lo, "loop_cpu_s"])
                    / wakes * 1e6,
                    "receiver_cpu_ns_per_byte": (rx.loc[hi, "process_cpu_s"] - rx.loc[lo, "process_cpu_s"])
                    / (hi - lo) * 1e9})
    return pd.DataFrame(out).sort_values(["bits_per_s", "burst_bytes"]).reset_index(drop=True)


def wakeup_split(table: pd.DataFrame) -> tuple[float, float]:
    """(CPU s a byte, CPU s a wake-up) that explain the CPU a byte at every rate as
    ``k + s / (2 u)``: u a segment (1448 B) where the shaper's bucket is below a 64 KiB GSO
    packet, which ``tbf`` then cuts up, else the packet (45 segments). From the medians of
    the two groups of links."""
    cut = table["burst_bytes"] < GSO_WIRE_BYTES
    seg, gso = (table.loc[m, "cpu_ns_per_byte"].median() / 1e9 for m in (cut, ~cut))
    wakeup_s = 2 * (seg - gso) / (1 / SEGMENT_PAYLOAD_BYTES - 1 / GSO_PAYLOAD_BYTES)
    return gso - wakeup_s / (2 * GSO_PAYLOAD_BYTES), wakeup_s


def summary(path: str) -> str:
    table = per_rate(pd.read_csv(path))
    per_byte_s, wakeup_s = wakeup_split(table)
    return (table.round(3).to_string(index=False) + "\n\nsplit: "
            f"{per_byte_s * 1e9:.3f} ns a byte, {wakeup_s * 1e6:.2f} us a wake-up\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/gloo_wire_cpu.py",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--rates", default="100mbit,200mbit,500mbit,1gbit,10gbit",
                   help="shaped rates, one cluster each")
    p.add_argument("--sizes", default=",".join(map(str, SIZES)), help="message sizes, bytes")
    p.add_argument("--repeats", type=int, default=24, help="per size up to 64 KiB (a quarter above)")
    p.add_argument("--burst", help="every shaper's bucket (real.cluster up --burst; default: "
                   "2 ms of the rate)")
    p.add_argument("--out", default="wire-cpu.csv", help="the rows (CSV)")
    p.add_argument("--summary", metavar="CSV", help="print the table of a probe's rows, run nothing")
    p.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",")]
    if args.summary:
        print(summary(args.summary))
        return 0
    if args.rank_main:
        rank_main(args.rates, args.sizes, args.repeats, args.out)
        return 0
    rows = [row for rate in args.rates.split(",") for row in run_rate(rate, args)]
    tmp = f"{args.out}.tmp"
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, args.out)
    print(f"wrote {args.out}: {len(rows)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
