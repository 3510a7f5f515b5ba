"""Rows of predictions as a text table, CSV or JSON (the edge that formats; no I/O here).

Imports: simulator.engine.sweep.
"""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from simulator.engine.sweep import COLUMNS

_TABLE = (("scheme", "{:<15}", "scheme"), ("workers", "{:>3}", "P"),
          ("epoch_s", "{:>10.3f}", "epoch_s"), ("speedup", "{:>7.2f}", "speedup"),
          ("efficiency", "{:>5.2f}", "eff"), ("compute_s", "{:>9.3f}", "compute_s"),
          ("comm_s", "{:>8.3f}", "comm_s"), ("wait_s", "{:>8.3f}", "wait_s"),
          ("mean_staleness", "{:>6.2f}", "stale"), ("engine", "{:>5}", "eng"),
          ("fidelity", "{:>9}", "fidelity"))


def full_table(rows: list[dict], header: str = "") -> str:
    """Every row: time per epoch, speedup, the split of a worker's time, staleness, engine."""
    heads = [fmt.replace(".3f", "").replace(".2f", "").format(title)
             for _, fmt, title in _TABLE]
    lines = [header] if header else []
    lines.append(" ".join(heads))
    for r in rows:
        lines.append(" ".join(fmt.format(r[key]) for key, fmt, _ in _TABLE))
    return "\n".join(lines)


MAX_COLUMNS = 8


def summary_columns(counts: list[int]) -> list[int]:
    """The worker counts the summary shows: all of them if few, else P = 1, the powers
    of two and the largest, thinned evenly to ``MAX_COLUMNS``."""
    counts = sorted(set(counts))
    if len(counts) <= MAX_COLUMNS:
        return counts
    top = counts[-1]
    picks = sorted({c for c in counts if c & (c - 1) == 0} | {counts[0], top})
    while len(picks) > MAX_COLUMNS:
        picks = picks[:1] + picks[1:-1:2] + picks[-1:]
    return picks


def summary_table(rows: list[dict], header: str = "", csv_dir="predictions") -> str:
    """Time per epoch per scheme at a few P, the fastest at each P marked, then the answer."""
    cols = summary_columns([r["workers"] for r in rows])
    by = {(r["scheme"], r["workers"]): r["epoch_s"] for r in rows}
    schemes = list(dict.fromkeys(r["scheme"] for r in rows))
    marked = {p: _fastest(by, schemes, p) for p in cols}
    width = max(8, max(len(f"{v:.3f}") for v in by.values()) + 2)
    lines = [header] if header else []
    lines.append("time per epoch (s) by workers P; * = fastest at that P")
    lines.append(f"{'scheme':<16}{'P=' + str(cols[0]):>{width}} "
                 + "".join(f"{p:>{width}} " for p in cols[1:]))
    for s in schemes:
        cells = [f"{'-' if (s, p) not in by else format(by[s, p], '.3f'):>{width}}"
                 + ("*" if s in marked[p] else " ") for p in cols]
        lines.append(f"{s:<16}" + "".join(cells).rstrip())
    fastest = min(rows, key=lambda r: r["epoch_s"])
    base = by.get(("serial", 1)) or by.get((fastest["scheme"], 1))
    against = "serial SGD" if ("serial", 1) in by else f"{fastest['scheme']} at P = 1"
    lines.append(f"fastest: {fastest['scheme']} at P = {fastest['workers']}, "
                 f"{fastest['epoch_s']:.3f} s per epoch ({base / fastest['epoch_s']:.2f}x "
                 f"{against})" if base else "")
    lines.append(made_by(rows))
    lines.append(f"every scheme and P with compute, communication, waiting and staleness: "
                 f"--full, or {Path(csv_dir) / 'predictions.csv'}")
    return "\n".join(lines)


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
