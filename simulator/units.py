"""Quantities written the way people write them: ``10gbit``, ``100mbit``, ``50us``.

Rates are bits per second on the wire (``gbit``, ``mbit``, ``kbit``, ``bit``) or
bytes per second (``gbps``-style is ambiguous, so bytes are written ``GB/s``,
``MB/s``, ``kB/s``, ``B/s``); the result is always bytes per second.
Durations take ``s``, ``ms``, ``us`` (or ``µs``) and ``ns``; a bare number is seconds.
"""
from __future__ import annotations

import re

_RATE_BYTES_PER_UNIT = {
    "bit": 1 / 8, "kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8, "tbit": 1e12 / 8,
    "b/s": 1.0, "kb/s": 1e3, "mb/s": 1e6, "gb/s": 1e9, "tb/s": 1e12,
}
_SECONDS_PER_UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_NUMBER_UNIT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zA-Zµ/]*)\s*$")


def _split(text: str, what: str, example: str) -> tuple[float, str]:
    m = _NUMBER_UNIT.match(str(text))
    if str(text).strip().startswith("-"):
        raise ValueError(f"{what} {text!r} must not be negative")
    if not m:
        raise ValueError(f"{what} {text!r} is not a value like {example}")
    return float(m.group(1)), m.group(2).lower()


def _parse(text, what: str, example: str, per_unit: dict[str, float], bare: str) -> float:
    """A value with an optional unit of ``per_unit`` (``bare`` when none) in base units."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value, unit = float(text), bare
    else:
        value, unit = _split(text, what, example)
        unit = unit or bare
    if unit not in per_unit:
        raise ValueError(f"{what} {text!r} has an unknown unit {unit!r} "
                         f"(use one of {', '.join(per_unit)})")
    return value * per_unit[unit]


def parse_bandwidth(text: str | float | int) -> float:
    """``'10gbit'`` -> 1.25e9 bytes per second. Numbers alone are bytes per second."""
    bytes_per_s = _parse(text, "bandwidth", "10gbit or 100mbit", _RATE_BYTES_PER_UNIT, "b/s")
    if bytes_per_s <= 0:
        raise ValueError(f"bandwidth {text!r} must be positive")
    return bytes_per_s


def parse_duration(text: str | float | int) -> float:
    """``'50us'`` -> 5e-05 seconds. Numbers alone are seconds."""
    seconds = _parse(text, "duration", "50us or 1ms", _SECONDS_PER_UNIT, "s")
    if seconds < 0:
        raise ValueError(f"duration {text!r} must not be negative")
    return seconds
