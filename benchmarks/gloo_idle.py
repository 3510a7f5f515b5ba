"""gloo's per-tensor allreduce call by call: its time, the CPU its ranks spend, and what
the machine's cores were doing meanwhile (a probe).

    python benchmarks/gloo_idle.py --bandwidth 1gbit --ranks 2 --gaps-ms 0,30 --steps 40 \
        --out idle.json   # as root: hosts of the emulated cluster (real.cluster), a rank each
    python benchmarks/gloo_idle.py --loopback --ranks 4 --out lo.json   # no namespaces

The per-tensor ``allreduce`` scheme all-reduces each of the CNN's eight tensors in turn
after a step of compute; a phantom rank's compute is a sleep, so its gloo threads idled
while it slept. Each rank here sleeps ``gap`` ms (both ranks together, after a barrier),
then all-reduces the CNN's tensors one after the other and times the whole (one "step"
of communication), ``--steps`` times per gap. ``--spin`` runs a busy loop at nice 19 on
every core meanwhile (a woken gloo thread then preempts a running task instead of waking
an idle core). Written per gap: the step's median and mean, each tensor's median call,
the calls' mean, 90th percentile and share of calls of 2 ms or more, the CPU a rank's
process spent per call (all its threads: Python's, torch's worker, gloo's device loop),
its context switches per call, and the cores the whole machine kept busy over the calls
(``/proc/stat``: every rank's CPU and the kernel's network work on the two cores).

Imports: torch, real.cluster (not with ``--loopback``).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

CNN = [250, 10, 5000, 20, 4000, 50, 500, 10]     # the CNN's tensors (real.training.models)
PREFIX = "psgdgi"
SLOW_CALL_S = 0.002


def _busy_jiffies() -> tuple[int, int]:
    """(jiffies not idle, all jiffies) of the machine so far (``/proc/stat``)."""
    fields = [int(v) for v in open("/proc/stat").readline().split()[1:]]
    return sum(fields) - fields[3] - fields[4], sum(fields)


def _switches() -> int:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_nvcsw + use.ru_nivcsw


def _summary(per_step, per_call, cpu, switches, busy) -> dict:
    calls = [c for k in per_call for c in k]
    q = statistics.quantiles(per_step, n=4)
    return {"step_median_s": statistics.median(per_step), "step_mean_s": statistics.mean(per_step),
            "step_q1_s": q[0], "step_q3_s": q[2],
            "call_median_s": [statistics.median(c) for c in per_call],
            "call_mean_s": statistics.mean(calls),
            "call_p90_s": statistics.quantiles(calls, n=10)[-1],
            "slow_call_share": sum(c >= SLOW_CALL_S for c in calls) / len(calls),
            "cpu_per_call_s": statistics.mean(cpu), "switches_per_call": statistics.mean(switches),
            "busy_cores": busy}


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
        cpu, switches, in_calls, busy_s = [], [], 0.0, 0.0
        for s in range(steps + 3):
            dist.barrier()
            time.sleep(gap / 1e3)
            b0, t0 = _busy_jiffies(), time.perf_counter()
            for k, t in enumerate(tensors):
                c0, p0, s0 = time.perf_counter(), time.process_time(), _switches()
                dist.all_reduce(t)
                if s >= 3:
                    per_call[k].append(time.perf_counter() - c0)
                    cpu.append(time.process_time() - p0)
                    switches.append(_switches() - s0)
            b1 = _busy_jiffies()
            if s >= 3:
                per_step.append(time.perf_counter() - t0)
                busy_s += (b1[0] - b0[0]) / (os.sysconf("SC_CLK_TCK"))
                in_calls += per_step[-1]
        result[str(gap)] = _summary(per_step, per_call, cpu, switches, busy_s / in_calls)
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"tensors": CNN, "ranks": dist.get_world_size(), "steps": steps,
                       "gaps": result}, f, indent=1)
    dist.destroy_process_group()


def _spinners(spin: bool) -> list:
    """A busy loop at nice 19 on every core, or none."""
    if not spin:
        return []
    code = "import os; os.nice(19)\nwhile True: pass"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(os.cpu_count())]


def _run_ranks(args, commands) -> list[int]:
    spinners = _spinners(args.spin)
    try:
        procs = [subprocess.Popen(argv, env=env) for argv, env in commands]
        return [pr.wait(timeout=600) for pr in procs]
    finally:
        for s in spinners:
            s.kill()
            s.wait()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/gloo_idle.py",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--bandwidth", default="1gbit")
    p.add_argument("--ranks", type=int, default=2, choices=(2, 3, 4), help="hosts, one rank each")
    p.add_argument("--gaps-ms", default="0,30", help="idle time before each step, comma-separated")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--loopback", action="store_true", help="all ranks on 127.0.0.1, no cluster")
    p.add_argument("--spin", action="store_true", help="a busy loop at nice 19 on every core")
    p.add_argument("--out", default="gloo-idle.json")
    p.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    gaps = [float(g) for g in args.gaps_ms.split(",")]
    if args.rank_main:
        rank_main(gaps, args.steps, args.out)
        return 0
    argv_r = [sys.executable, os.path.abspath(__file__), "--rank-main", "--gaps-ms",
              args.gaps_ms, "--steps", str(args.steps), "--out", os.path.abspath(args.out)]
    if args.loopback:
        env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29561", "WORLD_SIZE": str(args.ranks),
               "GLOO_SOCKET_IFNAME": "lo"}
        codes = _run_ranks(args, [(argv_r, os.environ | env | {"RANK": str(r)})
                                  for r in range(args.ranks)])
    else:
        from real.cluster import emulated_cluster, netns_command, torch_env
        with emulated_cluster(args.ranks, args.bandwidth, prefix=PREFIX) as cluster:
            codes = _run_ranks(args, [(netns_command(cluster, r, argv_r),
                                       os.environ | torch_env(cluster, r, args.ranks, 29561))
                                      for r in range(args.ranks)])
    if any(codes):
        print(f"gloo_idle: a rank failed ({codes})", file=sys.stderr)
        return 1
    print(open(args.out).read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
