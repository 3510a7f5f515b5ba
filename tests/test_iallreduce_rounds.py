"""MPICH's non-blocking allreduce waited in sleeping polls (``model.comm.iallreduce``): its
schedule, the chain against a closed form, the engines agreeing on psgd's polled average,
and ``benchmarks.iallreduce_rounds`` replaying the same chain."""
from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks import iallreduce_rounds as ir
from contracts.checks import ConfigError
from contracts.cluster import Cluster, Link
from contracts.workload import Workload
from simulator.engine import simulate
from simulator.model.comm import iallreduce, polls
from simulator.model.config import SchemeConfig
from simulator.testing import make_profile

N = 39360                        # the phantom validations' CNN, bytes


def peers(rounds) -> list[tuple]:
    return [tuple((op.send, op.peer, op.n_bytes) for op in ops) for ops in rounds]


def test_rounds_are_recursive_halving_from_the_nearest_partner_then_doubling_back():
    rounds = iallreduce.schedule(8, N)[5]
    assert [ops[0].peer for ops in rounds] == [4, 7, 1, 1, 7, 4]
    assert [ops[0].n_bytes for ops in rounds] == [N / 2, N / 4, N / 8, N / 8, N / 4, N / 2]
    assert all([op.send for op in ops] == [False, True] for ops in rounds)


def test_off_a_power_of_two_the_even_low_ranks_sit_out_and_get_the_result_back():
    """P = 6, rem 2: ranks 0 and 2 send all to 1 and 3 and receive it back at the end; the
    others run pof2 4's rounds by their new rank (1 -> 0, 3 -> 1, 4 -> 2, 5 -> 3)."""
    s = iallreduce.schedule(6, N)
    assert peers(s[0]) == [((True, 1, N),), ((False, 1, N),)]
    assert [ops[0].peer for ops in s[1]] == [0, 3, 4, 4, 3, 0]
    assert peers(s[1])[-1] == ((True, 0, N),)
    assert [ops[0].peer for ops in s[4]] == [5, 1, 1, 5]
    assert iallreduce.choice(2048, 4) == iallreduce.choice(N, 16_384) == "recursive_doubling"
    assert [len(r) for r in iallreduce.schedule(3, 1024)] == [2, 3, 1]


@settings(max_examples=15, deadline=None)
@given(st.sampled_from([2, 4, 8, 16]), st.floats(0.2e-3, 5e-3),
       st.floats(1e-7, 49e-6), st.floats(0.0, 2e-9))
def test_ranks_in_together_take_three_polls_a_round(p, poll_s, flight_s, gamma):
    """Over tcp, every rank in at 0, a message shorter than the first sleep: a round posted
    at check k reaches the partner before k + 1, which takes it and acks it; the ack is
    read at k + 2 and the hook moves on at k + 3. So every rank leaves at check 3 R of
    ``real.launch.dist.wait``'s back-off, R = 2 log2 P, later by its reductions (the
    halving adds n/2 + n/4 + ... = n (1 - 1/P) bytes, each inside a poll)."""
    leave = iallreduce.leave_s([0.0] * p, poll_s, N, lambda *_: flight_s,
                               reduce_s_per_byte=gamma)
    rounds = 2 * (p.bit_length() - 1)
    checks = polls.checks_s(poll_s, 3 * rounds * poll_s)
    added = gamma * N * (1 - 1 / p)
    assert leave == pytest.approx([checks[3 * rounds] + added] * p, rel=1e-9)


def test_a_message_within_the_shapers_burst_crosses_at_once_and_the_rest_at_the_rate():
    """As the message model moves one alone: the token bucket lets its first bytes through
    at once, the rest go at the link's rate with the partner's ACKs (``ack_share``) where
    the round is an exchange, and the bucket refills only once the direction is idle."""
    from simulator.model.network import Routes
    link = Link(bandwidth_bytes_per_s=1e6, latency_s=1e-4, burst_bytes=30_000, ack_share=0.02)
    fly = iallreduce.RouteFlights(Routes((0, 1), link, make_profile().transports[0]), (0, 1))
    assert fly(0, 1, 20_000, 0.0) == pytest.approx(1e-4)
    assert fly(0, 1, 20_000, 0.0, paired=True) == pytest.approx(1e-4 + (20_400 - 10_000) / 1e6)
    assert fly(0, 1, 5_000, 0.0104 + 3e-3) == pytest.approx(1e-4 + 2_000 / 1e6)  # 3 ms: 3 kB
    assert fly(1, 0, 40_000, 0.0) == pytest.approx(1e-4 + 10_000 / 1e6)   # the other way


def test_over_tcp_a_late_rank_waits_about_two_polls_a_round():
    """Others backed off to 1 ms at any phase: each of the 2 log2(P) rounds waits for the
    partner's poll (its ack) and the rank's own next poll (the hook runs before the
    network); a round a poll (sends complete at once, no hook lag) is the first guess."""
    for p in (2, 4):
        rng = random.Random(3)
        chain = [ir.call_ms(p, 13.0, 1.0, rng) for _ in range(30)]
        guess = [ir.call_ms(p, 13.0, 1.0, rng, one_poll=True) for _ in range(30)]
        rounds = len(iallreduce.schedule(p, N)[0])
        assert 2 * rounds - 1 <= sum(chain) / 30 <= 2 * rounds
        assert sum(guess) / 30 <= rounds


def test_a_rank_a_minute_late_costs_what_one_13_ms_late_does():
    """The others have backed off to 1 ms long before either: the same chain after the
    last one in (the polls that find nothing to do are skipped, not played)."""
    late = [iallreduce.leave_s([0.0] * 3 + [x], 1e-3, N, lambda *_: 1e-5) for x in (13e-3, 60.0)]
    assert [a - 13e-3 for a in late[0]] == pytest.approx([b - 60.0 for b in late[1]], abs=1e-9)


def test_one_host_takes_a_message_a_poll_and_acks_only_cma_sends():
    # The probe's phases (no draw): one cell a poll makes every round slower than over tcp;
    # below the CMA threshold the sends complete at once, so small messages are faster.
    big = ir.call_ms(4, 13.0, 1.0, None, transport="shm")
    assert big > ir.call_ms(4, 13.0, 1.0, None, transport="tcp")
    assert ir.call_ms(4, 13.0, 1.0, None, transport="shm",
                      nbytes=4 * iallreduce.CMA_BYTES - 4) < big


def test_fewer_than_two_workers_are_a_usage_error(capsys):
    assert ir.main(["--workers", "1", "--trials", "1"]) == 2
    assert "world sizes from 2" in capsys.readouterr().err


def _polled(prof, poll_s=1e-3):
    return replace(prof, transports=tuple(replace(t, poll_s=poll_s) for t in prof.transports))


@pytest.mark.parametrize("p", [2, 3, 8])
def test_every_engine_plays_psgds_polled_average_alike(p):
    """The fast path, SimPy with closed forms and SimPy with messages leave every rank of
    psgd's closing average at the same poll, and split its time into wait and comm alike;
    with the ranks spinning (poll 0) the call is the blocking allreduce's."""
    prof = _polled(make_profile(cores=1, spread_cv=0.1))
    cluster = Cluster(hosts=p, cores_per_host=1,
                      link=Link(bandwidth_bytes_per_s=125e6, latency_s=5e-5))
    runs = [simulate(SchemeConfig("psgd", engine=e, fidelity=f), p, Workload(model="toy",
                     iterations=4), cluster, prof, seed=2)
            for e, f in (("fast", "analytic"), ("des", "analytic"), ("des", "message"))]
    spinning = simulate(SchemeConfig("psgd", engine="fast"), p, Workload(model="toy",
                        iterations=4), cluster, _polled(prof, 0.0), seed=2)
    for r in runs[1:]:
        assert r.time_s == pytest.approx(runs[0].time_s, rel=1e-9)
        for a, b in zip((r.compute_s, r.comm_s, r.wait_s),
                        (runs[0].compute_s, runs[0].comm_s, runs[0].wait_s)):
            assert a == pytest.approx(b, rel=1e-9, abs=1e-12)
    assert runs[0].time_s > spinning.time_s + 1e-3


def test_polled_averages_every_k_steps_run_in_simpy():
    """Each rank leaves an average at its own poll, so its next steps start apart: the
    fast path refuses, auto takes SimPy, whose fidelities agree."""
    prof = _polled(make_profile(cores=1))
    cluster = Cluster(hosts=4, cores_per_host=1,
                      link=Link(bandwidth_bytes_per_s=125e6, latency_s=5e-5))
    wl = Workload(model="toy", iterations=6)
    with pytest.raises(ConfigError, match="sleeping polls"):
        simulate(SchemeConfig("psgd", engine="fast", avg_every=2), 4, wl, cluster, prof)
    auto = simulate(SchemeConfig("psgd", avg_every=2), 4, wl, cluster, prof)
    msg = simulate(SchemeConfig("psgd", fidelity="message", avg_every=2), 4, wl, cluster, prof)
    assert auto.engine == "des"
    assert msg.time_s == pytest.approx(auto.time_s, rel=1e-9)
