"""This process's threads, grouped: the CPU each group ran and the times it was put on a core.

gloo's TCP transport reads every socket of a context in one device thread (``Loop::run``
waits in ``epoll_wait``, ``Pair::handleEvents`` reads what arrived: ``gloo/transport/tcp/
loop.cc``, ``pair.cc``), named ``gloo_tcp_loop``; a sleeping thread is put on a core once
per wake-up, so that thread's timeslices count its wake-ups. Groups: ``main`` (the thread
that calls), ``loop`` (gloo's device threads), ``other``.

Linux only (``/proc/self/task``). Imports: the standard library only.
"""
from __future__ import annotations

import os
import time

GROUPS = ("main", "loop", "other")
DEVICE_THREAD = "gloo_tcp_loop"


def thread_counters() -> dict[str, list[int]]:
    """Per group: [ns on a CPU, timeslices] summed over its threads. The CPU is each thread's
    own clock (``clock_gettime`` of ``(~tid << 3) | 6``, the kernel's per-thread
    CPUCLOCK_SCHED: exact, where schedstat's ns lag a running thread by up to a tick); the
    timeslices are ``/proc/self/task/TID/schedstat``'s third field."""
    out = {g: [0, 0] for g in GROUPS}
    main = str(os.getpid())
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                slices = int(f.read().split()[2])
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
            run_ns = time.clock_gettime_ns(((~int(tid)) << 3) | 6)
        except (FileNotFoundError, ProcessLookupError, OSError):
            continue                                  # a thread that ended meanwhile
        group = "main" if tid == main else "loop" if name.startswith(DEVICE_THREAD) else "other"
        out[group][0] += run_ns
        out[group][1] += slices
    return out


def device_thread() -> tuple[float, int]:
    """(CPU s, timeslices) of gloo's device threads so far."""
    ns, slices = thread_counters()["loop"]
    return ns / 1e9, slices
