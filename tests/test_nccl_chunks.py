"""libraries.nccl: the channels and chunks NCCL's ring allreduce kernel runs, against the
numbers of its source (src/enqueue.cc getAlgoInfo, src/collectives/device/all_reduce.h)."""
import pytest

from libraries.nccl import (
    LL128_STEP_BYTES,
    LL_STEP_BYTES,
    launched,
    release_tuple,
    ring_kernel_bytes,
    ring_path_bytes,
    ring_rank_bytes,
    ring_step_bytes,
    ring_steps,
    round_bytes,
    simple_ring_slices,
)

MIB = 2**20


def test_the_fifo_steps_are_the_sources():
    assert LL_STEP_BYTES == 32768               # 8 lines x 512 threads x 16 B / 8 steps, half data
    assert LL128_STEP_BYTES == 576000           # 120 x 640 x 8 B x 15/16


def test_fewer_channels_below_the_thread_threshold():
    """LL on 8 ranks: threshold 64 B a thread, 512 threads: 32 KiB a channel."""
    assert launched(MIB, 8, "ll", 24) == (24, 512)
    assert launched(512 * 1024, 8, "ll", 24) == (16, 512)
    assert launched(1024, 8, "ll", 24) == (1, 64)       # then the one channel's threads halve
    assert launched(2 * MIB, 8, "ll128", 24) == (24, 640)


@pytest.mark.parametrize("n,chunk", [(2 * MIB, 19200), (4 * MIB, 38400), (8 * MIB, 57600),
                                     (16 * MIB, 96000)])
def test_ll128_chunks_round_up_to_min_chunk_before_2_20(n, chunk):
    assert ring_step_bytes(n, 8, "ll128", 24, "2.18.5") == 8 * 24 * chunk
    if chunk <= round_bytes("ll128", 640) or n == 16 * MIB:    # one trip, or every chunk full
        assert ring_kernel_bytes(n, 8, "ll128", 24, "2.18.5") == 8 * 24 * chunk


def test_full_loops_move_whole_steps():
    loop = 24 * 8 * LL128_STEP_BYTES
    assert ring_kernel_bytes(3 * loop, 8, "ll128", 24, "2.9.6") == pytest.approx(3 * loop)


def test_from_2_20_a_call_is_split_exactly_but_fewer_channels_still_cost():
    assert release_tuple("2.20.3") >= (2, 20) > release_tuple("2.18.5")
    assert ring_kernel_bytes(4 * MIB, 8, "ll128", 24, "2.26.2") == 4 * MIB
    assert ring_kernel_bytes(512 * 1024, 8, "ll", 24, "2.26.2") == pytest.approx(512 * 1024 * 24 / 16)


@pytest.mark.parametrize("n", [1024, 65536, 3 * MIB + 17, 100 * MIB])
def test_the_kernel_never_moves_less_than_an_even_spread(n):
    for proto in ("ll", "ll128"):
        assert ring_kernel_bytes(n, 8, proto, 24, "2.18.5") >= n


def test_ll_at_1_mib_on_2_18_5_is_cut_as_the_source_cuts_it():
    """Azure's 1 MiB (NCCL 2.18.5): 24 channels of 512 threads (64 B a thread on 8 ranks),
    chunks of divUp(262,144 floats, 24 x 8 x 1,024) x 1,024 floats = 8 KiB, so 8 x 24 of
    them cover 1.5 MiB; chunks 6 and 7 of channels 0-7 and 5-7 of the rest are empty."""
    assert launched(MIB, 8, "ll", 24) == (24, 512)
    assert ring_step_bytes(MIB, 8, "ll", 24, "2.18.5") == 8 * 24 * 8192


def test_a_rank_visits_every_chunk_twice_but_its_own_and_the_next_once():
    for r in range(8):
        steps = ring_steps(8, r)
        assert len(steps) == 14
        assert steps.count(r) == 1 and steps.count((r + 1) % 8) == 1
        assert all(steps.count(c) == 2 for c in range(8) if c not in (r, (r + 1) % 8))


def test_by_lines_the_busiest_rank_pays_its_real_chunks_only():
    """1 MiB in LL on 24 channels: channel 0 holds chunks 0-5 (6, 7 empty); the rank whose
    own and next chunks are the empty ones moves 12 full chunks in its 14 steps."""
    assert ring_rank_bytes(MIB, 8, "ll", 24, "2.18.5") == pytest.approx(12 * 8192 * 24 * 8 / 14)
    full = 24 * 8 * LL128_STEP_BYTES
    assert ring_rank_bytes(2 * full, 8, "ll128", 24, "2.18.5") == pytest.approx(2 * full)
    assert ring_rank_bytes(4 * MIB, 8, "ll128", 24, "2.26.2") == 4 * MIB


@pytest.mark.parametrize("n", [1024, 65536, 3 * MIB + 17, 100 * MIB])
def test_the_three_readings_are_ordered(n):
    """Single lines <= rounds <= whole steps: a rank's own steps are one chain of rounds,
    and a round never waits longer than its whole step."""
    for proto in ("ll", "ll128"):
        lines, rounds, steps = (f(n, 8, proto, 24, "2.18.5") for f in
                                (ring_rank_bytes, ring_kernel_bytes, ring_step_bytes))
        assert n * (1 - 1e-12) <= lines <= rounds * (1 + 1e-12) <= steps * (1 + 1e-12) ** 2


def test_a_trip_is_the_threads_lines_or_the_warps_slices():
    assert round_bytes("ll", 512) == 4096            # 512 threads x one 8-byte line
    assert round_bytes("ll128", 640) == 38400        # 20 warps x a 1,920-byte slice


def test_rounds_of_two_ranks_by_hand():
    """Two ranks, chunk 0 of two trips, chunk 1 empty: rank 1 sends chunk 0 in trips 1, 2
    (ends at 2); rank 0 takes trip 1 at 1-2 and trip 2 at 2-3: 3 trips, where whole steps
    take 4 and the busier rank's own bytes 2."""
    assert ring_path_bytes((2.0, 0.0), 1) == 3.0
    assert ring_path_bytes((1.0, 1.0), 1) == 2.0


def test_ll_at_1_mib_by_rounds():
    """Two trips of 4 KiB a chunk: the busiest rank's 12 full chunks in a row, as its own
    bytes; whole steps would give it 14."""
    assert ring_kernel_bytes(MIB, 8, "ll", 24, "2.18.5") == pytest.approx(12 * 8192 * 24 * 8 / 14)


def test_simple_slices_are_the_sources():
    """Simple before 2.20: chunks of at most 4 fifo steps of 512 KiB (2 MiB) in two slices;
    below one loop (24 x 8 x 2 MiB = 384 MiB) a chunk is divUp(n, 192) rounded up to 4 KiB."""
    assert simple_ring_slices(32 * MIB, 8, 24) == [(2, 176128 / 2)]
    assert simple_ring_slices(2**30, 8, 24) == [(2, MIB), (2, MIB), (2, 1400832 / 2)]
    assert simple_ring_slices(MIB, 8, 24) == [(1, 8192.0)]     # one slice of at least 32 KiB
