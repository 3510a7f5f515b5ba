"""Checks on the numbers, names and files every stage reads: one error type, one message shape.

``ConfigError`` is a value that cannot be used; its message names the value
and says what is wrong, so a command can print it as one line and exit 2.
The number checks refuse NaN and infinity as well as values out of range;
``finite_tree`` finds a NaN or an infinity anywhere in data read from a file
and names where it is; ``plain_name`` keeps a name that becomes a folder
(a run id) inside its folder; ``fits_in_memory`` refuses what could not be
allocated. ``argparse`` types built on these live in ``cli``.
Imports: the standard library only.
"""
from __future__ import annotations

import math
import os
import re


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the value."""


def _is_number(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float))


def finite(name: str, value) -> None:
    """``value`` must be a finite number."""
    if not _is_number(value) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number (got {value!r})")


def positive(name: str, value) -> None:
    """``value`` must be a finite number above 0."""
    if not _is_number(value) or not math.isfinite(value) or not value > 0:
        raise ConfigError(f"{name} must be a positive number (got {value!r})")


def nonnegative(name: str, value) -> None:
    """``value`` must be a finite number of at least 0."""
    if not _is_number(value) or not math.isfinite(value) or value < 0:
        raise ConfigError(f"{name} must be a number of at least 0 (got {value!r})")


def whole(name: str, value, low: int = 1, high: int | None = None) -> None:
    """``value`` must be an integer in ``[low, high]`` (a float like 2.5 is refused)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be a whole number (got {value!r})")
    if value < low or (high is not None and value > high):
        span = f"at least {low}" if high is None else f"between {low} and {high}"
        raise ConfigError(f"{name} must be {span} (got {value})")


def in_range(name: str, value, low: float, high: float, high_open: bool = False) -> None:
    """``value`` must be a finite number in ``[low, high]`` (``[low, high)`` if ``high_open``)."""
    finite(name, value)
    if value < low or value > high or (high_open and value == high):
        raise ConfigError(f"{name} must be in [{low:g}, {high:g}{')' if high_open else ']'} "
                          f"(got {value!r})")


def finite_tree(data, where: str = "") -> None:
    """Every number in nested dicts and lists must be finite; the error names the path."""
    if isinstance(data, float) and not math.isfinite(data):
        raise ConfigError(f"field {where or 'top level'} is {data!r}, not a finite number")
    if isinstance(data, dict):
        for key, value in data.items():
            finite_tree(value, f"{where}.{key}" if where else str(key))
    elif isinstance(data, (list, tuple)):
        for i, value in enumerate(data):
            finite_tree(value, f"{where}[{i}]")


_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")


def plain_name(name: str, value) -> None:
    """A name that becomes one folder: letters, digits and ``._+-``, not starting with
    a dot, no ``/`` and no ``..``, at most 128 characters."""
    if not isinstance(value, str) or not _PLAIN.fullmatch(value) or ".." in value:
        raise ConfigError(f"{name} {value!r} must be a plain name: letters, digits and ._+- "
                          "(no /, no .., not starting with a dot, at most 128 characters)")


def available_memory_bytes() -> int:
    """Memory the kernel could give a new allocation without swapping (MemAvailable)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 2**63


def fits_in_memory(what: str, n_bytes: float, share: float = 0.8) -> None:
    """``n_bytes`` must be at most ``share`` of the memory available now."""
    free = available_memory_bytes()
    if n_bytes > share * free:
        raise ConfigError(f"{what} needs about {_size(n_bytes)}, more than this machine has "
                          f"free ({_size(free)} available)")


def _size(n_bytes: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{int(n_bytes)} B"


def non_finite_field(data, where: str = "") -> tuple[str, float] | None:
    """The first NaN or infinity in nested JSON-like data, as (dotted field, value); None
    when every number is finite (how profiles and run records are checked whole)."""
    if isinstance(data, float) and not math.isfinite(data):
        return where, data
    items = (data.items() if isinstance(data, dict) else
             ((f"[{i}]", v) for i, v in enumerate(data)) if isinstance(data, list) else ())
    for key, value in items:
        name = (f"{where}{key}" if str(key).startswith("[") else
                f"{where}.{key}" if where else str(key))
        found = non_finite_field(value, name)
        if found:
            return found
    return None
