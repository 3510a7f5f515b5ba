"""Messages of psgd's polled average that cross one NIC direction at once share it
(``model.comm.sharing``, ``iallreduce.shared_leave_s``): closed forms for the fold off a
power of two, and no change where no two messages overlap."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.cluster import Link
from simulator.model.comm import iallreduce
from simulator.model.comm.sharing import Message, finish_s, overlapping
from simulator.model.network import Routes
from simulator.testing import make_profile

BW = 1e6                                  # bytes/s of every NIC direction
NIC = (("nic_in", 1), BW)


def routes_of(p: int, **link) -> Routes:
    """P ranks, one a host, over a plain link (no latency, bucket or ACK share)."""
    link = Link(bandwidth_bytes_per_s=BW, latency_s=0.0, **link)
    return Routes(tuple(range(p)), link, make_profile().transports[0])


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(0.01, 5.0), min_size=1, max_size=6))
def test_messages_that_start_together_into_one_receiver_end_as_processor_sharing(busy):
    """k messages of alone times b_1 <= ... <= b_k on one direction, all posted at 0: the
    j-th ends at sum_{i<j} b_i + (k - j + 1) b_j (each at 1/m of the rate while m move)."""
    ends = finish_s([Message(0.0, b, (NIC,), b) for b in busy])
    order = sorted(range(len(busy)), key=lambda i: busy[i])
    b = sorted(busy)
    for j, i in enumerate(order):
        assert ends[i] == pytest.approx(sum(b[:j]) + (len(b) - j) * b[j], rel=1e-9)
    assert max(ends) == pytest.approx(sum(busy), rel=1e-9)      # the direction never idles


def test_messages_apart_in_time_or_on_other_directions_are_left_as_priced():
    a = Message(0.0, 1.0, (NIC,), 1.0)
    later = Message(1.0, 2.0, (NIC,), 3.0)
    other = Message(0.5, 2.0, ((("nic_in", 2), BW),), 2.5)
    assert overlapping([a, later, other]) == set()
    assert finish_s([a, later, other]) == [1.0, 3.0, 2.5]


def test_the_fold_at_three_ranks_shares_the_receivers_direction():
    """P = 3: rank 0's whole buffer (n) and rank 2's first halving round (n/2) both enter
    rank 1, shared: the fold ends at 1.5 n/B; then rank 1's half to rank 2 (n/2), the
    doubling's exchange (n/2): rank 2 leaves at 2.5 n/B; the unfold (n) brings ranks 0 and
    1 out at 3.5 n/B. Priced alone the fold ends at n/B: 2.0 and 3.0 n/B."""
    n, poll_s = 1e7, 1e-3                   # n/B = 10 s; a round lags its polls by ms
    routes = routes_of(3)
    alone = iallreduce.leave_s([0.0] * 3, poll_s, n, iallreduce.RouteFlights(routes, (0, 1, 2)))
    shared = iallreduce.shared_leave_s([0.0] * 3, poll_s, n, routes, (0, 1, 2))
    assert alone == pytest.approx([30.0, 30.0, 20.0], abs=0.02)
    assert shared == pytest.approx([35.0, 35.0, 25.0], abs=0.02)


def test_the_fold_at_six_ranks_overlaps_the_second_halving_round():
    """P = 6 (rem 2): ranks 4 and 5 exchange n/2 (1 -> 0.5 s), then send n/4 to ranks 1 and
    3 while the folds (n) still enter them: each fold ends at 1.25 n/B, then n/2, n/4 (the
    quarter from 4 / 5 is in), n/4, n/2: ranks 4 and 5 leave at 2.75 n/B, the others after
    the unfold at 3.75 n/B (alone: 2.5 and 3.5)."""
    n, poll_s = 1e7, 1e-3                   # n/B = 10 s
    shared = iallreduce.shared_leave_s([0.0] * 6, poll_s, n, routes_of(6), tuple(range(6)))
    assert shared == pytest.approx([37.5] * 4 + [27.5] * 2, abs=0.03)


@settings(max_examples=12, deadline=None)
@given(st.sampled_from([2, 4, 8]), st.floats(1e4, 1e7), st.floats(0.2e-3, 2e-3))
def test_at_a_power_of_two_with_ranks_in_together_nothing_is_shared(p, n, poll_s):
    """Every round an exchange between pairs: each direction carries one message at a time,
    so the shared chain is the chain priced alone (the token buckets and ACKs included)."""
    routes = routes_of(p, burst_bytes=50_000, ack_share=0.02)
    ranks = tuple(range(p))
    alone = iallreduce.leave_s([0.0] * p, poll_s, n, iallreduce.RouteFlights(routes, ranks))
    assert iallreduce.shared_leave_s([0.0] * p, poll_s, n, routes, ranks) == alone
