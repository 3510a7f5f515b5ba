"""The scheduler's time slice: two busy processes pinned to one core.

Each process spins reading the clock; a jump of more than ``gap_s`` between
two reads is a stretch off the core, while the other process ran. With two
processes round-robin on one core every off-stretch is one quantum of the
other, so the mean off-stretch is the quantum the kernel gives a busy
process (the scheduler tick, 4 ms at HZ=250, when the base slice is shorter).
``simulator.timeslice`` uses it for messages to processes that wait for a core.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import time


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
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_spin, args=(core, duration_s, gap_s, out)) for _ in range(2)]
    for p in procs:
        p.start()
    runs = [out.get(timeout=duration_s + 30) for _ in procs]
    for p in procs:
        p.join()
    return [{"process": i, "off_s": s} for i, offs in enumerate(runs) for s in offs]


def quantum_s(rows) -> float:
    """Mean off-core stretch: the time slice; 0.0 when nothing was measured."""
    offs = [float(r["off_s"]) for r in rows]
    return sum(offs) / len(offs) if offs else 0.0
