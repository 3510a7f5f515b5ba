"""How a run that did not finish is recorded: each rank's note, and one record naming who failed.

Every rank of ``real.train`` has a recorder (``real.launch.supervise``) that sees how
its rank ended. One that ended other than by finishing leaves a *note*::

    OUT/.RUN_ID.faults/rank<r>.json
        {"rank", "host", "kind", "signal", "exit_code", "last_iteration", "phase",
         "cause", "time"}

``kind`` says what happened to that rank:

* ``died``: killed by a signal, or exited without saying why (a crash);
* ``hung``: no iteration finished for longer than ``--timeout`` (the recorder stopped
  it); ``since`` is when it went quiet, so the rank that stopped first is named;
* ``failed``: it raised an error of its own (``cause`` is the error);
* ``noticed``: it raised because a peer died or hung (gloo's closed connection, a
  deadline of ``real.launch.dist``): a consequence, not a cause;
* ``ended``: the launcher (or a peer's ``MPI_Abort``) ended it;
* ``interrupted`` / ``terminated``: SIGINT / SIGTERM reached it;
* ``usage``: it refused its arguments (exit code 2); no record is written.

Rank 0's recorder gathers the notes (the ranks share ``OUT``: one host, or a
shared file system), waits a moment for late ones, and writes the run's
record, or amends the one rank 0 wrote itself: ``failure`` names the first
rank that died, hung or failed (``first_cause``), with its signal or exit
code and the last iteration it reached, and lists what the others noticed;
``iterations.csv`` holds the rows every rank's recorder heard
(``OUT/.RUN_ID.faults/rank<r>.rows``): the iterations the run completed.
Rank 0's recorder holds ``OUT/.RUN_ID.faults/lock`` while it lives, so a
sweep can wait for the record before it reads it (``wait_for_recorder``).
Imports: the standard library and ``contracts`` (record, files).
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import time
from pathlib import Path

from contracts import record
from contracts.files import atomic_write_text

ORDER = ("died", "hung", "failed", "noticed", "ended", "terminated", "interrupted")
PEER_WORDS = ("a peer rank died or hung",)


def faults_dir(out: str | os.PathLike, run_id: str) -> Path:
    return Path(out) / f".{run_id}.faults"


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def make_note(rank: int, kind: str, last_iteration: int | None, phase: str, *,
              signal_number: int | None = None, exit_code: int | None = None,
              cause: str = "", detail: str = "") -> dict:
    """One rank's account of how it ended, with a one-line ``cause``."""
    where = _where(last_iteration, phase)
    if not cause:
        cause = {
            "died": (f"rank {rank} was killed by {signal_name(signal_number)} {where}"
                     if signal_number else f"rank {rank} exited with code {exit_code} {where}"),
            "hung": f"rank {rank} hung: {detail} {where}",
            "ended": f"rank {rank} was ended by its launcher {where} (another rank failed, "
                     "or the job was stopped)",
            "interrupted": f"rank {rank} was interrupted (SIGINT) {where}",
            "terminated": f"rank {rank} was terminated (SIGTERM) {where}",
        }.get(kind, f"rank {rank} failed {where}")
    return {"rank": rank, "host": socket.gethostname(), "kind": kind,
            "signal": signal_name(signal_number) if signal_number else None,
            "exit_code": exit_code, "last_iteration": last_iteration, "phase": phase,
            "cause": cause, "time": time.time()}


def _where(last_iteration: int | None, phase: str) -> str:
    if phase == "load":
        return "while loading the data"
    if last_iteration is None:
        return "before its first iteration"
    if phase in ("eval", "done"):
        return f"after training (last iteration {last_iteration})"
    return f"after iteration {last_iteration}"


def kind_of_failure(cause: str) -> str:
    """A rank's own error: ``noticed`` when it only says that a peer went away."""
    return "noticed" if any(w in cause for w in PEER_WORDS) else "failed"


def write_note(out, run_id: str, note: dict) -> Path:
    return atomic_write_text(faults_dir(out, run_id) / f"rank{note['rank']}.json",
                             json.dumps(note))


def write_rows(out, run_id: str, rank: int, lines) -> None:
    """A rank's iteration rows as its recorder heard them (``real.launch.supervise.row_line``)."""
    if lines:
        atomic_write_text(faults_dir(out, run_id) / f"rank{rank}.rows",
                          "".join(f"{ln}\n" for ln in lines))


def read_rows(out, run_id: str) -> list[dict]:
    """Every rank's rows, the wait of each synchronising call split off
    (``real.records.timing``)."""
    from real.records.timing import parse_row, split_wait
    rows = []
    for path in sorted(faults_dir(out, run_id).glob("rank*.rows")):
        try:
            text = path.read_text()
        except OSError:
            continue
        rows += [r for r in map(parse_row, text.splitlines()) if r is not None]
    return split_wait(rows)


def read_notes(out, run_id: str) -> list[dict]:
    notes = []
    for path in sorted(faults_dir(out, run_id).glob("rank*.json")):
        try:
            note = json.loads(path.read_text())
        except (OSError, ValueError):
            continue                  # a note being written; the next look finds it whole
        if isinstance(note, dict) and note.get("kind") in ORDER + ("usage",):
            notes.append(note)
    return notes


def first_cause(notes: list[dict]) -> dict:
    """The note that explains the failure: the most telling kind, then the earliest."""
    return min(notes, key=lambda n: (ORDER.index(n["kind"]) if n["kind"] in ORDER
                                     else len(ORDER), n.get("since", n["time"])))


def failure_of(notes: list[dict]) -> dict:
    """A record's ``failure`` from the notes of every rank."""
    first = first_cause(notes)
    others = [n["cause"] for n in sorted(notes, key=lambda n: n["time"]) if n is not first]
    return {"cause": first["cause"], "rank": first["rank"], "kind": first["kind"],
            "signal": first["signal"], "exit_code": first["exit_code"],
            "last_iteration": first["last_iteration"], "host": first["host"],
            "noticed_by": others}


def write_failed_record(out, run_id: str, notes: list[dict], facts: dict) -> Path:
    """Write (or amend) ``OUT/RUN_ID`` as failed or interrupted, from the ranks' notes.

    A record that rank 0 wrote itself keeps everything it holds; only ``status`` and
    ``failure`` change (its own cause goes to ``failure.noticed_by``)."""
    failure = failure_of(notes)
    status = "interrupted" if any(n["kind"] == "interrupted" for n in notes) else "failed"
    run_dir = Path(out) / run_id
    rows = read_rows(out, run_id)
    try:
        existing = record.read(run_dir)
    except record.RecordError:
        existing = None
    if existing is not None and existing["status"] != "completed":
        own = (existing.get("failure") or {}).get("cause")
        if own and own != failure["cause"] and own not in failure["noticed_by"]:
            failure["noticed_by"].append(own)
        return record.amend(run_dir, rows, status=status, failure=failure)
    rec = record.RunRecord(run_id=run_id, status=status, failure=failure,
                           config=facts.get("config") or {}, environment=facts.get("environment")
                           or {"host": socket.gethostname(), "launcher": facts.get("launcher")},
                           identity=facts.get("identity"), iterations=rows)
    return record.write(rec, out)


def amend_cause(run_dir: Path, prefix: str, status: str | None = None) -> None:
    """Put what the caller knows (a sweep's time limit, the user's Ctrl-C) before the cause."""
    rec = record.read(run_dir)
    failure = dict(rec.get("failure") or {"cause": "", "rank": None})
    failure["cause"] = f"{prefix}; {failure['cause']}" if failure["cause"] else prefix
    record.amend(run_dir, failure=failure, status=status or rec["status"])


# ---------------------------------------------------------------- the recorder's lock

def hold_lock(out, run_id: str) -> int:
    """Rank 0's recorder holds this while it lives (released when its process ends)."""
    folder = faults_dir(out, run_id)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def wait_for_recorder(out, run_id: str, timeout_s: float) -> bool:
    """Wait until rank 0's recorder of ``run_id`` is done (or there is none); False on timeout."""
    path = faults_dir(out, run_id) / "lock"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return True                           # no recorder, or it finished and cleaned up
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        finally:
            os.close(fd)


def clean(out, run_id: str) -> None:
    shutil.rmtree(faults_dir(out, run_id), ignore_errors=True)
