"""Raw measurement files: tidy CSV tables and JSON metadata, written atomically.

Every probe writes one table per concept into the work folder (``compute_steps.csv``,
``sharing.csv``, ``server.csv``, ``comm_P{P}_{algorithm}.csv``, ...); one row per
timed repetition, so medians and spreads can be recomputed from the raw data.
A reader never sees half a file: we write a temporary sibling and rename it.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable


class CalibrationError(ValueError):
    """Bad input to a calibration command; the message is shown as one line, exit code 2."""


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


def write_rows(path: str | os.PathLike, rows: Iterable[dict[str, Any]]) -> Path:
    """A tidy table (list of dicts with the same keys) as CSV, atomically."""
    import pandas as pd
    return atomic_write_text(path, pd.DataFrame(list(rows)).to_csv(index=False))


def read_rows(path: str | os.PathLike):
    """A table written by ``write_rows`` as a DataFrame; CalibrationError if absent or broken."""
    import pandas as pd
    path = Path(path)
    if not path.is_file():
        raise CalibrationError(f"raw measurement file {path} does not exist: run calibrate.probe first")
    try:
        return pd.read_csv(path)
    except (ValueError, pd.errors.ParserError) as e:
        raise CalibrationError(f"raw measurement file {path} cannot be read: {e}") from None


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=1, sort_keys=True))


def read_json(path: str | os.PathLike) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise CalibrationError(f"{path} does not exist") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise CalibrationError(f"{path} is not valid JSON") from None
