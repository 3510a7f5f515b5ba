"""Quantities written the way people write them, read the same way by every command.

Rates take a unit, always: bits per second as network people and tc write
them (``bit``, ``kbit``, ``mbit``, ``gbit``, ``tbit``, also ``Mbit/s``, and
tc's powers of two ``kibit``, ``mibit``, ``gibit``), or bytes per second with a
capital B (``B/s``, ``kB/s``, ``MB/s``, ``GB/s``, ``TB/s``). ``parse_bandwidth``
returns bytes per second. A bare number is refused (tc reads it as bits, the
simulator used to read bytes), and so is ``mbps`` (tc reads bytes, most people
bits) and a lower-case ``mb/s``: the message says what to write instead.

Durations take ``s``, ``ms``, ``us`` (or ``µs``) and ``ns``; a bare number is
refused too. A latency is one-way, end to end, per message (what one message
of a few bytes takes from one process to another); a simulator that charges
latency per link counts it once per message, not per hop.

Imports: the standard library only.
"""
from __future__ import annotations

import math
import re

_BITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
         "kibit": 2**10, "mibit": 2**20, "gibit": 2**30, "tibit": 2**40}
_BYTES = {"B/s": 1, "kB/s": 1e3, "KB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9, "TB/s": 1e12}
_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_NUMBER_UNIT = re.compile(r"^\s*([-+]?(?:[0-9]*\.?[0-9]+)(?:[eE][-+]?[0-9]+)?)\s*(\S*)\s*$")
RATE_EXAMPLES = "100mbit, 10gbit, 100Mbit/s or 12.5MB/s"


def _split(text, what: str, example: str) -> tuple[float, str]:
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise ValueError(f"{what} {text!r} is not a value like {example}")
    m = _NUMBER_UNIT.match(str(text))
    if not m:
        raise ValueError(f"{what} {text!r} is not a value like {example}")
    value, unit = float(m.group(1)), m.group(2)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} {text!r} must be a finite, non-negative number")
    if not unit:
        raise ValueError(f"{what} {text!r} has no unit: write it like {example}")
    return value, unit


def parse_bandwidth(text: str) -> float:
    """``'10gbit'`` -> 1.25e9, ``'12.5MB/s'`` -> 1.25e7: bytes per second, positive."""
    value, unit = _split(text, "bandwidth", RATE_EXAMPLES)
    bits_unit = unit.lower().removesuffix("/s")
    if unit in _BYTES:
        bytes_per_s = value * _BYTES[unit]
    elif bits_unit in _BITS:
        bytes_per_s = value * _BITS[bits_unit] / 8
    elif bits_unit.endswith("bps") or unit.lower().endswith("b/s"):
        raise ValueError(f"bandwidth {text!r} is ambiguous (bits or bytes?): write bits as "
                         f"100mbit or 100Mbit/s, bytes as 12.5MB/s")
    else:
        raise ValueError(f"bandwidth {text!r} has an unknown unit {unit!r}: write it like "
                         f"{RATE_EXAMPLES}")
    if not 0 < bytes_per_s < math.inf:
        raise ValueError(f"bandwidth {text!r} must be positive and finite")
    return bytes_per_s


_SIZES = {"B": 1, "kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9,
          "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def parse_bytes(text: str) -> float:
    """``'4MiB'`` -> 4194304.0, ``'64kB'`` -> 64000.0: bytes, at least 0."""
    value, unit = _split(text, "size", "64kB, 4MiB or 1GB")
    if unit not in _SIZES:
        raise ValueError(f"size {text!r} has an unknown unit {unit!r}: use one of "
                         f"{', '.join(_SIZES)}")
    if not math.isfinite(value * _SIZES[unit]):
        raise ValueError(f"size {text!r} is not a finite value")
    return value * _SIZES[unit]


def parse_duration(text: str) -> float:
    """``'50us'`` -> 5e-05: seconds, at least 0."""
    value, unit = _split(text, "duration", "50us, 1ms or 0.5s")
    if unit.lower() not in _SECONDS and unit not in _SECONDS:
        raise ValueError(f"duration {text!r} has an unknown unit {unit!r}: use one of "
                         f"{', '.join(_SECONDS)}")
    return value * _SECONDS.get(unit, _SECONDS.get(unit.lower(), 1.0))


def format_rate(bytes_per_s: float) -> str:
    """``1.25e9`` -> ``'10 Gbit/s'``: a rate in the bits per second network people quote."""
    bits = 8 * bytes_per_s
    for scale, unit in ((1e12, "Tbit/s"), (1e9, "Gbit/s"), (1e6, "Mbit/s"), (1e3, "kbit/s")):
        if bits >= scale:
            return f"{bits / scale:.4g} {unit}"
    return f"{bits:.4g} bit/s"


_SPANS = ((86400.0, "d"), (3600.0, "h"), (60.0, "min"), (1.0, "s"), (1e-3, "ms"), (1e-6, "us"))


def format_duration(seconds: float, digits: int = 3) -> str:
    """A duration for a person to read, in the unit its size calls for: ``0.0123`` ->
    ``'12.3 ms'``, ``5.573`` -> ``'5.57 s'``, ``10730`` -> ``'2.98 h'``; ``digits``
    significant digits (days have no larger unit: ``'412 d'``)."""
    if not math.isfinite(seconds):
        return str(seconds)
    if seconds == 0:
        return "0 s"
    for scale, unit in _SPANS:
        value = float(f"{abs(seconds) / scale:.{digits}g}")     # rounded, as printed
        if value >= 1 or unit == "us":
            sign = "-" if seconds < 0 else ""
            text = f"{value:.{digits}g}" if value < 10 ** digits else f"{value:.0f}"
            return f"{sign}{text} {unit}"
    raise AssertionError("unreachable")


def rate_text(bytes_per_s: float) -> str:
    """A rate as a value ``parse_bandwidth`` reads back exactly (for files we write)."""
    return f"{bytes_per_s:.9g}B/s"


def duration_text(seconds: float) -> str:
    """A duration as a value ``parse_duration`` reads back exactly (for files we write)."""
    return f"{float(seconds)!r}s"


_FLOPS = {"flop/s": 1.0, "kflop/s": 1e3, "mflop/s": 1e6, "gflop/s": 1e9, "tflop/s": 1e12,
          "pflop/s": 1e15}
FLOP_RATE_EXAMPLES = "9.3TFLOP/s or 500GFLOP/s"


def parse_flop_rate(text: str) -> float:
    """``'9.3TFLOP/s'`` -> 9.3e12: floating-point operations per second, positive."""
    value, unit = _split(text, "compute rate", FLOP_RATE_EXAMPLES)
    scale = _FLOPS.get(unit.lower().replace("flops", "flop/s"))
    if scale is None:
        raise ValueError(f"compute rate {text!r} has an unknown unit {unit!r}: write it like "
                         f"{FLOP_RATE_EXAMPLES}")
    if value <= 0:
        raise ValueError(f"compute rate {text!r} must be positive")
    return value * scale


def flop_rate_text(flops_per_s: float) -> str:
    """A compute rate as a value ``parse_flop_rate`` reads back exactly."""
    return f"{flops_per_s:.9g}FLOP/s"
