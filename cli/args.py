"""The argparse types every command's values go through, built on ``contracts.checks``.

Numbers are finite and in range (``positive_float``, ``int_in``, ``float_in``,
``seed``...), names that become folders are plain (``run_id``), paths are of the
right kind (``output_folder``, ``output_file``, ``input_file``, ``input_folder``);
an output must be writable as the file system says, tried before any work.
Worker counts (``--workers``) are ``cli.workers``'s.

Imports: the standard library, ``contracts.checks`` and ``contracts.units``.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import tempfile
from pathlib import Path

from contracts.checks import ConfigError, plain_name
from contracts.units import parse_bandwidth, parse_duration


MAX_COUNT = 2**31 - 1          # counts (samples, iterations, repeats) above this are typos
MAX_SEED = 2**32 - 1           # numpy and torch take seeds up to here (rank r adds r)


def whole_number(text: str) -> int:
    """Any whole number; ``1.5``, ``nan`` and ``1e3`` are refused (write 1000)."""
    try:
        return int(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def _int_at_least(text: str, low: int, high: int = MAX_COUNT) -> int:
    value = whole_number(text)
    if value < low:
        raise argparse.ArgumentTypeError(f"{value} is below {low}")
    if value > high:
        raise argparse.ArgumentTypeError(f"{value} is above {high}")
    return value


def int_in(low: int, high: int = MAX_COUNT):
    """An argparse type: a whole number in ``[low, high]``."""
    def parse(text: str) -> int:
        return _int_at_least(text, low, high)
    parse.__name__ = f"int_in_{low}_{high}"
    return parse


def positive_int(text: str) -> int:
    return _int_at_least(text, 1)


def nonnegative_int(text: str) -> int:
    return _int_at_least(text, 0)


def seed(text: str) -> int:
    """A random seed: a whole number from 0 to 2**32 - 1."""
    return _int_at_least(text, 0, MAX_SEED)


def finite_float(text: str) -> float:
    """A number; ``nan``, ``inf`` and anything that is not a number are refused."""
    try:
        value = float(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def accuracy(text: str) -> float:
    """A test accuracy: a number in (0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{value} is not an accuracy in (0, 1]")
    return value


def positive_float(text: str) -> float:
    value = finite_float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{value:g} must be above 0")
    return value


def nonnegative_float(text: str) -> float:
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value:g} must not be negative")
    return value


def float_in(low: float, high: float, high_open: bool = False):
    """An argparse type: a finite number in ``[low, high]`` (or ``[low, high)``)."""
    def parse(text: str) -> float:
        value = finite_float(text)
        if value < low or value > high or (high_open and value == high):
            raise argparse.ArgumentTypeError(
                f"{value:g} is outside [{low:g}, {high:g}{')' if high_open else ']'}")
        return value
    parse.__name__ = f"float_in_{low}_{high}"
    return parse


def add_sgd_flags(p) -> None:
    """``--lr``, ``--momentum``, ``--lr-decay``: real.train's SGD settings, with its checks
    (``real.replay`` and ``pipelines.replay`` take the same values)."""
    p.add_argument("--lr", type=float_in(1e-12, 1e3), default=0.05, help="learning rate")
    p.add_argument("--momentum", type=float_in(0, 1, high_open=True), default=0.0,
                   help="SGD momentum (0: plain SGD)")
    p.add_argument("--lr-decay", type=float_in(0, 1, high_open=True), default=0.0,
                   help="fraction the learning rate drops after each epoch (seed 001: 0.01)")


def int_list(low: int, high: int = MAX_COUNT, scientific: bool = False):
    """An argparse type: comma-separated whole numbers in ``[low, high]``, as a tuple
    (``scientific``: ``1e6`` is read as 1000000)."""
    def parse(text: str) -> tuple[int, ...]:
        items = [t.strip() for t in str(text).split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"{text!r} names no number")
        values = []
        for item in items:
            try:
                value = float(item) if scientific else int(item)
            except ValueError:
                raise argparse.ArgumentTypeError(f"{item!r} is not a whole number") from None
            if not math.isfinite(value) or value != int(value):
                raise argparse.ArgumentTypeError(f"{item!r} is not a whole number")
            if not low <= value <= high:
                raise argparse.ArgumentTypeError(f"{item} is outside {low}..{high}")
            values.append(int(value))
        return tuple(values)
    parse.__name__ = "int_list"
    return parse


def bandwidth(text: str) -> float:
    """A link rate with its unit (``10gbit``, ``100mbit``, ``1.25GB/s``), in bytes per second."""
    try:
        return parse_bandwidth(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def duration(text: str) -> float:
    """A duration with its unit (``20us``, ``1ms``; bare numbers are seconds), in seconds."""
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


# ---------------------------------------------------------------- names and paths

def run_id(text: str) -> str:
    """A name that becomes one folder inside --out (no /, no .., no leading dot)."""
    try:
        plain_name("run id", text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


_PREFIX = re.compile(r"[a-z][a-z0-9]{0,15}")


def cluster_prefix(text: str) -> str:
    """The prefix of an emulated cluster's names: lower-case letters and digits, at most 16."""
    if not _PREFIX.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a prefix: lower-case letters and "
                                         "digits, starting with a letter, at most 16")
    return text


def _writable_folder(folder: Path) -> str | None:
    """Why nothing can be made in ``folder``, or None: a temporary folder is made there and
    removed (``os.access`` says yes to root where the file system says no: /proc, a
    read-only mount, a full disk's inode table)."""
    try:
        os.rmdir(tempfile.mkdtemp(dir=folder, prefix=".write-check-"))
    except OSError as e:
        return e.strerror or str(e)
    return None


def _creatable(path: Path) -> None:
    """The first existing folder above ``path`` must be a folder we can write in."""
    for parent in path.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise argparse.ArgumentTypeError(f"{str(path)!r} cannot be made: {parent} is a "
                                                 "file, not a folder")
            why = _writable_folder(parent)
            if why:
                raise argparse.ArgumentTypeError(f"{str(path)!r} cannot be made: nothing can be "
                                                 f"written in {parent} ({why})")
            return


def output_folder(text: str) -> str:
    """A folder to write into: an existing folder we can write in, or one that can be made."""
    path = Path(text)
    if not str(text).strip():
        raise argparse.ArgumentTypeError("an empty name is not a folder")
    if path.exists():
        if not path.is_dir():
            raise argparse.ArgumentTypeError(f"{text!r} is a file, not a folder")
        why = _writable_folder(path)
        if why:
            raise argparse.ArgumentTypeError(f"nothing can be written in {text!r} ({why})")
        return text
    _creatable(path)
    return text


def output_file(*suffixes: str):
    """An argparse type: a file to (over)write, not a folder; its name ends in one of
    ``suffixes`` when any are given."""
    def parse(text: str) -> str:
        path = Path(text)
        if not str(text).strip() or str(text).endswith(os.sep):
            raise argparse.ArgumentTypeError(f"{text!r} is not a file name")
        if suffixes and path.suffix not in suffixes:
            raise argparse.ArgumentTypeError(f"{text!r} must end in {' or '.join(suffixes)}")
        if path.is_dir():
            raise argparse.ArgumentTypeError(f"{text!r} is a folder, not a file")
        if path.exists() and not path.is_file():
            raise argparse.ArgumentTypeError(f"{text!r} is not a plain file")
        if path.exists():
            try:                                      # opened, not changed: no O_TRUNC
                os.close(os.open(path, os.O_WRONLY))
            except OSError as e:
                raise argparse.ArgumentTypeError(f"{text!r} cannot be written "
                                                 f"({e.strerror})") from None
        _creatable(path)
        return text
    parse.__name__ = "output_file"
    return parse


def input_file(text: str) -> str:
    """A file that exists and can be read."""
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{text!r} does not exist")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text!r} is not a file")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"no permission to read {text!r}")
    return text


def input_path(text: str) -> str:
    """A file or a folder that exists."""
    if not Path(text).exists():
        raise argparse.ArgumentTypeError(f"{text!r} does not exist")
    return text


def input_folder(text: str) -> str:
    """A folder that exists."""
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{text!r} does not exist")
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is not a folder")
    return text


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


def number_list(text: str) -> list[int]:
    """'1-3', '1,2,4' or '3' -> sorted whole numbers, each at least 1 (seeds: a lone '3'
    is seed 3; worker counts read a lone N as 1..N, ``worker_counts``)."""
    numbers: set[int] = set()
    try:
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            lo_i, hi_i = int(lo), int(hi or lo)
            if lo_i > hi_i:
                raise argparse.ArgumentTypeError(f"range {part!r} runs backwards")
            numbers.update(range(lo_i, hi_i + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list like 1-3 or 1,2,4") from None
    if not numbers or min(numbers) < 1:
        raise argparse.ArgumentTypeError(f"numbers must be at least 1 (got {text!r})")
    return sorted(numbers)
