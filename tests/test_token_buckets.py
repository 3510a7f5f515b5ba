"""A shaped link's token buckets (``Link.burst_bytes``, the emulated cluster's tc ``tbf``):
each message against its closed form, and the closed-form collectives against the message
model on shaped links."""
from __future__ import annotations

import pytest
import simpy

from contracts.cluster import Link
from contracts.profile import Transport
from simulator.model.comm.costs import collective_time_s
from simulator.model.network import Network, Routes
from tests.test_fidelity import message_time_s

RATE = 2.5e6                  # bytes/s (20 Mbit/s)
BURST = 16384.0               # bytes
LATENCY = 20e-6
SHM = Transport("mpi", 1e-6, 1e-9, 1e-10)


def routes(p: int = 2, burst: float = BURST) -> Routes:
    return Routes(tuple(range(p)), Link(RATE, LATENCY, burst_bytes=burst), SHM)


def sent_at(net: Network, env, n_bytes: float, after_s: float = 0.0) -> list[float]:
    """Times two messages of ``n_bytes`` 0 -> 1 arrive, the second sent ``after_s`` after
    the first arrived."""
    times = []

    def go():
        yield net.transfer(0, 1, n_bytes)
        times.append(env.now)
        yield env.timeout(after_s)
        start = env.now
        yield net.transfer(0, 1, n_bytes)
        times.append(env.now - start)
    env.process(go())
    env.run()
    return times


@pytest.mark.parametrize("n_bytes", [4096.0, 16384.0, 40000.0])
def test_a_message_on_an_idle_link_takes_the_burst_at_once(n_bytes):
    env = simpy.Environment()
    first, second = sent_at(Network(env, routes()), env, n_bytes)
    assert first == pytest.approx(LATENCY + max(0.0, n_bytes - BURST) / RATE)
    # right after it (one latency later): the bucket holds what it kept and refilled
    kept = min(BURST, max(0.0, BURST - n_bytes) + RATE * LATENCY)
    assert second == pytest.approx(LATENCY + max(0.0, n_bytes - kept) / RATE)


def test_a_link_idle_for_a_burst_refills_and_no_burst_is_the_line():
    env = simpy.Environment()
    first, second = sent_at(Network(env, routes()), env, 40000.0, after_s=BURST / RATE)
    assert second == pytest.approx(first)
    env = simpy.Environment()
    assert sent_at(Network(env, routes(burst=0.0)), env, 40000.0) == pytest.approx(
        [LATENCY + 40000 / RATE] * 2)


@pytest.mark.parametrize("p,algorithm", [(2, "reduce_scatter_allgather"), (4, "ring"),
                                         (4, "recursive_doubling"), (3, "ring")])
@pytest.mark.parametrize("n_bytes", [8192.0, 39360.0, 400000.0])
def test_closed_form_collectives_on_a_shaped_link_are_the_message_model(p, algorithm, n_bytes):
    r = routes(p)
    ranks = tuple(range(p))
    analytic = collective_time_s("allreduce", ranks, n_bytes, r, SHM.gamma_s_per_byte,
                                 algorithm)
    message = message_time_s("allreduce", ranks, n_bytes, r, SHM, algorithm)
    assert analytic == pytest.approx(message, rel=1e-6)
    plain = collective_time_s("allreduce", ranks, n_bytes, routes(p, 0.0), SHM.gamma_s_per_byte,
                              algorithm)
    assert analytic < plain


def test_rabenseifner_at_two_hosts_takes_one_burst_in_its_first_half():
    """P = 2: halves of n/2 each way, then back; the first half takes the full bucket,
    the second what the first left plus a latency's refill."""
    n = 39360.0
    half = n / 2
    first = LATENCY + max(0.0, half - BURST) / RATE
    left = min(BURST, max(0.0, BURST - half) + RATE * LATENCY)
    second = LATENCY + max(0.0, half - left) / RATE
    got = collective_time_s("allreduce", (0, 1), n, routes(), 0.0, "reduce_scatter_allgather")
    assert got == pytest.approx(first + second)
