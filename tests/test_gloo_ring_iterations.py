"""benchmarks.gloo_ring_iterations: a gloo ring's time taken apart, against closed forms."""
import numpy as np
import pytest

from benchmarks.gloo_ring_iterations import (PARTS, chain_growth, chain_rate_s, mean_parts,
                                             ring_iterations, ring_parts)
from tests.test_gloo_schedule import routes_of


def test_ring_iterations_count_both_phases_of_gloos_cut():
    """S = 2P segments for a small buffer, S - S/P iterations a phase, empty ones counted."""
    assert ring_iterations(2, 40.0) == 4
    assert ring_iterations(8, 1000.0) == 28
    assert ring_iterations(8, 40.0) == 28


@pytest.mark.parametrize("p", [2, 3, 8])
def test_cpu_parts_are_the_closed_form_and_sum_to_the_call(p):
    """No latency, no bytes' time, C = 2 shared cores: every rank's time is its messages'
    CPU, 4 m c in ``cpu_own`` and 4 m c (P / C - 1) more in ``cpu_stretch`` (m = 2 (P - 1)
    sends a phase); nothing waits on a neighbour or a wire."""
    c = 5e-5
    routes = routes_of(list(range(p)), 1e15, 0.0, 0.0, 0.0, [0.0] * p, cpu=(c, 0.0, 2))
    ranks = tuple(range(p))
    end_s, parts = ring_parts(routes, ranks, 4e4, 0.0)
    got = mean_parts(parts, routes, ranks)
    m = 2 * (p - 1)
    assert got["cpu_own"] == pytest.approx(4 * m * c, rel=1e-9)
    assert got["cpu_stretch"] == pytest.approx(4 * m * c * (max(1.0, p / 2) - 1), abs=1e-12)
    assert got["upstream"] == got["wire"] == 0.0
    assert got["call_s"] == pytest.approx(end_s, rel=1e-9)


def test_without_cpu_a_rank_waits_on_wires_and_its_parts_sum_to_its_end():
    """A slow link, a hand-off, no CPU: each rank's parts add up to the call (every rank
    ends with the last message), and it waits on the wire, not on CPU."""
    p = 4
    routes = routes_of(list(range(p)), 1e6, 3e-5, 0.0, 0.0, [1e-5] * p)
    ranks = tuple(range(p))
    end_s, parts = ring_parts(routes, ranks, 4e4, 1e-9)
    for rank in ranks:
        assert sum(parts[rank][k] for k in ("cpu", *PARTS[2:])) == pytest.approx(end_s, rel=1e-9)
        assert parts[rank]["cpu"] == 0.0 and parts[rank]["wire"] > 0.5 * end_s


def test_a_ring_of_equal_iterations_never_waits_on_its_neighbour():
    """Every rank-iteration alike: the ring's time an iteration is that time at every P."""
    rng = np.random.default_rng(0)
    for p in (2, 3, 8):
        assert chain_rate_s(np.array([3e-4]), p, 400, rng) == pytest.approx(3e-4, rel=1e-12)


def test_a_spread_of_iteration_times_slows_larger_rings():
    """Iterations of 1 or 9 (mean 5): a ring of two is already slower than the mean, and
    one of eight slower still (a late rank holds up the ring behind it)."""
    growth = chain_growth(np.array([1.0, 9.0]), [2, 8], iterations=2000, seed=1)
    rate2 = chain_rate_s(np.array([1.0, 9.0]), 2, 2000, np.random.default_rng(1))
    assert rate2 > 5.0 and growth[8] > 1.05
