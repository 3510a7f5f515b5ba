"""Rows of predictions as a text table, CSV or JSON (the edge that formats; no I/O here)."""
from __future__ import annotations

import csv
import io
import json

from .sweep import COLUMNS

_TABLE = (("scheme", "{:<15}", "scheme"), ("workers", "{:>3}", "P"),
          ("epoch_s", "{:>10.3f}", "epoch_s"), ("speedup", "{:>7.2f}", "speedup"),
          ("efficiency", "{:>5.2f}", "eff"), ("compute_s", "{:>9.3f}", "compute_s"),
          ("comm_s", "{:>8.3f}", "comm_s"), ("wait_s", "{:>8.3f}", "wait_s"),
          ("mean_staleness", "{:>6.2f}", "stale"), ("engine", "{:>5}", "eng"))


def table(rows: list[dict], header: str = "") -> str:
    heads = [fmt.replace(".3f", "").replace(".2f", "").format(title)
             for _, fmt, title in _TABLE]
    lines = [header] if header else []
    lines.append(" ".join(heads))
    for r in rows:
        lines.append(" ".join(fmt.format(r[key]) for key, fmt, _ in _TABLE))
    return "\n".join(lines)


def to_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def to_json(rows: list[dict], meta: dict) -> str:
    return json.dumps({"meta": meta, "predictions": rows}, indent=1, sort_keys=False)
