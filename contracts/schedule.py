"""The update schedule of a simulated run: what the simulator hands to the replay.

A schedule file is JSON Lines. The first line is the header; every other line
is one event, in the order of simulated time::

    {"format": "psgd-sim schedule", "schema_version": 1, "scheme": "ps_async",
     "workers": 4, "seed": 0, "workload": {...}, "fingerprint": "...", ...}
    {"t": 0.0061, "kind": "update", "worker": 2, "shard": 2, "epoch": 0, "batch": 0,
     "read": 0, "applied": 1}
    {"t": 0.0122, "kind": "eval", "worker": 0, "step": 20, "epoch": 0.11}

Header fields:

``scheme``, ``workers`` (P), ``seed`` (of the simulation's step-time draws)
    where the schedule came from.
``workload``
    ``model``, ``dataset``, ``train_size`` (the ``--train-size`` of the runs:
    null for the whole set, else a seeded subset of that many), ``train_samples``
    (how many that is), ``batch_per_worker``, ``epochs``, ``iterations`` (per
    worker, or null when ``epochs`` sets them).
``fingerprint``
    sha256 of the workload fields that give the events their meaning (model,
    dataset, train size and samples, batch per worker): a replay on another
    workload, or a header edited by hand, is refused.
``weights``
    ``shared``: one weight vector that every update changes (its *versions*
    count its updates); ``replicas``: every worker has its own copy, an
    update changes the worker's copy, ``average`` and ``mix`` events move
    weights between copies.
``evaluate``
    which model an ``eval`` event scores: ``weights`` (the shared vector),
    ``average`` (the mean of the replicas, once every worker has reached the
    step) or ``holder`` (async_avg's mixed weights).
``iterations_per_epoch`` (per worker), ``iterations_per_worker``,
``updates_per_epoch`` (updates of the shared weights per epoch),
``eval_every`` (iterations of the evaluating worker between evaluations; 0:
epoch ends only), ``avg_every`` (the scheme's K), ``time_s`` (simulated end
of training) and ``source`` (free-form: profile, cluster, engine).

Events (``t`` is simulated seconds from the start of training):

``update``: ``worker`` applies the gradient of batch ``batch`` of its
    ``epoch`` drawn from data part ``shard``, computed on weights version
    ``read``, to version ``applied`` (staleness = applied - read). With shared
    weights, the updates that carry the same ``applied`` version are one
    synchronous step: their gradients are averaged and applied once.
    Replicas: ``read`` = ``applied`` = the worker's own update count.
``average``: the replicas of ``workers`` are replaced by their mean.
``mix``: the holder's weights v <- (1 - weight) v + weight w_worker; with
    ``reply`` the worker continues from the new v.
``eval``: an evaluation point; ``step`` counts the evaluating worker's
    iterations (for a parameter server: the updates applied), ``epoch`` is
    the training progress in epochs.

Only this module reads and writes the layout; ``read`` validates the whole
file and raises ``ScheduleError`` whose message names the line and field.
Imports: ``contracts.files`` only.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from contracts.files import atomic_write_text

FORMAT = "psgd-sim schedule"
SCHEMA_VERSION = 1
WEIGHTS = ("shared", "replicas")
EVALUATE = ("weights", "average", "holder")
KINDS = ("update", "average", "mix", "eval")
WORKLOAD_KEYS = ("model", "dataset", "train_size", "train_samples", "batch_per_worker")
_EVENT_FIELDS = {
    "update": {"worker": int, "shard": int, "epoch": int, "batch": int, "read": int,
               "applied": int},
    "average": {"workers": list},
    "mix": {"worker": int, "weight": float, "reply": bool},
    "eval": {"worker": int, "step": int, "epoch": float},
}


class ScheduleError(ValueError):
    """A schedule file that cannot be used; the message is one line naming what is wrong."""


@dataclass(frozen=True)
class ScheduleHeader:
    scheme: str
    workers: int
    seed: int
    workload: dict[str, Any]
    weights: str
    evaluate: str
    iterations_per_epoch: int
    iterations_per_worker: int
    updates_per_epoch: int
    eval_every: int
    avg_every: int
    time_s: float
    source: dict[str, Any] = field(default_factory=dict)
    fingerprint: str = ""

    def __post_init__(self):
        if not self.fingerprint:
            object.__setattr__(self, "fingerprint", workload_fingerprint(self.workload))

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "schema_version": SCHEMA_VERSION, **asdict(self)}


@dataclass(frozen=True)
class Schedule:
    header: ScheduleHeader
    events: list[dict[str, Any]]

    def updates(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["kind"] == "update"]


def workload_fingerprint(workload: dict[str, Any]) -> str:
    """sha256 of the workload fields that give the events their meaning."""
    missing = [k for k in WORKLOAD_KEYS if k not in workload]
    if missing:
        raise ScheduleError(f"schedule workload lacks {', '.join(missing)}")
    key = json.dumps({k: workload[k] for k in WORKLOAD_KEYS}, sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()


def write(path: str | os.PathLike, schedule: Schedule) -> Path:
    """Header line, then one line per event; written atomically."""
    lines = [json.dumps(schedule.header.to_json())]
    lines += [json.dumps(e, separators=(",", ":")) for e in schedule.events]
    return atomic_write_text(path, "\n".join(lines) + "\n")


def read(path: str | os.PathLike) -> Schedule:
    """The schedule in ``path``, validated whole (``ScheduleError`` names line and field)."""
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise ScheduleError(f"cannot read schedule {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ScheduleError(f"{path} is not a schedule (not text)") from None
    if not lines:
        raise ScheduleError(f"{path} is empty, not a schedule")
    header = _header(path, _json_line(path, 1, lines[0]))
    events = [_json_line(path, n, text) for n, text in enumerate(lines[1:], start=2) if text]
    for n, event in enumerate(events, start=2):
        _check_event(path, n, event, header)
    _check_order(path, events, header)
    return Schedule(header, events)


def _json_line(path: Path, n: int, text: str) -> dict:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        raise ScheduleError(f"{path} line {n} is not JSON") from None
    if not isinstance(obj, dict):
        raise ScheduleError(f"{path} line {n} is not a JSON object")
    return obj


_HEADER_TYPES = {"scheme": str, "workers": int, "seed": int, "workload": dict, "weights": str,
                 "evaluate": str, "iterations_per_epoch": int, "iterations_per_worker": int,
                 "updates_per_epoch": int, "eval_every": int, "avg_every": int,
                 "time_s": float, "fingerprint": str}


def _header(path: Path, obj: dict) -> ScheduleHeader:
    if obj.get("format") != FORMAT:
        raise ScheduleError(f"{path} is not a schedule (line 1 has no \"format\": \"{FORMAT}\")")
    version = obj.get("schema_version")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise ScheduleError(f"{path}: schema_version {version!r} is not one this program reads "
                            f"(up to {SCHEMA_VERSION})")
    for key, kind in _HEADER_TYPES.items():
        if not _is(obj.get(key), kind):
            raise ScheduleError(f"{path} header: field {key!r} missing or not {kind.__name__}")
    if obj["workers"] < 1 or obj["iterations_per_epoch"] < 1 or obj["updates_per_epoch"] < 1:
        raise ScheduleError(f"{path} header: workers, iterations_per_epoch and "
                            "updates_per_epoch must be at least 1")
    if obj["weights"] not in WEIGHTS or obj["evaluate"] not in EVALUATE:
        raise ScheduleError(f"{path} header: weights must be one of {', '.join(WEIGHTS)} and "
                            f"evaluate one of {', '.join(EVALUATE)}")
    fields = {k: obj[k] for k in ScheduleHeader.__dataclass_fields__ if k in obj}
    header = ScheduleHeader(**fields)
    if workload_fingerprint(header.workload) != header.fingerprint:
        raise ScheduleError(f"{path} header: fingerprint does not match its workload "
                            "(the header was edited or comes from another workload)")
    return header


def _is(value, kind) -> bool:
    if kind is float:
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and math.isfinite(value))
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _check_event(path: Path, n: int, e: dict, h: ScheduleHeader) -> None:
    kind = e.get("kind")
    if kind not in KINDS:
        raise ScheduleError(f"{path} line {n}: kind {kind!r} is not one of {', '.join(KINDS)}")
    if not _is(e.get("t"), float) or e["t"] < 0:
        raise ScheduleError(f"{path} line {n}: field 't' missing or not a time >= 0")
    for key, typ in _EVENT_FIELDS[kind].items():
        if not _is(e.get(key), typ):
            raise ScheduleError(f"{path} line {n}: {kind} field {key!r} missing or not "
                                f"{typ.__name__}")
    workers = e["workers"] if kind == "average" else [e["worker"]]
    if any(not _is(w, int) or not 0 <= w < h.workers for w in workers):
        raise ScheduleError(f"{path} line {n}: worker {workers} outside 0..{h.workers - 1}")
    if kind == "update":
        if not 0 <= e["batch"] < h.iterations_per_epoch or e["epoch"] < 0:
            raise ScheduleError(f"{path} line {n}: batch {e['batch']} of epoch {e['epoch']} is "
                                f"outside an epoch of {h.iterations_per_epoch} iterations")
        if not 0 <= e["shard"] < h.workers or not 0 <= e["read"] <= e["applied"]:
            raise ScheduleError(f"{path} line {n}: shard {e['shard']} or versions read "
                                f"{e['read']} / applied {e['applied']} out of range")
    if kind == "mix" and not 0 < e["weight"] <= 1:
        raise ScheduleError(f"{path} line {n}: mix weight {e['weight']} not in (0, 1]")


def _check_order(path: Path, events: list[dict], h: ScheduleHeader) -> None:
    """Times never go back; shared versions advance one synchronous step at a time."""
    last_t, version = 0.0, 0
    for n, e in enumerate(events, start=2):
        if e["t"] < last_t:
            raise ScheduleError(f"{path} line {n}: t {e['t']} is before the previous event")
        last_t = e["t"]
        if e["kind"] == "update" and h.weights == "shared" and e["applied"] != version:
            if e["applied"] != version + 1:
                raise ScheduleError(f"{path} line {n}: update applied to version "
                                    f"{e['applied']}, but the weights are at {version}")
            version += 1
