"""How ``--workers`` is parsed, the same for every command: ``16`` (P = 1..16), a list
``1,8,64``, a range ``4-16`` (``8-8``: P = 8 alone), powers ``2^0..10``, or a comma list
of those; ``one_worker_count`` for a command that runs one P.

Imports: the standard library.
"""
from __future__ import annotations

import argparse
import re


def workers_flag(counts: list[int]) -> str:
    """Worker counts as a ``--workers`` value that reads back as these counts alone
    (``worker_counts`` reads a lone '8' as 1..8, and '8-8' as [8])."""
    return ",".join(map(str, counts)) if len(counts) > 1 else f"{counts[0]}-{counts[0]}"


MAX_WORKERS = 65536
WORKERS_HELP = ("worker counts: N (P = 1..N), a list 1,8,64, a range 4-16 (8-8: P = 8 alone) "
                "or powers 2^0..10")
_POWERS = re.compile(r"^(\d+)\^(\d+)\.\.(\d+)$")


def worker_counts(text: str, limit: int = MAX_WORKERS) -> list[int]:
    """Worker counts as a user writes them, the same for every command: ``16`` (P = 1..16),
    ``1,8,64,512``, ``4-16``, ``2^0..10`` (powers 1, 2, 4 ... 1024), or a comma list of
    those; each from 1 to ``limit`` (the most the command runs)."""
    items = [t.strip() for t in str(text).split(",")]
    if len(items) == 1 and items[0].isdigit():
        if int(items[0]) < 1:
            raise argparse.ArgumentTypeError(f"worker counts must be at least 1 (got {text!r})")
        items = [f"1-{items[0]}"]
    counts: set[int] = set()
    for item in items:
        counts.update(_worker_item(item, text))
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"worker counts must be at least 1 (got {text!r})")
    if max(counts) > limit:
        what = ("this tool simulates" if limit == MAX_WORKERS
                else "this command runs")
        raise argparse.ArgumentTypeError(f"{max(counts)} workers is more than {what} ({limit})")
    return sorted(counts)


def worker_counts_up_to(limit: int, low: int = 1):
    """An argparse type: ``worker_counts`` with at most ``limit`` workers; counts below ``low``
    (a command that needs ``low`` ranks, e.g. 2 to communicate) are left out of a range,
    and a value that names none at or above it is refused."""
    def parse(text: str) -> list[int]:
        counts = [p for p in worker_counts(text, limit) if p >= low]
        if not counts:
            raise argparse.ArgumentTypeError(f"{text!r} names no worker count of at least {low}")
        return counts
    parse.__name__ = "worker_counts"
    return parse


ONE_WORKER_HELP = "P, one worker count (the --workers syntax; a lone N is P = N here)"


def one_worker_count(low: int = 1, high: int = MAX_WORKERS):
    """An argparse type: one worker count in the syntax every command shares, for a command
    that runs one P (``real.train``, ``simulator.bench``): ``8``, ``8-8`` or ``2^3..3`` is
    P = 8; a value that names several counts is refused."""
    def parse(text: str) -> int:
        item = str(text).strip()
        counts = [int(item)] if item.isdigit() else worker_counts(item, MAX_WORKERS)
        if len(counts) != 1:
            raise argparse.ArgumentTypeError(f"{text!r} names {len(counts)} worker counts; this "
                                             "command runs one P (real.sweep runs several)")
        if not low <= counts[0] <= high:
            raise argparse.ArgumentTypeError(f"{counts[0]} is outside {low}..{high}")
        return counts[0]
    parse.__name__ = "one_worker_count"
    return parse


def _worker_item(item: str, text: str) -> range | list[int]:
    example = "16, 1,8,64, 4-16 or 2^0..10"
    powers = _POWERS.match(item)
    if powers:
        base, lo, hi = map(int, powers.groups())
        if base < 2 or lo > hi or hi > 64:
            raise argparse.ArgumentTypeError(f"{item!r} is not a range of powers like 2^0..10")
        return [base ** k for k in range(lo, hi + 1)]
    lo, sep, hi = item.partition("-")
    if not lo.isdigit() or (sep and not hi.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a worker list like {example}")
    lo_i, hi_i = int(lo), int(hi or lo)
    if lo_i > hi_i:
        raise argparse.ArgumentTypeError(f"range {item!r} runs backwards")
    if hi_i > MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"{hi_i} workers is more than this tool simulates "
                                         f"({MAX_WORKERS})")
    return range(lo_i, hi_i + 1)
