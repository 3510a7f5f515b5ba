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
    assert wire.tcp_bytes("gather_scatter", T, ["a", "b"], steps) == [4 * flat] * 2
    assert wire.tcp_bytes("ddp", T, ["a", "b"], steps) == [5 * flat, 4 * flat]  # + broadcast
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
