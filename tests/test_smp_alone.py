"""MPICH's composed allreduce priced in three parts (``costs.smp_alone_s``) against its
messages simulated one by one (``costs.simulated_alone_s``): within 1e-9 relative
wherever the parts answer, and they answer on the default placement."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.cluster import Link
from contracts.profile import Transport
from simulator.model.comm.costs import collective_time_s, simulated_alone_s, smp_alone_s
from simulator.model.network import Routes


def routes_of(placement, bandwidth=3e9, socket_buffer=0.0, beta=3e-10, handoff=None,
              flow_cap=0.0, ack_share=0.0, burst=0.0):
    link = Link(bandwidth, 2.5e-5, socket_buffer_bytes=socket_buffer, ack_share=ack_share,
                burst_bytes=burst)
    routes = Routes(tuple(placement), link, Transport("mpi", 2e-6, beta),
                    tuple(handoff) if handoff else None)
    routes.flow_cap = flow_cap
    return routes


@settings(max_examples=150, deadline=None)
@given(hosts=st.sampled_from([2, 3, 4, 6, 8, 16]), per_host=st.integers(2, 5), spread=st.booleans(),
       n_bytes=st.sampled_from([40.0, 2e4, 4e5, 3e6]), gamma=st.sampled_from([0.0, 2e-9]),
       bandwidth=st.sampled_from([1e8, 3e9]), beta=st.sampled_from([0.0, 3e-10, 2e-9]),
       handoff=st.sampled_from([0.0, 1e-5, 1e-5, "mixed"]), flow_cap=st.sampled_from([0.0, 1e8]),
       ack_share=st.sampled_from([0.0, 0.02]), burst=st.sampled_from([0.0, 0.0, 0.0, 25e3]),
       extra=st.sampled_from([0, 0, 0, 1]))
def test_the_parts_are_the_messages_simulated(hosts, per_host, spread, n_bytes, gamma,
                                              bandwidth, beta, handoff, flow_cap, ack_share,
                                              burst, extra):
    p = hosts * per_host + extra                # extra: ranks beyond even hosts
    placement = [r % hosts if spread else r // per_host for r in range(p)]
    handoffs = [1e-5 * (placement[r] % 2) if handoff == "mixed" else handoff for r in range(p)]
    routes = routes_of(placement, bandwidth, 0.0, beta, handoffs, flow_cap, ack_share, burst)
    ranks = tuple(range(p))
    t = smp_alone_s(ranks, n_bytes, routes, gamma)
    if t is None:
        return
    messages = simulated_alone_s("allreduce", ranks, n_bytes, routes, gamma, "smp", 0)
    assert t == pytest.approx(messages, rel=1e-9)


def test_they_answer_on_the_default_placement_and_price_the_call():
    """Two ranks a host, as predict places them: the parts answer, collective_time_s
    gives their answer, and it is the messages' time."""
    routes = routes_of([r // 2 for r in range(64)])
    ranks = tuple(range(64))
    t = smp_alone_s(ranks, 39360.0, routes, 1e-10)
    assert t is not None
    assert collective_time_s("allreduce", ranks, 39360.0, routes, 1e-10, "smp") == t
    assert t == pytest.approx(simulated_alone_s("allreduce", ranks, 39360.0, routes, 1e-10,
                                                "smp", 0), rel=1e-9)


@pytest.mark.parametrize("why", ["uneven hosts", "eager bytes", "token buckets",
                                 "hand-offs differ"])
def test_they_leave_to_the_messages_what_they_cannot_price(why):
    placement = [r // 2 for r in range(8)] + ([4] if why == "uneven hosts" else [])
    kw = {"eager bytes": {"socket_buffer": 1e3}, "token buckets": {"burst": 25e3},
          "hand-offs differ": {"handoff": [1e-5 * (r // 2 == 1) for r in range(8)]}}.get(why, {})
    routes = routes_of(placement, **kw)
    assert smp_alone_s(tuple(range(len(placement))), 4e5, routes, 0.0) is None
