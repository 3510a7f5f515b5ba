"""real.records.wire: what each rank sends, against the libraries' algorithms counted by hand.

The record's counts are checked against real and phantom runs in test_schemes.py.
"""
from __future__ import annotations

import pytest

from real.records import wire

T = [(250, "float32"), (10, "float32"), (5000, "float32"), (20, "float32")]   # 21,120 B


def test_flat_buffers_take_the_widest_dtype():
    assert wire.flat_bytes(T) == 5280 * 4
    assert wire.flat_bytes([(10, "float16"), (10, "bfloat16")]) == 80     # cat: float32
    assert wire.flat_bytes([(10, "float16"), (10, "float64")]) == 160
    assert wire.flat_bytes([(10, "float16")]) == 20


def test_gloo_ring_and_broadcast_tree():
    assert wire.ring_bytes(1000, 2) == 1000 and wire.ring_bytes(1000, 4) == 1500
    assert wire.ring_bytes(1000, 1) == 0
    # gloo/broadcast.cc: round i, every v < 2^i sends to v + 2^i; P - 1 sends in all
    for p in range(1, 17):
        children = [wire.binomial_children(r, p) for r in range(p)]
        assert sum(children) == p - 1
    assert [wire.binomial_children(r, 5) for r in range(5)] == [3, 1, 0, 0, 0]
    assert [wire.binomial_children(r, 5, root=2) for r in range(5)] == [0, 0, 3, 1, 0]


@pytest.mark.parametrize("p", [2, 3, 4, 5, 8])
def test_mpich_allreduce_across_hosts(p):
    hosts = [f"h{i}" for i in range(p)]
    n = 100_000                                   # above 2 KiB: reduce-scatter + allgather
    got = wire.mpi_allreduce_bytes(n, hosts)
    pof2 = 1 << (p.bit_length() - 1)
    rem, core = p - pof2, 2 * (pof2 - 1) / pof2 * n
    assert got == [n if r < 2 * rem and r % 2 == 0 else core + n if r < 2 * rem else core
                   for r in range(p)]
    small = wire.mpi_allreduce_bytes(8, hosts)     # recursive doubling up to 8 bytes
    assert max(small) == pytest.approx((pof2.bit_length() - 1) * 8 + (8 if rem else 0))
    assert wire.mpi_allreduce_bytes(n, hosts, "ring") == [2 * (p - 1) / p * n] * p


def test_mpich_on_one_host_is_shared_memory_and_across_hosts_its_first_ranks_talk():
    assert wire.mpi_allreduce_bytes(1000, ["a", "a", "a"]) == [0.0] * 3
    # ch4's composition: ranks 0 and 2 (each host's first) run Rabenseifner at P = 2
    assert wire.mpi_allreduce_bytes(1000, ["a", "a", "b"]) == [1000, 0, 1000]
    assert wire.mpi_allreduce_bytes(1000, ["a", "a", "b"], "ring") == [None] * 3
    assert wire.tcp_bytes("ps_async", T, ["a", "a", "a"], [5, 5]) == [0, 0, 0]


def test_per_scheme_counts_at_two_workers():
    flat, steps = 21120, [4, 4]
    assert wire.record_bytes("allreduce", T, steps) == [4 * flat] * 2
    assert wire.record_bytes("gather_scatter", T, steps) == [4 * 3 * flat, 4 * flat]
    # gloo frames a message with two 48-byte preambles from its sender, one back from its
    # receiver: the root scatters one message and receives one gather, and so does rank 1
    assert wire.tcp_bytes("gather_scatter", T, ["a", "b"], steps) == [4 * (flat + 144)] * 2
    ring = flat + 4 * 144           # 4 segments of 1,320 elements: each rank sends 2 a phase
    assert wire.tcp_bytes("ddp", T, ["a", "b"], steps) == [4 * ring + flat + 96,  # + broadcast
                                                          4 * ring + 48]
    bn = [(64, "float32"), (64, "float32"), (1, "int64")]       # a BatchNorm's buffers: 520 B
    # rank 0 broadcasts them with the weights (int64: a message more) and before each step
    # (two messages: one a dtype)
    assert wire.tcp_bytes("ddp", T, ["a", "b"], steps, buffers=bn) == \
        [4 * ring + flat + 520 + 2 * 96 + 4 * (520 + 2 * 96), 4 * ring + 2 * 48 + 4 * 2 * 48]
    assert wire.record_bytes("psgd", T, steps, average_every=2) == [3 * flat] * 2
    assert wire.record_bytes("async_avg", T, steps, average_every=2) == [2 * flat, 3 * flat]
    msg = 16 + flat
    assert wire.record_bytes("ps_sync", T, steps) == [10 * msg, 4 * msg, 4 * msg]
    assert wire.tcp_bytes("ps_async", T, ["s", "a", "b"], steps) == [10 * msg, 4 * msg + 16,
                                                                      4 * msg + 16]


def test_steps_per_worker_as_the_runner_lays_the_data_out():
    assert wire.steps_per_worker("ddp", 1000, 64, 128, 2, 3) == [3 * 8, 3 * 8]
    assert wire.steps_per_worker("ddp", 1000, 64, 128, 3, 1) == [8, 8, 8]   # 104 left >= 3
    assert wire.steps_per_worker("psgd", 1000, 64, 192, 3, 1) == [6, 6, 6]  # 333, 333, 334


# Measured on the emulated cluster (2026-11-27, capacity sweep at 20 Mbit/s; the same at
# 100 Mbit/s and 1 Gbit/s): TCP bytes each rank of the CNN's per-tensor allreduce sent in
# 48 steps at P = 8 (``testbed.checks.bytes.sent_bytes`` of its record), 1.38-1.41 times
# the ring's payload that the count had expected before gloo's framing was counted.
CNN = [(250, "float32"), (10, "float32"), (5000, "float32"), (20, "float32"),
       (4000, "float32"), (50, "float32"), (500, "float32"), (10, "float32")]
MEASURED_P8 = [4606240, 4561260, 4561312, 4561312, 4575136, 4620480, 4659884, 4659648]


def test_gloo_per_tensor_allreduce_bytes_at_p8_on_two_hosts_of_four():
    """gloo talks TCP between ranks of one host too: the count is the same on 2 hosts of 4
    ranks as on 8 hosts; each rank's bytes are its segments (whole elements; the biases'
    last segments empty at P = 8) and three 48-byte preambles a message."""
    hosts = ["a"] * 4 + ["b"] * 4
    got = wire.tcp_bytes("allreduce", CNN, hosts, [48] * 8)
    assert got == wire.tcp_bytes("allreduce", CNN, [str(r) for r in range(8)], [48] * 8)
    payload = 2 * 7 / 8 * sum(n * 4 for n, _ in CNN)
    assert sum(got) / 8 == pytest.approx(48 * (payload + 26964))    # framing a step, mean
    for sent, expected in zip(MEASURED_P8, got):
        assert sent == pytest.approx(expected, rel=1e-4)            # barrier, store: < 0.01%
    # the biases' empty segments: ranks owning none of them send more of the others'
    bias = [wire.gloo_ring_tcp_bytes(8, r, 10, "float32") for r in range(8)]
    sends = [18, 16, 16, 16, 16, 18, 20, 20]              # 8 or 10 non-empty segments a phase
    assert bias == [s * (4 + 96) + sends[(r + 1) % 8] * 48 for r, s in enumerate(sends)]
