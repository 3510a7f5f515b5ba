"""Accuracy over training time: the curve a run records and the curve a replay predicts.

A curve is a list of points, first to last, each a dict::

    {"step": 40, "epoch": 0.21, "train_s": 1.87, "test_loss": 0.62, "test_accuracy": 0.78}

``train_s`` is training time from the start of training, evaluation kept
out (measured: wall-clock seconds; replayed: simulated seconds); ``step``
counts the evaluating worker's iterations (a parameter server's: updates
applied); ``epoch`` is the progress in epochs. The first point (step 0,
``train_s`` 0) scores the initial weights; the last scores the final model.

``time_to_target`` reads when a curve first reaches an accuracy; a target
the curve never reaches is ``None``, and ``describe_time`` writes it as
"not reached in E epochs", never as a time.

The replay's result file (``real.replay`` writes it, ``pipelines.replay``
reads it) is one JSON object, schema ``REPLAY_SCHEMA_VERSION``::

    {"format": "psgd-sim replay", "schema_version": 1,
     "schedule": {header of the schedule replayed}, "settings": {seed, lr, ...},
     "points": [curve points], "update_losses": [[applied version, loss], ...],
     "cost": {"wall_s", "peak_rss_bytes", "peak_versions_held", "updates"}}

Imports: ``contracts.files`` only.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from contracts.files import atomic_write_text, read_json

POINT_KEYS = ("step", "epoch", "train_s", "test_loss", "test_accuracy")
REPLAY_FORMAT = "psgd-sim replay"
REPLAY_SCHEMA_VERSION = 1


class CurveError(ValueError):
    """A curve or replay file that cannot be used; the message is one line."""


def time_to_target(points: Sequence[dict], target: float) -> float | None:
    """Training time at which the test accuracy first reaches ``target``, or None.

    Linear in time between the last point below the target and the first at
    or above it (evaluations are discrete; both measured and replayed curves
    are read the same way).
    """
    previous = None
    for p in points:
        if p["test_accuracy"] >= target:
            if previous is None or previous["test_accuracy"] >= target:
                return float(p["train_s"])
            a0, a1 = previous["test_accuracy"], p["test_accuracy"]
            t0, t1 = previous["train_s"], p["train_s"]
            return float(t0 + (t1 - t0) * (target - a0) / (a1 - a0))
        previous = p
    return None


def accuracy_after(points: Sequence[dict], epochs: float) -> float | None:
    """Test accuracy of the last point at or before ``epochs`` of training, or None."""
    found = [p for p in points if p["epoch"] <= epochs + 1e-9]
    return float(found[-1]["test_accuracy"]) if found else None


def describe_time(seconds: float | None, epochs: float) -> str:
    """``12.3 s`` (three significant digits, whole tenths from 100 s), or ``not reached
    in 3 epochs``."""
    if seconds is None or not math.isfinite(seconds):
        return f"not reached in {epochs:g} epoch{'s' if epochs != 1 else ''}"
    return f"{seconds:.1f} s" if seconds >= 100 else f"{seconds:.3g} s"


def check_points(points: Any, where: str) -> list[dict]:
    """``points`` as a list of curve points; ``CurveError`` names what is wrong."""
    if not isinstance(points, list) or not points:
        raise CurveError(f"{where}: no curve points")
    for i, p in enumerate(points):
        bad = [k for k in POINT_KEYS if not isinstance(p.get(k) if isinstance(p, dict) else None,
                                                        (int, float))]
        if bad:
            raise CurveError(f"{where}: point {i} lacks {', '.join(bad)}")
    return points


def write_replay(path: str | os.PathLike, result: dict[str, Any]) -> Path:
    body = {"format": REPLAY_FORMAT, "schema_version": REPLAY_SCHEMA_VERSION, **result}
    return atomic_write_text(path, json.dumps(body, indent=1))


def read_replay(path: str | os.PathLike) -> dict[str, Any]:
    """A replay result, checked; ``CurveError`` names what is wrong."""
    path = Path(path)
    obj = read_json(path, CurveError)
    if not isinstance(obj, dict) or obj.get("format") != REPLAY_FORMAT:
        raise CurveError(f"{path} is not a replay result")
    if not isinstance(obj.get("schema_version"), int) or \
            obj["schema_version"] > REPLAY_SCHEMA_VERSION:
        raise CurveError(f"{path}: schema_version {obj.get('schema_version')!r} is newer than "
                         f"this program reads ({REPLAY_SCHEMA_VERSION})")
    for key in ("schedule", "settings", "cost"):
        if not isinstance(obj.get(key), dict):
            raise CurveError(f"{path}: field {key!r} missing")
    check_points(obj.get("points"), str(path))
    return obj
