"""What every rank spent its time on: compute, communication, waiting.

A scheme times each iteration with ``IterationLog``::

    t0 = log.now()
    loss = step(...)                      # compute
    t1 = log.now()
    comm.allreduce(...)                   # communication (and waiting)
    log.add(epoch, it, batch, t0, t1, log.now(), bytes_sent, loss, sync=True)

The clock is ``time.monotonic`` (CLOCK_MONOTONIC on Linux): one clock for every
process on the host, so arrival times of different ranks can be compared. On a
GPU, ``sync`` (``real.launch.devices.synchronizer``) waits for the queued kernels before
each reading, so a phase's time is its work and not the time to queue it.
For a synchronising call (``sync=True``) the rank that arrives first waits for
the last; that wait is ``max(arrival of all ranks) - own arrival`` and is split
off the call's time in ``split_wait``; the rest is communication proper.

Read back (``window_parts``): a record's window (``timings.train_wall_s``, first rank's
start of training, its exit from the start barrier, to last rank's end) holds more than
one rank's rows: its *setup* (``train_wall_s`` less the rank's ``epoch_s``: what runs
before its first step, DDP's constructor for one, and the ranks' uneven start and end;
the harness's meters and the schemes' ``prepare`` run before the barrier, outside it) and
*the loop's Python* (its
``epoch_s`` less the sum of its rows: the next batch fetched, the progress line, the
curve's bookkeeping, between one row's end and the next row's start).

Imports: numpy.
"""
from __future__ import annotations

import resource
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


STREAM_EVERY_S = 0.2           # a streaming log hands its new rows over this often


@dataclass
class IterationLog:
    """Every row of this rank, kept for the record. With ``stream(on_rows)`` a thread of its
    own also hands the new rows to ``on_rows`` (the recorder's pipe,
    ``real.launch.supervise.Heartbeat.rows``) every ``STREAM_EVERY_S``: the training thread only
    appends, and a rank stuck in a call (MPI and gloo release the GIL while they wait)
    still hands over what it completed, so a run that fails keeps its iterations."""
    rank: int
    rows: list[dict] = field(default_factory=list)
    sync: Callable[[], None] | None = None     # waits for the GPU's queued work
    _queue: deque = field(default_factory=deque, repr=False)
    _on_rows: Callable[[list[dict]], None] | None = field(default=None, repr=False)
    _stop: threading.Event | None = field(default=None, repr=False)

    def now(self) -> float:
        if self.sync is not None:
            self.sync()
        return time.monotonic()

    def add(self, epoch: int, iteration: int, batch_size: int, t_start: float,
            t_comm_enter: float, t_comm_exit: float, bytes_sent: int = 0,
            loss: float | None = None, sync: bool = False) -> None:
        row = {"rank": self.rank, "epoch": epoch, "iteration": iteration,
               "batch_size": batch_size, "compute_s": t_comm_enter - t_start,
               "comm_s": t_comm_exit - t_comm_enter, "wait_s": 0.0,
               "bytes_sent": bytes_sent, "loss": loss,
               "t_comm_enter": t_comm_enter, "sync": sync}
        self.rows.append(row)
        if self._on_rows is not None:
            self._queue.append(row)

    def stream(self, on_rows: Callable[[list[dict]], None],
               every_s: float = STREAM_EVERY_S) -> None:
        """From now on, hand new rows to ``on_rows`` from a thread of their own."""
        self._on_rows, self._stop = on_rows, threading.Event()

        def hand_over():
            while not self._stop.wait(every_s):
                self.flush()
        threading.Thread(target=hand_over, name="iteration-rows", daemon=True).start()

    def flush(self) -> None:
        """Hand the rows not yet handed over to ``on_rows`` now."""
        rows = []
        try:
            while True:
                rows.append(self._queue.popleft())
        except IndexError:
            pass
        if rows and self._on_rows is not None:
            self._on_rows(rows)

    def close(self) -> None:
        """Stop streaming (the rows are all in ``rows``)."""
        if self._stop is not None:
            self._stop.set()
        self._on_rows = None


def split_wait(rows: list[dict]) -> list[dict]:
    """Move the time a rank waited for the last arrival out of ``comm_s`` into ``wait_s``.

    Rows of all ranks; those with ``sync`` and the same (epoch, iteration) belong to one call.
    """
    arrivals: dict[tuple, float] = {}
    for r in rows:
        if r.get("sync"):
            key = (r["epoch"], r["iteration"])
            arrivals[key] = max(arrivals.get(key, -np.inf), r["t_comm_enter"])
    out = []
    for r in rows:
        r = dict(r)
        if r.pop("sync", False):
            total = r["comm_s"]
            wait = min(max(arrivals[(r["epoch"], r["iteration"])] - r["t_comm_enter"], 0.0), total)
            r["wait_s"], r["comm_s"] = wait, total - wait
        r.pop("t_comm_enter", None)
        out.append(r)
    return out


def window_parts(timings: dict, rows: list[dict]) -> dict:
    """One rank's share of a record's window: ``setup_s`` (``train_wall_s`` less the sum
    of ``epoch_s``), ``loop_s`` (that sum less its rows) and ``rows_s`` (the sum of its rows'
    compute, communication and waiting). ``rows`` are that rank's rows, warm-up included,
    as dicts of numbers or of the CSV's strings; ``timings`` the record's (rank 0's
    ``epoch_s``, so the rows are rank 0's)."""
    epoch_s = sum(timings["epoch_s"])
    rows_s = sum(float(r["compute_s"]) + float(r["comm_s"]) + float(r["wait_s"]) for r in rows)
    return {"setup_s": timings["train_wall_s"] - epoch_s, "loop_s": epoch_s - rows_s,
            "rows_s": rows_s}


def loop_s_per_step(timings: dict, rows: list[dict]) -> float | None:
    """The loop's Python a step of the rank whose ``epoch_s`` the record keeps (rank 0):
    its ``window_parts`` loop over its steps (rows of iteration 0 and up; a row of iteration
    -1, an epoch's closing average, is inside ``epoch_s`` and counted as a row). None
    without ``epoch_s`` or steps."""
    steps = sum(1 for r in rows if int(r["iteration"]) >= 0)
    if not timings.get("epoch_s") or not steps:
        return None
    return window_parts(timings, rows)["loop_s"] / steps


ROW_FIELDS = ("rank", "epoch", "iteration", "batch_size", "compute_s", "comm_s", "bytes_sent",
              "loss", "t_comm_enter", "sync")


def row_line(row: dict) -> str:
    """A row as a line of the recorder's pipe (``real.launch.supervise.Heartbeat.rows``): ``r`` and
    its ROW_FIELDS, space-separated."""
    return "r " + " ".join("-" if row.get(k) is None else repr(int(row[k])) if k == "sync"
                           else repr(row[k]) for k in ROW_FIELDS) + "\n"


def parse_row(text: str) -> dict | None:
    """A row back from ``row_line``'s text after ``r ``; None if it is not one."""
    parts = text.split()
    if len(parts) != len(ROW_FIELDS):
        return None
    try:
        values = [None if v == "-" else float(v) for v in parts]
    except ValueError:
        return None
    row = dict(zip(ROW_FIELDS, values))
    for k in ("rank", "epoch", "iteration", "batch_size", "bytes_sent"):
        row[k] = int(row[k] or 0)
    row["sync"], row["wait_s"] = bool(row["sync"]), 0.0
    return row


class ResourceMeter:
    """CPU utilisation (percent of one core) and peak RSS of this process over a span."""

    def __init__(self):
        self._t0 = time.monotonic()
        self._cpu0 = _cpu_s()

    def stop(self) -> dict:
        wall = max(time.monotonic() - self._t0, 1e-9)
        return {"cpu_util_percent": 100.0 * (_cpu_s() - self._cpu0) / wall,
                "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime
