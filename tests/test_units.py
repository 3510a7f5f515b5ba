"""One reading of rates and durations for every command (``contracts.units``)."""
from __future__ import annotations

import pytest

from contracts.units import (
    format_duration,
    format_rate,
    parse_bandwidth,
    parse_duration,
    rate_text,
)


@pytest.mark.parametrize("text,bytes_per_s", [
    ("10gbit", 1.25e9), ("100mbit", 12.5e6), ("100Mbit/s", 12.5e6), ("1.5Gbit", 1.875e8),
    ("12.5MB/s", 12.5e6), ("1GB/s", 1e9), ("64kB/s", 64e3), ("1mibit", 2**20 / 8),
])
def test_rates_in_bits_or_bytes(text, bytes_per_s):
    assert parse_bandwidth(text) == pytest.approx(bytes_per_s)


@pytest.mark.parametrize("text,says", [
    ("100", "no unit"), (1e9, "no unit"), ("10mbps", "ambiguous"), ("10mb/s", "ambiguous"),
    ("fast", "not a value"), ("-1gbit", "non-negative"), ("0mbit", "positive"),
    ("nan", "not a value"), ("inf gbit", "not a value"), ("5furlongs", "unknown unit"),
])
def test_bad_rates_say_what_to_write(text, says):
    with pytest.raises(ValueError, match=says):
        parse_bandwidth(text)


@pytest.mark.parametrize("text,seconds", [("20us", 20e-6), ("1ms", 1e-3), ("0.5s", 0.5),
                                          ("3µs", 3e-6), ("0us", 0.0)])
def test_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["20", "-5us", "5 parsecs", "nan"])
def test_bad_durations(text):
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_what_we_write_reads_back():
    for b in (1.25e9, 62450300.0, 123.456):
        assert parse_bandwidth(rate_text(b)) == pytest.approx(b, rel=1e-9)
    assert format_rate(1.25e9) == "10 Gbit/s" and format_rate(12.5e6) == "100 Mbit/s"


@pytest.mark.parametrize("seconds,text", [
    (0, "0 s"), (2e-5, "20 us"), (0.0004, "400 us"), (0.0123, "12.3 ms"), (0.9996, "1 s"),
    (5.573, "5.57 s"), (59.99, "1 min"), (90, "1.5 min"), (3599, "1 h"), (10730.452, "2.98 h"),
    (86400, "1 d"), (1e6, "11.6 d"), (1e9, "11600 d"), (-5.5, "-5.5 s"),
])
def test_durations_read_in_the_unit_their_size_calls_for(seconds, text):
    assert format_duration(seconds) == text


def test_durations_keep_their_order_when_printed():
    """A larger duration never prints as a smaller number of the same unit."""
    values = [x * 10 ** e for e in range(-6, 7) for x in (1, 1.5, 2.5, 5, 9.99)]
    for a, b in zip(values, values[1:]):
        (va, ua), (vb, ub) = (format_duration(v).split() for v in (a, b))
        if ua == ub:
            assert float(va) <= float(vb)
