"""What happened: per-rank compute / communication / waiting time, staleness, a timeline.

``compute`` is a rank's own work (forward, backward, update, server service);
``wait`` is time blocked until the slowest rank reaches a collective (or until
a server replies); ``comm`` is the rest of the time spent in communication.
With ``trace=True`` every interval is also kept as a Chrome-trace event
(``chrome://tracing``: ``ph = "X"``, microseconds, pid = host, tid = rank).
"""
from __future__ import annotations

from collections import Counter


class Recorder:
    def __init__(self, placement: tuple[int, ...], trace: bool = False):
        n = len(placement)
        self.placement = placement
        self.compute_s = [0.0] * n
        self.comm_s = [0.0] * n
        self.wait_s = [0.0] * n
        self.staleness: Counter[int] = Counter()
        self._by_kind = {"compute": self.compute_s, "comm": self.comm_s, "wait": self.wait_s}
        self.trace = trace
        self.spans: list[dict] = []

    def add(self, rank: int, kind: str, t0: float, t1: float, name: str = "") -> None:
        """Account ``t1 - t0`` seconds of ``kind`` (compute | comm | wait) to ``rank``."""
        dt = t1 - t0
        if dt <= 0:
            return
        self._by_kind[kind][rank] += dt
        if self.trace:
            self.spans.append({"name": name or kind, "cat": kind, "ph": "X",
                               "ts": t0 * 1e6, "dur": dt * 1e6,
                               "pid": self.placement[rank], "tid": rank})

    def add_staleness(self, updates_between: int) -> None:
        self.staleness[updates_between] += 1

    def chrome_trace(self, meta: dict | None = None) -> dict:
        names = [{"name": "process_name", "ph": "M", "pid": h, "args": {"name": f"host {h}"}}
                 for h in sorted(set(self.placement))]
        names += [{"name": "thread_name", "ph": "M", "pid": h, "tid": r,
                   "args": {"name": f"rank {r}"}} for r, h in enumerate(self.placement)]
        return {"traceEvents": names + self.spans, "displayTimeUnit": "ms",
                "otherData": meta or {}}
