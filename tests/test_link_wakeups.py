"""gloo's CPU a byte as wake-ups of the receiver's device thread (``Link.message_cpu_s``).

Closed form: a message of ``n`` bytes over a link of bucket ``b`` costs a side
``c(n) = c0 + c1 n + w max(0, n - b) / (2 u)``, ``u`` the payload the shaper delivers at
once (tc ``tbf`` cuts a packet longer than its bucket into 1448-byte segments: below a
64 KiB bucket a segment a wake-up, at or above it a whole 64 KiB GSO packet). An older
calibration's CPU a byte is split into ``c1`` and ``w`` with the probe's constants so that,
on the link it was measured on, a byte past the bucket costs what was measured.
"""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts.cluster import (GSO_PAYLOAD_BYTES, PROBED_CPU_S_PER_BYTE,
                               PROBED_CPU_S_PER_WAKEUP, SEGMENT_PAYLOAD_BYTES, Link,
                               cpu_per_byte_and_wakeup, delivered_bytes)


def test_the_shaper_delivers_a_segment_below_a_gso_packets_bucket():
    assert delivered_bytes(50_000) == SEGMENT_PAYLOAD_BYTES == 1448
    assert delivered_bytes(125_000) == GSO_PAYLOAD_BYTES == 45 * 1448
    assert delivered_bytes(0) == GSO_PAYLOAD_BYTES          # no bucket: a NIC's line rate


def test_a_message_within_the_bucket_wakes_the_receiver_once():
    link = Link(2.5e7, 1e-5, cpu_s_per_message=50e-6, cpu_s_per_byte=0.35e-9,
                cpu_s_per_wakeup=8.7e-6, burst_bytes=50_000)
    assert link.wakeup_cpu_s(50_000) == 0.0
    assert link.message_cpu_s(1000) == pytest.approx(50e-6 + 0.35e-9 * 1000)


@given(n=st.floats(0, 1e9), burst=st.sampled_from([0.0, 25_000.0, 50_000.0, 250_000.0]))
def test_the_wakeups_past_the_bucket_are_priced_per_delivery(n, burst):
    link = Link(2.5e7, 1e-5, cpu_s_per_message=50e-6, cpu_s_per_byte=0.35e-9,
                cpu_s_per_wakeup=8.7e-6, burst_bytes=burst)
    u = delivered_bytes(burst)
    want = 50e-6 + 0.35e-9 * n + 8.7e-6 * max(0.0, n - burst) / (2 * u)
    assert link.message_cpu_s(n) == pytest.approx(want, rel=1e-12, abs=1e-15)


@given(per_byte_ns=st.floats(0.4, 20.0), burst=st.sampled_from([25_000.0, 50_000.0]))
def test_a_segmenting_calibration_keeps_its_byte_on_its_own_link(per_byte_ns, burst):
    """Calibrated where the shaper segments: the byte takes the probe's price, the rest is
    wake-ups, and past the bucket the calibrated link costs what was measured a byte."""
    calibrated = Link(2.5e7, 1e-5, cpu_s_per_message=50e-6, cpu_s_per_byte=per_byte_ns * 1e-9)
    per_byte, per_wakeup = cpu_per_byte_and_wakeup(calibrated, burst)
    assert per_byte == PROBED_CPU_S_PER_BYTE
    split = Link(2.5e7, 1e-5, cpu_s_per_byte=per_byte, cpu_s_per_wakeup=per_wakeup,
                 burst_bytes=burst)
    n = burst + 1e6
    assert split.message_cpu_s(n) - split.message_cpu_s(burst) == pytest.approx(
        per_byte_ns * 1e-9 * 1e6, rel=1e-9)


def test_a_gso_calibration_takes_the_probes_wakeup():
    """phantom-19's link, calibrated at 500 Mbit/s (bucket 125 kB, 0.563 ns a byte): the
    wake-up is the probe's 8.7 us, the byte what is left, 0.496 ns."""
    calibrated = Link(6e7, 1e-5, cpu_s_per_message=55e-6, cpu_s_per_byte=0.563e-9)
    per_byte, per_wakeup = cpu_per_byte_and_wakeup(calibrated, 125_000)
    assert per_wakeup == PROBED_CPU_S_PER_WAKEUP
    assert per_byte == pytest.approx(0.563e-9 - 8.7e-6 / (2 * 45 * 1448))


def test_a_link_that_names_its_wakeup_is_kept_as_it_is():
    link = Link(2.5e7, 1e-5, cpu_s_per_byte=1e-9, cpu_s_per_wakeup=5e-6)
    assert cpu_per_byte_and_wakeup(link, 50_000) == (1e-9, 5e-6)
    assert cpu_per_byte_and_wakeup(Link(2.5e7, 1e-5), 50_000) == (0.0, 0.0)


def test_a_segmenting_calibration_prices_less_a_byte_at_a_faster_rate():
    """phantom-18's link (200 Mbit/s, bucket 50 kB, 2.33 ns a byte) at 1 Gbit/s (bucket
    250 kB): 64 KiB a wake-up, 0.39 ns a byte past the bucket instead of 2.33."""
    per_byte, per_wakeup = cpu_per_byte_and_wakeup(
        Link(2.5e7, 1e-5, cpu_s_per_byte=2.33e-9), 50_000)
    fast = Link(1.25e8, 1e-5, cpu_s_per_byte=per_byte, cpu_s_per_wakeup=per_wakeup,
                burst_bytes=250_000)
    got = (fast.message_cpu_s(250_000 + 1e6) - fast.message_cpu_s(250_000)) / 1e6
    assert got == pytest.approx(PROBED_CPU_S_PER_BYTE
                                + 2 * 1448 * (2.33e-9 - PROBED_CPU_S_PER_BYTE) / (2 * 65160))
    assert 0.38e-9 < got < 0.40e-9
