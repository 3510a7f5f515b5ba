"""gloo's ring priced by its recurrence (``comm.gloo_schedule``) against its messages
simulated one by one (``costs.simulated_alone_s``): within 1e-9 relative wherever the
recurrence answers, and it answers where every link resource carries one hop."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.cluster import Link
from contracts.profile import Transport
from simulator.model.comm.costs import collective_time_s, simulated_alone_s
from simulator.model.comm.gloo_schedule import ring_alone_s
from simulator.model.network import Routes


def routes_of(placement, bandwidth, latency_s, socket_buffer, beta, handoff, flow_cap=0.0,
              ack_share=0.0, burst=0.0, cpu=(0.0, 0.0, 0)):
    link = Link(bandwidth, latency_s, socket_buffer_bytes=socket_buffer, ack_share=ack_share,
                burst_bytes=burst, cpu_s_per_message=cpu[0], cpu_s_per_byte=cpu[1],
                cpu_shared_cores=cpu[2])
    routes = Routes(tuple(placement), link, Transport("gloo", 2e-6, beta), tuple(handoff))
    routes.flow_cap = flow_cap
    return routes


@settings(max_examples=80, deadline=None)
@given(p=st.integers(2, 9), per_host=st.integers(1, 4), shuffle=st.randoms(use_true_random=False),
       mixed=st.booleans(), n_bytes=st.sampled_from([40.0, 212.0, 2e4, 4e5, 3e6]),
       gamma=st.sampled_from([0.0, 1e-10, 2e-9]), bandwidth=st.sampled_from([1e8, 3e9]),
       socket_buffer=st.sampled_from([0.0, 1e3, 6e6]), beta=st.sampled_from([0.0, 3e-10, 2e-9]),
       handoff=st.lists(st.sampled_from([0.0, 1e-5]), min_size=9, max_size=9),
       flow_cap=st.sampled_from([0.0, 1e8]),
       cpu=st.sampled_from([(0.0, 0.0, 0), (5e-5, 3e-9, 0), (5e-5, 0.0, 2)]))
def test_the_recurrence_is_the_messages_simulated(p, per_host, shuffle, mixed, n_bytes, gamma,
                                                  bandwidth, socket_buffer, beta, handoff,
                                                  flow_cap, cpu):
    placement = [r // per_host for r in range(p)]
    ranks = list(range(p))
    if mixed:                               # a ring that may cross a NIC twice
        shuffle.shuffle(ranks)
    routes = routes_of(placement, bandwidth, 2e-5, socket_buffer, beta, handoff[:p], flow_cap,
                       cpu=cpu)
    t = ring_alone_s(tuple(ranks), n_bytes, routes, gamma)
    if t is None:
        return
    messages = simulated_alone_s("allreduce", tuple(ranks), n_bytes, routes, gamma,
                                 "gloo_ring", 0)
    assert t == pytest.approx(messages, rel=1e-9)


def test_it_answers_on_hosts_that_alternate_memory_and_network_hops():
    """Two ranks a host (the default placement): every NIC direction and endpoint
    carries one hop of the ring, so the recurrence prices it, and collective_time_s
    gives its answer."""
    routes = routes_of([r // 2 for r in range(8)], 3e9, 2.5e-5, 0.0, 3e-10, [0.0] * 8)
    t = ring_alone_s(tuple(range(8)), 2e4, routes, 1e-10)
    assert t is not None
    assert collective_time_s("allreduce", tuple(range(8)), 2e4, routes, 1e-10,
                             "gloo_ring") == t


@pytest.mark.parametrize("why", ["nic on two hops", "acks", "token buckets", "partly eager"])
def test_it_leaves_to_the_messages_what_it_cannot_price(why):
    placement, ranks, kw = [r // 2 for r in range(6)], (0, 2, 1, 3, 4, 5), {}
    if why != "nic on two hops":
        ranks = tuple(range(6))
        kw = {"acks": {"ack_share": 0.02}, "token buckets": {"burst": 25e3},
              "partly eager": {"socket_buffer": 1e3}}[why]
    args = {"bandwidth": 1e8, "latency_s": 2e-5, "socket_buffer": 0.0, "beta": 3e-10,
            "handoff": [0.0] * 6} | kw
    assert ring_alone_s(ranks, 4e5, routes_of(placement, **args), 0.0) is None


@pytest.mark.parametrize("p, shared_cores", [(2, 0), (4, 0), (2, 2), (4, 2), (8, 2), (3, 4)])
def test_each_messages_cpu_lies_on_the_ring_in_a_row(p, shared_cores):
    """A rank a host on a link without latency or bytes' time: a gloo call is its
    messages' CPU in a row, a send and a receive per iteration, 2 m of each over the
    two phases (m = (P - 1) S / P sends a phase), each ``c`` times the ranks a shared
    core runs: ``4 m c max(1, P / C)``; the recurrence and the messages agree."""
    c, n_bytes = 5e-5, 4e4
    routes = routes_of(list(range(p)), 1e15, 0.0, 0.0, 0.0, [0.0] * p,
                       cpu=(c, 0.0, shared_cores))
    m = (p - 1) * 2                                       # S = 2P segments: small buffers
    expected = 4 * m * c * (max(1.0, p / shared_cores) if shared_cores else 1.0)
    ranks = tuple(range(p))
    assert ring_alone_s(ranks, n_bytes, routes, 0.0) == pytest.approx(expected, rel=1e-9)
    assert simulated_alone_s("allreduce", ranks, n_bytes, routes, 0.0, "gloo_ring",
                             0) == pytest.approx(expected, rel=1e-9)
    one_host = [routes_of([0] * p, 1e15, 0.0, 0.0, 0.0, [0.0] * p, cpu=cpu)
                for cpu in ((c, 0.0, 2), (0.0, 0.0, 0))]       # shared memory: no link CPU
    with_cpu, without = (simulated_alone_s("allreduce", ranks, n_bytes, r, 0.0, "gloo_ring", 0)
                         for r in one_host)
    assert with_cpu == without


@pytest.mark.parametrize("p", [2, 3, 8, 9])
@pytest.mark.parametrize("n_bytes", [40.0, 212.0, 2e4, 37e6])
def test_the_recurrence_cuts_as_gloo_does(p, n_bytes):
    """Every rank's segment at every iteration of both phases is gloo's
    (``libraries.gloo.gloo_ring_lengths``), short and empty ones included."""
    from libraries.gloo import gloo_ring_lengths
    from simulator.model.comm.gloo_schedule import _cut
    cut = _cut(p, n_bytes)
    for i in range(p):
        for phase, lengths in enumerate(gloo_ring_lengths(p, i, n_bytes)):
            assert list(cut[phase, :, i]) == [s for s, _r in lengths]
