"""benchmarks.iallreduce_rounds: MPICH's reduce_scatter_allgather rounds over sleeping polls."""
import random

from benchmarks import iallreduce_rounds as ir


def test_rounds_are_recursive_halving_then_doubling():
    assert ir.partners(8) == [1, 2, 4, 4, 2, 1]


def test_a_round_seen_a_poll_late_with_acked_sends_costs_about_two_polls():
    # Others polling every 1 ms: each of the 2 log2(P) rounds waits for the partner's poll
    # (its ack) and the rank's own next poll (the hook runs before the network).
    for P in (2, 4):
        rng = random.Random(3)
        slow = [ir.call_ms(P, 13.0, 1.0, rng) for _ in range(30)]
        fast = [ir.call_ms(P, 13.0, 1.0, rng, acked=False, next_poll=False) for _ in range(30)]
        rounds = len(ir.partners(P))
        assert all(s >= f for s, f in zip(sorted(slow), sorted(fast)))
        assert 2 * rounds - 1 <= sum(slow) / len(slow) <= 2 * rounds


def test_workers_not_powers_of_two_are_a_usage_error(capsys):
    assert ir.main(["--workers", "3", "--trials", "1"]) == 2
    assert "powers of two" in capsys.readouterr().err
