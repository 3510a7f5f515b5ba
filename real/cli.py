"""Command-line conventions shared by every ``python -m`` entry point.

Usage errors are one line on stderr and exit code 2, never a traceback; under
mpirun / torchrun only rank 0 prints them, so P ranks do not repeat one mistake.
"""
from __future__ import annotations

import argparse
import os
import sys


def launched_rank() -> int:
    """This process's rank as the launcher set it, before any MPI or torch init."""
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "RANK"):
        if var in os.environ:
            return int(os.environ[var])
    return 0


def usage_error(prog: str, message: str) -> int:
    if launched_rank() == 0:
        print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


class Parser(argparse.ArgumentParser):
    """argparse with defaults in the help and one-line errors."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.ArgumentDefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        sys.exit(usage_error(self.prog, message + f" (see {self.prog} --help)"))


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"{value} is below {low}")
    return value


def positive_int(text: str) -> int:
    return _int_at_least(text, 1)


def nonnegative_int(text: str) -> int:
    return _int_at_least(text, 0)


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{value} must be above 0")
    return value


def choice_list(valid: tuple[str, ...], allow_all: bool = True):
    """A comma-separated list of names from ``valid`` (or ``all``)."""
    def parse(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",") if n.strip()]
        if allow_all and names == ["all"]:
            return list(valid)
        bad = [n for n in names if n not in valid]
        if bad or not names:
            raise argparse.ArgumentTypeError(
                f"unknown name {', '.join(bad) or repr(text)}; valid: {', '.join(valid)}"
                + (", all" if allow_all else ""))
        return names
    return parse


def worker_range(text: str) -> list[int]:
    """'1-5', '1,2,4' or '3' -> sorted worker counts, each at least 1."""
    counts: set[int] = set()
    try:
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            lo_i, hi_i = int(lo), int(hi or lo)
            counts.update(range(lo_i, hi_i + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a worker range like 1-5 or 1,2,4") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"worker counts must be at least 1 (got {text!r})")
    return sorted(counts)
