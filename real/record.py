"""Run records: one directory per run, written atomically, read by calibrate and compare.

Layout of ``RUNS/<run_id>/`` (schema version ``SCHEMA_VERSION``):

``record.json``
    ``schema_version``, ``run_id``, ``status`` (``completed`` | ``failed``),
    ``failure`` (``{"cause": str, "rank": int | null}`` or null),
    ``config`` (every flag of ``real.train``), ``environment`` (host, cores,
    ranks, ranks per host, threads per rank, launcher, library versions),
    ``timings`` (``startup_s``, ``data_load_s``, ``train_wall_s`` apart from
    both, ``epoch_s`` list, ``eval_s``), ``results`` (``final_loss``,
    ``test_accuracy``, ``test_loss``, ``loss_curve`` as [iteration, loss]
    pairs), ``comm`` (``bytes_sent_per_rank``), ``resources``
    (``cpu_util_percent_per_rank``, ``peak_rss_bytes_per_rank``) and
    ``extra`` (scheme-specific: staleness histogram, server update time, ...).

``iterations.csv``
    one row per rank and iteration: ``rank, epoch, iteration, batch_size,
    compute_s, comm_s, wait_s, bytes_sent, loss`` (loss empty when not logged).
    ``compute_s`` is forward + backward + update. Rows with ``batch_size`` 0 are
    not training steps: ``iteration`` -1 is a communication-only phase (psgd's
    final weight averaging, the parameter server's first broadcast); with
    ``iteration`` >= 0 they are the parameter server's updates (compute = the
    update, comm = its messages). For hogwild, ``rank`` is the process index;
    for ddp ``comm_s`` is 0 because communication overlaps backward; ``wait_s`` is the part of a
    synchronising call spent waiting for the slowest rank to arrive (estimated
    from arrival times on the host's monotonic clock); ``comm_s`` is the rest.

Only this module decides the layout; everything else calls ``write`` and ``read``.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
RECORD_FILE = "record.json"
ITER_FILE = "iterations.csv"
ITER_COLUMNS = ("rank", "epoch", "iteration", "batch_size", "compute_s", "comm_s",
                "wait_s", "bytes_sent", "loss")
REQUIRED_KEYS = ("schema_version", "run_id", "status", "config", "environment",
                 "timings", "results", "comm", "resources")


class RecordError(ValueError):
    """A directory that is not a (readable) run record."""


@dataclass
class RunRecord:
    run_id: str
    config: dict[str, Any]
    environment: dict[str, Any]
    status: str = "completed"
    failure: dict[str, Any] | None = None
    timings: dict[str, Any] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    comm: dict[str, Any] = field(default_factory=dict)
    resources: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    iterations: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "run_id": self.run_id, "status": self.status,
                "failure": self.failure, "config": self.config,
                "environment": self.environment, "timings": self.timings,
                "results": self.results, "comm": self.comm, "resources": self.resources,
                "extra": self.extra}


def write(record: RunRecord, runs_dir: str | os.PathLike) -> Path:
    """Write ``runs_dir/<run_id>/`` atomically: build it in a temporary sibling, then rename.

    An existing record with the same id is replaced only once the new one is complete.
    """
    runs_dir = Path(runs_dir)
    runs_dir.mkdir(parents=True, exist_ok=True)
    final = runs_dir / record.run_id
    tmp = Path(tempfile.mkdtemp(dir=runs_dir, prefix=f".{record.run_id}.", suffix=".tmp"))
    try:
        with open(tmp / ITER_FILE, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=ITER_COLUMNS, extrasaction="ignore")
            w.writeheader()
            for row in record.iterations:
                w.writerow({k: _csv_value(row.get(k)) for k in ITER_COLUMNS})
        (tmp / RECORD_FILE).write_text(json.dumps(_jsonable(record.to_json()), indent=1))
        if final.exists():
            old = final.with_name(f".{record.run_id}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def read(run_dir: str | os.PathLike) -> dict[str, Any]:
    """The record.json of a run directory, checked; raises RecordError naming what is wrong."""
    run_dir = Path(run_dir)
    path = run_dir / RECORD_FILE
    if not path.is_file():
        raise RecordError(f"{run_dir} is not a run record (no {RECORD_FILE})")
    try:
        rec = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise RecordError(f"{path} is not valid JSON") from None
    missing = [k for k in REQUIRED_KEYS if k not in rec]
    if missing:
        raise RecordError(f"{path} lacks field(s): {', '.join(missing)}")
    if rec["schema_version"] > SCHEMA_VERSION:
        raise RecordError(f"{path} has schema_version {rec['schema_version']}, newer than "
                          f"this program reads ({SCHEMA_VERSION})")
    return rec


def read_iterations(run_dir: str | os.PathLike):
    """Per-iteration, per-rank timings as a pandas DataFrame."""
    import pandas as pd
    path = Path(run_dir) / ITER_FILE
    if not path.is_file():
        raise RecordError(f"{run_dir} is not a run record (no {ITER_FILE})")
    return pd.read_csv(path)


def find_runs(runs_dir: str | os.PathLike) -> list[Path]:
    """Run directories below ``runs_dir`` (temporary and hidden ones skipped)."""
    runs_dir = Path(runs_dir)
    return sorted(p.parent for p in runs_dir.rglob(RECORD_FILE)
                  if not any(part.startswith(".") for part in p.relative_to(runs_dir).parts))


def _csv_value(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return v


def _jsonable(obj):
    """JSON cannot hold NaN portably; write null instead."""
    if isinstance(obj, float) and obj != obj:
        return None
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj
