"""gloo's per-tensor allreduce after the ranks idled, against back to back (a probe).

    python benchmarks/gloo_idle.py --bandwidth 1gbit --ranks 2 --gaps-ms 0,30 --steps 40 \
        --out idle.json   # as root: hosts of the emulated cluster (real.cluster), a rank each

The per-tensor ``allreduce`` scheme all-reduces each of the CNN's eight tensors in turn
after a step of compute; a phantom rank's compute is a sleep, so its gloo threads idled
while it slept. Each rank here sleeps ``gap`` ms (both ranks together, after a barrier),
then all-reduces the CNN's tensors one after the other and times the whole (one "step"
of communication), ``--steps`` times per gap. Written: per gap, the median and quartiles
of the step's communication, and of each tensor's call.

Imports: torch, real.cluster.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CNN = [250, 10, 5000, 20, 4000, 50, 500, 10]     # the CNN's tensors (real.training.models)
PREFIX = "psgdgi"


def rank_main(gaps_ms: list[float], steps: int, out: str) -> None:
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    tensors = [torch.zeros(n) for n in CNN]
    for t in tensors:                                   # connections and first use
        dist.all_reduce(t)
    result = {}
    for gap in gaps_ms:
        per_step, per_call = [], [[] for _ in CNN]
        for _ in range(steps + 3):
            dist.barrier()
            time.sleep(gap / 1e3)
            t0 = time.perf_counter()
            for k, t in enumerate(tensors):
                c0 = time.perf_counter()
                dist.all_reduce(t)
                per_call[k].append(time.perf_counter() - c0)
            per_step.append(time.perf_counter() - t0)
        per_step, per_call = per_step[3:], [c[3:] for c in per_call]
        q = statistics.quantiles(per_step, n=4)
        result[str(gap)] = {"step_median_s": statistics.median(per_step), "step_q1_s": q[0],
                            "step_q3_s": q[2],
                            "call_median_s": [statistics.median(c) for c in per_call]}
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"tensors": CNN, "ranks": dist.get_world_size(), "steps": steps,
                   "gaps": result}, f, indent=1)
    dist.destroy_process_group()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/gloo_idle.py",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--bandwidth", default="1gbit")
    p.add_argument("--ranks", type=int, default=2, choices=(2, 3, 4), help="hosts, one rank each")
    p.add_argument("--gaps-ms", default="0,30", help="idle time before each step, comma-separated")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--out", default="gloo-idle.json")
    p.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    gaps = [float(g) for g in args.gaps_ms.split(",")]
    if args.rank_main:
        rank_main(gaps, args.steps, args.out)
        return 0
    from real.cluster import emulated_cluster, netns_command, torch_env
    with emulated_cluster(args.ranks, args.bandwidth, prefix=PREFIX) as cluster:
        procs = []
        for r in range(args.ranks):
            env = os.environ | torch_env(cluster, r, args.ranks, 29561)
            argv_r = [sys.executable, __file__, "--rank-main", "--gaps-ms", args.gaps_ms,
                      "--steps", str(args.steps), "--out", os.path.abspath(args.out)]
            procs.append(subprocess.Popen(netns_command(cluster, r, argv_r), env=env))
        codes = [pr.wait(timeout=600) for pr in procs]
    if any(codes):
        print(f"gloo_idle: a rank failed ({codes})", file=sys.stderr)
        return 1
    print(open(args.out).read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
