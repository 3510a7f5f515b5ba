"""Raw measurement files: tidy CSV tables and JSON metadata, written atomically.

Every probe writes one table per concept into the work folder (``compute_steps.csv``,
``sharing.csv``, ``server.csv``, ``comm_P{P}_{algorithm}.csv``, ...); one row per
timed repetition, so medians and spreads can be recomputed from the raw data.
A reader never sees half a file: each writer makes a temporary sibling and renames it.

Imports: pandas, contracts.files.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from contracts.files import atomic_write_text


class CalibrationError(ValueError):
    """Bad input to a calibration command; the message is shown as one line, exit code 2."""


def write_rows(path: str | os.PathLike, rows: Iterable[dict[str, Any]]) -> Path:
    """A tidy table (list of dicts with the same keys) as CSV, atomically."""
    import pandas as pd
    return atomic_write_text(path, pd.DataFrame(list(rows)).to_csv(index=False))


# What each raw table holds (``contracts.tables`` kinds): read_rows checks every
# cell of these columns, so a damaged or truncated table is refused, not half-fitted.
_STEPS = {"model": "text", "threads": "positive_count", "batch": "positive_count",
          "rep": "count", "step_s": "seconds"}
KINDS = {
    "compute_steps.csv": _STEPS,
    "compute_eval.csv": {"model": "text", "threads": "positive_count",
                         "batch": "positive_count", "eval_s": "seconds",
                         "eval_s_per_sample": "seconds"},
    "server.csv": {"params": "positive_count", "rep": "count", "sum_s": "seconds",
                   "update_s": "seconds"},
    "server_update.csv": {"model": "text", "params": "positive_count", "rep": "count",
                          "update_s": "seconds"},
    "sharing.csv": {"k": "positive_count", "rep": "count", "step_s": "seconds"},
    "scheduler.csv": {"off_s": "seconds"},
    "balance.csv": {"moved_s": "seconds?", "window_s": "seconds"},
    "wake.csv": {"later_s": "seconds"},
    "comm_P": {"workers": "positive_count", "rank": "count", "backend": "text", "op": "text",
               "algorithm": "text", "bytes": "positive_count", "rep": "count",
               "time_s": "seconds"},
}


def read_rows(path: str | os.PathLike):
    """A table written by ``write_rows`` as a DataFrame, every cell of its known columns
    checked (``KINDS``); CalibrationError naming the file, line and column if absent or
    broken."""
    from contracts.tables import TableError, read_table
    path = Path(path)
    if not path.is_file():
        raise CalibrationError(f"raw measurement file {path} does not exist: run calibrate.probe first")
    kinds = KINDS.get(path.name) or (KINDS["comm_P"] if path.name.startswith("comm_P") else {})
    try:
        return read_table(path, kinds)
    except TableError as e:
        raise CalibrationError(f"raw measurement file {e}") from None


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=1, sort_keys=True))


def read_json(path: str | os.PathLike, needed: tuple[str, ...] = ()) -> Any:
    """A JSON file of the work folder, with every number finite and ``needed`` keys there."""
    from contracts.checks import ConfigError, finite_tree
    from contracts.files import read_json as read_json_file
    path = Path(path)
    data = read_json_file(path, CalibrationError)
    try:
        finite_tree(data)
    except ConfigError as e:
        raise CalibrationError(f"{path}: {e}") from None
    missing = [k for k in needed if not isinstance(data, dict) or k not in data]
    if missing:
        raise CalibrationError(f"{path} lacks field(s) {', '.join(missing)}")
    return data
