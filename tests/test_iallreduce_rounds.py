"""benchmarks.iallreduce_rounds: MPICH's reduce_scatter_allgather rounds over sleeping polls."""
import random

from benchmarks import iallreduce_rounds as ir


def test_rounds_are_recursive_halving_then_doubling():
    assert ir.partners(8) == [1, 2, 4, 4, 2, 1]


def test_over_tcp_a_round_costs_about_two_polls_and_one_without_acks_or_the_hook_lag():
    # Others polling every 1 ms at any phase: each of the 2 log2(P) rounds waits for the
    # partner's poll (its ack) and the rank's own next poll (the hook runs before the network).
    for P in (2, 4):
        rng = random.Random(3)
        chain = [ir.call_ms(P, 13.0, 1.0, rng) for _ in range(30)]
        guess = [ir.call_ms(P, 13.0, 1.0, rng, one_poll=True) for _ in range(30)]
        rounds = len(ir.partners(P))
        assert 2 * rounds - 1 <= sum(chain) / 30 <= 2 * rounds
        assert sum(guess) / 30 <= rounds


def test_one_host_takes_a_message_a_poll_and_acks_only_cma_sends():
    # The probe's phases (no draw): one cell a poll makes every round slower than over tcp;
    # below the CMA threshold the sends complete at once, so small messages are faster.
    big = ir.call_ms(4, 13.0, 1.0, None, transport="shm")
    assert big > ir.call_ms(4, 13.0, 1.0, None, transport="tcp")
    assert ir.call_ms(4, 13.0, 1.0, None, transport="shm", nbytes=4 * ir.CMA_BYTES - 4) < big


def test_workers_not_powers_of_two_are_a_usage_error(capsys):
    assert ir.main(["--workers", "3", "--trials", "1"]) == 2
    assert "powers of two" in capsys.readouterr().err
