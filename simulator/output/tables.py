"""Rows of predictions as a text table, CSV or JSON (the edge that formats; no I/O here).

Imports: contracts.units, simulator.engine.sweep.
"""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from contracts.units import format_duration
from simulator.engine.sweep import COLUMNS
from simulator.model.schemes import SCHEMES

_TIMES = ("epoch_s", "time_s", "compute_s", "comm_s", "wait_s")
_TABLE = (("scheme", "{:<15}", "scheme"), ("workers", "{:>5}", "P"), ("hosts", "{:>5}", "hosts"),
          ("epoch_s", "{:>9}", "epoch"), ("time_s", "{:>9}", "run"),
          ("speedup", "{:>7.2f}", "speedup"), ("efficiency", "{:>5.2f}", "eff"),
          ("compute_s", "{:>9}", "compute"), ("comm_s", "{:>9}", "comm"),
          ("wait_s", "{:>9}", "wait"), ("mean_staleness", "{:>6.2f}", "stale"),
          ("engine", "{:>5}", "eng"), ("fidelity", "{:>9}", "fidelity"))


def full_table(rows: list[dict], header: str = "") -> str:
    """Every row: time per epoch and of the run, speedup, the split of a worker's time,
    staleness, engine; times in human units."""
    heads = [fmt.replace(".2f", "").format(title) for _, fmt, title in _TABLE]
    lines = [header] if header else []
    lines.append(" ".join(heads))
    for r in rows:
        lines.append(" ".join(fmt.format(format_duration(r[key]) if key in _TIMES else r[key])
                              for key, fmt, _ in _TABLE))
    return "\n".join(lines)


MAX_COLUMNS = 8


def summary_columns(counts: list[int], keep: tuple[int, ...] = ()) -> list[int]:
    """The worker counts the summary shows: all of them if few, else P = 1, the powers
    of two and the largest, thinned evenly to ``MAX_COLUMNS``; ``keep`` (the baseline, the
    fastest) always among them."""
    counts = sorted(set(counts))
    if len(counts) <= MAX_COLUMNS:
        return counts
    top = counts[-1]
    picks = sorted({c for c in counts if c & (c - 1) == 0} | {counts[0], top})
    must = set(keep) & set(counts)
    while len(picks) + len(must - set(picks)) > MAX_COLUMNS:
        thinned = picks[:1] + picks[1:-1:2] + picks[-1:]
        if thinned == picks:
            break
        picks = thinned
    return sorted(set(picks) | must)


def summary_table(rows: list[dict], header: str = "", csv_dir="predictions",
                  meta: dict | None = None) -> str:
    """Time per epoch (or of the whole run, where it is not one epoch) per scheme at a few
    P, the fastest at each P marked, then the answer: the fastest and its speedup."""
    workload = (meta or {}).get("workload", {"epochs": 1.0, "iterations": None})
    whole_run = bool(workload.get("iterations")) or workload.get("epochs", 1.0) != 1.0
    key = "time_s" if whole_run else "epoch_s"
    fastest = min(rows, key=lambda r: r["epoch_s"])
    base_p = (meta or {}).get("baseline", {}).get("workers", 1)
    cols = summary_columns([r["workers"] for r in rows], (base_p, fastest["workers"]))
    by = {(r["scheme"], r["workers"]): r[key] for r in rows}
    schemes = list(dict.fromkeys(r["scheme"] for r in rows))
    marked = {p: _fastest(by, schemes, p) for p in cols}
    cells = {k: format_duration(v) for k, v in by.items()}
    width = max(8, max(len(c) for c in cells.values()) + 2)
    lines = [header] if header else []
    what = f"time for {header_length(workload)}" if whole_run else "time per epoch"
    lines.append(f"{what} by workers P; * = fastest at that P")
    lines.append(f"{'scheme':<16}{'P=' + str(cols[0]):>{width}} "
                 + "".join(f"{p:>{width}} " for p in cols[1:]))
    for s in schemes:
        row = [f"{cells.get((s, p), '-'):>{width}}" + ("*" if s in marked[p] else " ")
               for p in cols]
        lines.append(f"{s:<16}" + "".join(row).rstrip())
    run = (f", {format_duration(fastest['time_s'])} for {header_length(workload)}"
           if whole_run else "")
    lines.append(f"fastest: {fastest['scheme']} at P = {fastest['workers']}, "
                 f"{format_duration(fastest['epoch_s'])} per epoch{run}; speedup "
                 f"{fastest['speedup']:.2f}, efficiency {fastest['efficiency']:.2f}")
    skipped = sorted(s for s in schemes if any((s, p) not in by for p in cols)
                     and not SCHEMES[s].single_worker)
    if skipped:
        lines.append(f"-: not predicted ({', '.join(skipped)} at the P left blank: shared memory "
                     "needs one host)" if all(SCHEMES[s].single_host for s in skipped) else
                     f"-: not predicted at that P ({', '.join(skipped)})")
    lines.append(made_by(rows))
    lines.append(f"every scheme and P with compute, communication, waiting and staleness: "
                 f"--full, or {Path(csv_dir) / 'predictions.csv'}")
    return "\n".join(lines)


def header_length(workload: dict) -> str:
    if workload.get("iterations"):
        return f"{workload['iterations']:,} iterations per worker"
    return f"{workload['epochs']:g} epochs"


ENGINES = {("fast", "analytic"): "vectorised closed forms",
           ("des", "analytic"): "SimPy with closed-form collectives",
           ("des", "message"): "SimPy, message by message"}


def made_by(rows: list[dict]) -> str:
    """Which engine and fidelity made how many rows, and how many were extrapolated."""
    counts: dict = {}
    for r in rows:
        key = (r["engine"], r["fidelity"])
        counts[key] = counts.get(key, 0) + 1
    parts = [f"{ENGINES.get(k, '/'.join(k))} {n}" for k, n in counts.items()]
    steady = sum(1 for r in rows if r.get("simulated_iterations", 0)
                 and r["simulated_iterations"] < r["iterations_per_worker"])
    text = "made by: " + ", ".join(parts)
    if steady:
        text += (f"; {steady} run(s) simulated for a steady-state window of their iterations "
                 f"and extrapolated")
    return text


def _fastest(by: dict, schemes: list[str], p: int, tie: float = 0.002) -> set[str]:
    """The schemes within ``tie`` of the fastest at P (none when every scheme ties)."""
    times = {s: by[s, p] for s in schemes if (s, p) in by}
    low = min(times.values())
    near = {s for s, t in times.items() if t <= low * (1 + tie)}
    return set() if len(near) == len(times) > 1 else near


def to_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def to_json(rows: list[dict], meta: dict) -> str:
    return json.dumps({"meta": meta, "predictions": rows}, indent=1, sort_keys=False)
