"""The scheduler's time slice: two busy processes pinned to one core.

Each process spins reading the clock; a jump of more than ``gap_s`` between
two reads is a stretch off the core, while the other process ran. With two
processes round-robin on one core every off-stretch is one quantum of the
other, so the mean off-stretch is the quantum the kernel gives a busy
process (the scheduler tick, 4 ms at HZ=250, when the base slice is shorter).
``simulator.timeslice`` uses it for messages to processes that wait for a core.

The balance delay: two busy processes pinned to one core are let loose on
all cores at once; the time until one of them runs on another core is how
long the kernel leaves a core idle while another has two to run (its load
balancer, not an instant steal). ``simulator.cores`` uses it.
"""
from __future__ import annotations

import ctypes
import math
import multiprocessing as mp
import os
import time


def _pair(target, args: tuple, timeout_s: float) -> list:
    """Run ``target(*args, queue)`` in two forked processes at once; what each put."""
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=args + (out,)) for _ in range(2)]
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
    runs = _pair(_spin, (core, duration_s, gap_s), duration_s + 30)
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
    tries = _pair(_loose, (core, time.time() + 0.5, repeats, period_s, window_s),
                  repeats * period_s + 30)
    rows = []
    for r, pair in enumerate(zip(*tries)):
        moved = [s for s in pair if s is not None]
        rows.append({"try": r, "moved_s": min(moved) if moved else None, "window_s": window_s})
    return rows


def balance_delay_s(rows) -> float:
    """Median delay of the tries (a try that saw no move counts as its window); 0.0 if none."""
    def missed(moved) -> bool:                # None, or NaN once read back from CSV
        return moved is None or math.isnan(float(moved))
    delays = sorted(float(r["window_s"]) if missed(r["moved_s"]) else float(r["moved_s"])
                    for r in rows)
    return delays[len(delays) // 2] if delays else 0.0
