"""The stages of a validation: one command of the project run with its output in a log,
and what it said last (its one-line error).

Imports: the standard library.
"""
from __future__ import annotations

import subprocess
from pathlib import Path


def run_stage(cmd: list[str], log: Path, timeout_s: float | None = None,
              **popen) -> tuple[int, str]:
    """Run one stage of a validation (a command of the project) with its output in ``log``,
    whose first line is the command; returns its exit code and the log's text."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout_s,
                              **popen).returncode
    return code, log.read_text(errors="replace")


def last_line(log: str) -> str:
    """What a stage said last: its one-line error, without its own name in front."""
    lines = [ln.strip() for ln in log.replace("\r", "\n").splitlines() if ln.strip()]
    last = lines[-1] if lines else "(no output)"
    return last.split(": error: ", 1)[-1] if ": error: " in last else last
