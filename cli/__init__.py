"""Command-line conventions shared by every ``python -m`` entry point.

Usage errors are one line on stderr and exit code 2, never a traceback; under
mpirun / torchrun only rank 0 prints them, so P ranks do not repeat one mistake.
An error of the file system while a command works is one line too, exit code 1
(``one_line_io_errors`` around a command's ``main``).

Every value a command takes goes through an argparse type of this module,
built on ``contracts.checks``: numbers are finite and in range
(``positive_float``, ``int_in``, ``float_in``, ``seed``...), names that become
folders are plain (``run_id``), paths are of the right kind
(``output_folder``, ``output_file``, ``input_file``, ``input_folder``); an output
must be writable as the file system says, tried before any work.
``Parser`` swaps a bare ``type=float`` or ``type=int`` for ``finite_float`` /
``whole_number``, so a new flag refuses ``nan`` and ``inf`` by construction.
Imports: the standard library, ``contracts.checks`` and ``contracts.units``.
"""
from __future__ import annotations

import argparse
import functools
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from contracts.checks import ConfigError, plain_name
from contracts.units import parse_bandwidth, parse_duration


def launched_rank() -> int:
    """This process's rank as the launcher set it, before any MPI or torch init."""
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "RANK", "SLURM_PROCID"):
        if var in os.environ:
            return int(os.environ[var])
    return 0


def usage_error(prog: str, message: str) -> int:
    if launched_rank() == 0:
        print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


def io_error(prog: str, e: OSError) -> int:
    """An error of the file system while a command works (a disk full, a folder removed
    meanwhile): one line on stderr, exit code 1. Outputs are written whole or not at all
    (``contracts.files``), so what was there before stays."""
    if launched_rank() == 0:
        where = f" {e.filename}" if e.filename else ""
        print(f"{prog}: error:{where}: {e.strerror or e}", file=sys.stderr)
    return 1


def one_line_io_errors(prog: str):
    """A decorator for a command's ``main``: an OSError while it works is ``io_error``."""
    def wrap(main):
        @functools.wraps(main)
        def run(argv=None):
            try:
                return main(argv)
            except OSError as e:
                return io_error(prog, e)
        return run
    return wrap


def print_out(*lines: str) -> None:
    """Print lines to stdout; a reader that stopped reading (``| head``) is no error.

    Commands write their files before they print, so the files are complete either way.
    """
    try:
        for line in lines:
            print(line)
        sys.stdout.flush()
    except BrokenPipeError:
        # Point stdout at /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Each flag's default at the end of its help, once, written as a user types it.

    No default is shown where there is none (``None``, a switch's ``False``) or
    where the help already says what it is; a list reads ``a,b``, as typed.
    """

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if (default in (None, False, argparse.SUPPRESS) or "default" in text
                or action.option_strings == [] or isinstance(default, bool)):
            return text
        if isinstance(default, (list, tuple)):
            default = ",".join(map(str, default))
        return f"{text} (default: {default})" if text else f"(default: {default})"


class Parser(argparse.ArgumentParser):
    """argparse with defaults in the help, one-line errors, and checked numbers:
    ``type=float`` means a finite float and ``type=int`` a whole number."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        # argparse looks a flag's type up in this registry when it converts a value:
        # a bare float or int (in this parser, its groups and subparsers) is checked.
        self.register("type", float, finite_float)
        self.register("type", int, whole_number)

    def error(self, message):
        sys.exit(usage_error(self.prog, " ".join(message.split())
                             + f" (see {self.prog} --help)"))


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
    (``real.replay`` and ``simulator.replay`` take the same values)."""
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


# ---------------------------------------------------------------- stages of a validation

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
