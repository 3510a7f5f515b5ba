"""benchmarks/gloo_wire_cpu.py: its summary of made-up rows whose CPU is known in closed form
(no run): a byte k and a wake-up s of the receiver, one wake-up a segment where the shaper
cuts packets up (100, 200 Mbit/s: buckets of 2 ms below a 64 KiB packet), one a 64 KiB packet
where it does not (1 Gbit/s, 10 Gbit/s)."""
import pandas as pd
import pytest

from benchmarks.gloo_wire_cpu import GSO_PAYLOAD_BYTES, SEGMENT_PAYLOAD_BYTES, per_rate, wakeup_split

K_S, S_S, C0_S = 0.3e-9, 8e-6, 60e-6
RATES = {"100mbit": SEGMENT_PAYLOAD_BYTES, "200mbit": SEGMENT_PAYLOAD_BYTES,
         "1gbit": GSO_PAYLOAD_BYTES, "10gbit": GSO_PAYLOAD_BYTES}


def made_up_rows() -> pd.DataFrame:
    rows = []
    for rate, u in RATES.items():
        for n in (8, 4096, 1 << 20, 4 << 20):
            wakes = 2 + n / u
            for rank in (0, 1):
                # a round trip: each rank sends n and receives n; oneway: rank 1 receives
                rows.append({"rate": rate, "rank": rank, "pattern": "pingpong", "bytes": n,
                             "process_cpu_s": 2 * C0_S + 2 * K_S * n + S_S * wakes,
                             "loop_cpu_s": S_S * wakes, "loop_slices": wakes})
                one = S_S * wakes if rank else 0.0
                rows.append({"rate": rate, "rank": rank, "pattern": "oneway", "bytes": n,
                             "process_cpu_s": C0_S + K_S * n + one, "loop_cpu_s": one,
                             "loop_slices": wakes if rank else 0})
    return pd.DataFrame(rows)


def test_the_split_recovers_a_byte_and_a_wakeup():
    table = per_rate(made_up_rows())
    assert list(table["rate"]) == list(RATES)
    assert table["receiver_wakeup_cpu_us"].tolist() == pytest.approx([S_S * 1e6] * 4)
    assert table["receiver_bytes_per_wakeup"].tolist() == pytest.approx(list(RATES.values()))
    per_byte, per_wakeup = wakeup_split(table)
    assert per_byte == pytest.approx(K_S)
    assert per_wakeup == pytest.approx(S_S)
    # the CPU a byte calibrate.link would fit at each rate: k + s / (2 u)
    assert table["cpu_ns_per_byte"].tolist() == pytest.approx(
        [(K_S + S_S / (2 * u)) * 1e9 for u in RATES.values()])


def test_the_runs_messages_a_step_are_gloos_ring():
    """benchmarks/gloo_run_cpu.py counts rank 0's sends and receives: one 39,360-byte ring at
    P = 2 is 4 segments, 2 iterations a phase, a send and a receive each (8); the CNN's
    10-element bias at P = 8 leaves 6 of 16 segments empty (gloo_ring_lengths)."""
    from benchmarks.gloo_run_cpu import messages_a_step
    assert messages_a_step("ddp", 2, [39_360]) == 8
    assert messages_a_step("ddp", 8, [39_360]) == 2 * 2 * 14
    assert messages_a_step("allreduce", 2, [40, 39_320]) == 16
    assert messages_a_step("allreduce", 8, [40]) < 2 * 2 * 14
