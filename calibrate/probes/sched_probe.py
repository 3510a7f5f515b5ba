"""The scheduler's time slice: two busy processes pinned to one core.

Each process spins reading the clock; a jump of more than ``gap_s`` between
two reads is a stretch off the core, while the other process ran. With two
processes round-robin on one core every off-stretch is one quantum of the
other, so the mean off-stretch is the quantum the kernel gives a busy
process (the scheduler tick, 4 ms at HZ=250, when the base slice is shorter).
``simulator.model.hardware.timeslice`` uses it for messages to processes that wait for a core.

The balance delay: two busy processes pinned to one core are let loose on
all cores at once; the time until one of them runs on another core is how
long the kernel leaves a core idle while another has two to run (its load
balancer, not an instant steal). ``simulator.model.hardware.cores`` uses it.

The wake wait: two gloo ranks pinned to one core step in turn (a training
step of the run's model, then an allreduce). The rank that leaves the call
first computes at once; the other, woken in the call, gets the core only at a later scheduler
tick. The time between the two leaving is how long a woken gloo rank waits
for a core another process has just taken; ``CoreHost.wake`` lets such
ranks in one per that interval while every core is busy.

Checks, not calibrations (they run more processes than the hold-out allows):
``python -m calibrate.sched_probe --check 3,5 --leaves`` runs k gloo ranks that
train and allreduce, and prints when, on average, each left the call after the
first (``docs/simulator.md`` quotes it against ``CoreHost.wake``).
``python -m calibrate.sched_probe --check 3,5`` runs k processes that each spin
``w`` of CPU time and then meet at a sleeping barrier, step after step. On C
cores the step lasts ``k/C w`` if the cores are shared as a fluid and
``ceil(k/C) w`` if every process stays on its core; ``docs/simulator.md``
quotes the answer against ``CoreHost``.

Imports: torch, calibrate.probes.compute_probe, cli.
"""
from __future__ import annotations

import ctypes
import math
import multiprocessing as mp
import os
import sys
import time


def _in_processes(target, args: tuple, timeout_s: float, n: int = 2,
                  start: str = "fork") -> list:
    """Run ``target(*args, queue)`` in ``n`` (two) processes at once, started by ``start``
    (``multiprocessing``'s method); what each put."""
    ctx = mp.get_context(start)
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=args + (out,)) for _ in range(n)]
    for p in procs:
        p.start()
    results = [out.get(timeout=timeout_s) for _ in procs]
    for p in procs:
        p.join()
    return results


def _spin(core: int, duration_s: float, gap_s: float, out) -> None:
    os.sched_setaffinity(0, {core})
    off, last = [], time.perf_counter()
    end = last + duration_s
    while last < end:
        now = time.perf_counter()
        if now - last > gap_s:
            off.append(now - last)
        last = now
    out.put(off)


def off_core_rows(duration_s: float = 2.0, gap_s: float = 2e-4) -> list[dict]:
    """One row per stretch a busy process spent off its core, sharing it with one other."""
    if not hasattr(os, "sched_setaffinity"):
        return []
    core = min(os.sched_getaffinity(0))
    runs = _in_processes(_spin, (core, duration_s, gap_s), duration_s + 30)
    return [{"process": i, "off_s": s} for i, offs in enumerate(runs) for s in offs]


def quantum_s(rows) -> float:
    """Mean off-core stretch: the time slice; 0.0 when nothing was measured."""
    offs = [float(r["off_s"]) for r in rows]
    return sum(offs) / len(offs) if offs else 0.0


# ---------------------------------------------------------------- load balancing

def _sched_getcpu():
    """libc's sched_getcpu, or None where there is none."""
    try:
        return ctypes.CDLL(None).sched_getcpu
    except (OSError, AttributeError):
        return None


def _loose(core: int, start_s: float, repeats: int, period_s: float, window_s: float,
           out) -> None:
    getcpu, allowed, moved = _sched_getcpu(), os.sched_getaffinity(0), []
    for r in range(repeats):
        os.sched_setaffinity(0, {core})
        begin = start_s + r * period_s
        while time.time() < begin:             # both busy on `core`
            pass
        os.sched_setaffinity(0, allowed)
        t0 = now = time.perf_counter()
        while now - t0 < window_s and getcpu() == core:
            now = time.perf_counter()
        moved.append(now - t0 if now - t0 < window_s else None)
    out.put(moved)


def balance_rows(repeats: int = 40, window_s: float = 0.15) -> list[dict]:
    """One row per try: seconds until one of two busy processes left their shared core
    for an idle one (``None``: not within ``window_s``)."""
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    if len(allowed) < 2 or _sched_getcpu() is None:
        return []
    core, period_s = min(allowed), window_s + 0.05
    tries = _in_processes(_loose, (core, time.time() + 0.5, repeats, period_s, window_s),
                    repeats * period_s + 30)
    rows = []
    for r, pair in enumerate(zip(*tries)):
        moved = [s for s in pair if s is not None]
        rows.append({"try": r, "moved_s": min(moved) if moved else None, "window_s": window_s})
    return rows


def balance_delays_s(rows) -> tuple[float, ...]:
    """Every try's delay, sorted (a try that saw no move counts as its window)."""
    def missed(moved) -> bool:                # None, or NaN once read back from CSV
        return moved is None or math.isnan(float(moved))
    return tuple(sorted(float(r["window_s"]) if missed(r["moved_s"]) else float(r["moved_s"])
                        for r in rows))


def balance_delay_s(rows) -> float:
    """Median delay of the tries; 0.0 if none."""
    delays = balance_delays_s(rows)
    return delays[len(delays) // 2] if delays else 0.0


# ---------------------------------------------------------------- a woken gloo rank

WAKE_WARMUP = 20


def _gloo_turns(core, store: str, model_name: str, batch: int, repeats: int, world: int,
                ranks, out) -> None:
    import torch
    import torch.distributed as dist

    from calibrate.probes.compute_probe import LR, make_model, synthetic_batch, timed_step
    if core is not None:        # pinned after the imports (they run on every core): each
        for tid in os.listdir("/proc/self/task"):     # thread, torch's idle one included
            os.sched_setaffinity(int(tid), {core})
    torch.set_num_threads(1)
    rank = ranks.get()
    model = make_model(model_name)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = synthetic_batch(model_name, batch, seed=rank)
    from real.launch.dist import listen_locally
    listen_locally()                               # gloo's pairs on loopback only
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    getcpu = _sched_getcpu() or (lambda: -1)
    grad, left, cpus = torch.zeros(1024), [], []
    for _ in range(WAKE_WARMUP + repeats):
        timed_step(model, opt, x, y)               # a training step: a spin on process_time()
        dist.all_reduce(grad)                      # enters the kernel, which lets a woken rank in sooner
        left.append(time.perf_counter())           # CLOCK_MONOTONIC: one clock for all
        cpus.append(getcpu())                      # the core the kernel woke it onto
    dist.destroy_process_group()
    out.put((left[WAKE_WARMUP:], cpus[WAKE_WARMUP:]))


def gloo_steps(world: int, model_name: str = "cnn", batch: int = 64, repeats: int = 200,
               core=None) -> list[list[tuple[float, int]]]:
    """``world`` gloo ranks that train and then allreduce, step after step (all pinned to
    ``core`` if given): per step and rank, (seconds it left the call after the first rank
    did, the core it then ran on; -1 where unknown)."""
    import tempfile
    ranks = mp.get_context("spawn").Queue()    # torch in a fresh interpreter, not a fork
    for r in range(world):
        ranks.put(r)
    with tempfile.TemporaryDirectory() as tmp:
        args = (core, os.path.join(tmp, "store"), model_name, batch, repeats, world, ranks)
        runs = _in_processes(_gloo_turns, args, 120 + world * repeats, n=world, start="spawn")
    steps = []
    for step in zip(*[zip(left, cpus) for left, cpus in runs]):
        first = min(t for t, _ in step)
        steps.append([(t - first, cpu) for t, cpu in step])
    return steps


def gloo_leaves(world: int, model_name: str = "cnn", batch: int = 64, repeats: int = 200,
                core=None) -> list[list[float]]:
    """Per step, the seconds each rank left the call after the first, in order."""
    return _leave_order(gloo_steps(world, model_name, batch, repeats, core))


def _leave_order(per_step) -> list[list[float]]:
    return [sorted(t for t, _ in step) for step in per_step]


def wake_rows(model_name: str = "cnn", batch: int = 64, repeats: int = 200) -> list[dict]:
    """One row per step of two gloo ranks training on one core: seconds between the first
    and the second leaving the allreduce. [] where processes cannot be pinned."""
    if not hasattr(os, "sched_setaffinity"):
        return []
    steps = gloo_leaves(2, model_name, batch, repeats, core=min(os.sched_getaffinity(0)))
    return [{"step": i, "later_s": step[1]} for i, step in enumerate(steps)]


def wake_wait_s(rows) -> float:
    """Mean time the woken rank left after the other; 0.0 when nothing was measured."""
    waits = [float(r["later_s"]) for r in rows]
    return sum(waits) / len(waits) if waits else 0.0


# ---------------------------------------------------------------- synchronous steps (a check)

def _synced(barrier, work_s: float, steps: int, out) -> None:
    barrier.wait()
    t0 = time.perf_counter()
    for _ in range(steps):
        end = time.process_time() + work_s      # w of CPU time, however long it takes
        while time.process_time() < end:
            pass
        barrier.wait()                          # a semaphore: the early ones sleep
    out.put(time.perf_counter() - t0)


def synced_step_w(k: int, work_s: float = 0.0086, steps: int = 300) -> float:
    """Mean wall time of one step of k spinning processes that meet at a barrier, in w."""
    barrier = mp.get_context("fork").Barrier(k)
    walls = _in_processes(_synced, (barrier, work_s, steps), 60 + 4 * k * work_s * steps, n=k)
    return max(walls) / steps / work_s


PROG = "python -m calibrate.sched_probe"


def build_parser():
    from cli import Parser, float_in, int_in, int_list
    most = 4 * (os.cpu_count() or 1)          # processes at once: 4 per core at most
    p = Parser(prog=PROG,
               description="Check how the kernel shares the cores in synchronous steps.")
    p.add_argument("--check", default=(3, 5), type=int_list(1, most),
                   help=f"process counts, comma-separated (1..{most})")
    p.add_argument("--work-ms", type=float_in(0.01, 10_000), default=8.6,
                   help="CPU time of one step (ms)")
    p.add_argument("--steps", type=int_in(1, 100_000), default=300,
                   help="steps per process count")
    p.add_argument("--leaves", action="store_true",
                   help="instead: k gloo ranks train and allreduce; when each leaves the call"
                        " and how they then sit on the cores")
    return p


def main(argv=None) -> int:
    from cli import command
    return command(PROG, build_parser().parse_args, run, argv)


def run(args) -> int:
    counts = list(args.check)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if args.leaves:
        return print_leaves(counts, cores, args.steps)
    print(f"{cores} cores, w = {args.work_ms} ms, {args.steps} steps")
    print(" k   step / w   fluid k/C   fixed cores ceil(k/C)")
    for k in counts:
        step = synced_step_w(k, args.work_ms / 1e3, args.steps)
        print(f"{k:2d}   {step:8.2f}   {k / cores:9.2f}   {math.ceil(k / cores):9d}")
    return 0


def print_leaves(counts, cores: int, steps: int) -> int:
    print(f"{cores} cores, cnn batch 64, {steps} steps: mean ms after the first rank left;"
          " ranks per core after the call (share of steps)")
    for k in counts:
        per_step = gloo_steps(k, repeats=steps)
        leaves = _leave_order(per_step)
        means = [1e3 * sum(s[j] for s in leaves) / len(leaves) for j in range(1, k)]
        print(f"{k:2d} ranks: " + "  ".join(f"{m:5.1f}" for m in means)
              + "   |  " + _placements(per_step))
    return 0


def _placements(per_step) -> str:
    """How the ranks sat on the cores after each call: "2+2 61%  3+1 39%"."""
    from collections import Counter
    if any(cpu < 0 for step in per_step for _, cpu in step):
        return "cores unknown (no sched_getcpu)"
    shapes = Counter()
    for step in per_step:
        on_core = Counter(cpu for _, cpu in step)
        shapes["+".join(str(n) for n in sorted(on_core.values(), reverse=True))] += 1
    return "  ".join(f"{shape} {100 * n / len(per_step):.0f}%" for shape, n in shapes.most_common())


if __name__ == "__main__":
    sys.exit(main())
