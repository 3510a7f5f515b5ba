"""Max-min fair rates (``model.fluid``): the filling that visits each flow a few times gives
the textbook progressive filling's rates to the last bit, whatever the flows' resources,
weights (ACKs), caps (threads) and sharing losses; ``max_min_rates`` with its shortcuts (one
resource: water-filling, its shares a rounding apart) within 1e-12; the filling on arrays
(many flows) the same rates to the last bit, and the same ends of flows that come and go; and
the classic cases by hand."""
from __future__ import annotations

import math

import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.model import fluid
from simulator.model.fluid import (
    Crossings,
    Flow,
    FluidShare,
    Resource,
    _filling,
    _filling_arrays,
    max_min_rates,
)

EPS = 1e-12


def textbook(flows: list[Flow]) -> list[float]:
    """Progressive filling as written down: raise every unfrozen flow's rate together until
    a resource is full or a flow at its cap, freeze those, repeat; then each resource's
    sharing loss (the model's rates before it was written to visit fewer flows)."""
    rate = [0.0] * len(flows)
    cap_left = {r: r.capacity for f in flows for r in f.resources}
    count: dict = {}
    users: dict = {}
    for f in flows:
        for r, w in zip(f.resources, f.weights):
            count[r] = count.get(r, 0) + w
            users[r] = users.get(r, 0) + 1
    active = list(range(len(flows)))
    while active:
        inc = min((cap_left[r] / n for r, n in count.items() if n > EPS), default=math.inf)
        inc = min(inc, min(flows[i].cap - rate[i] for i in active))
        for i in active:
            rate[i] += inc
        for r, n in count.items():
            cap_left[r] -= inc * n
        full = {r for r, c in cap_left.items() if count[r] > EPS and c <= EPS * r.capacity}
        still = []
        for i in active:
            f = flows[i]
            if (f.cap < math.inf and f.cap - rate[i] <= EPS * f.cap) or any(
                    r in full for r in f.resources):
                for r, w in zip(f.resources, f.weights):
                    count[r] -= w
            else:
                still.append(i)
        active = still
    for r, n in users.items():
        if r.efficiency is not None:
            for i, f in enumerate(flows):
                if r in f.resources:
                    rate[i] *= r.efficiency(n)
    return rate


CAPACITIES = st.sampled_from([1.25e9, 1e9, 3.1e8, 7.7e7, 1.0, 2.0, 0.5])
flow_specs = st.lists(st.tuples(
    st.lists(st.integers(0, 5), min_size=1, max_size=4),             # resources (repeats too)
    st.one_of(st.none(), st.sampled_from([1.0, 0.0218, 0.5])),       # ACK weight after the first
    st.sampled_from([math.inf, math.inf, 1e8, 1.5, 0.3])), min_size=2, max_size=12)


@settings(max_examples=40, deadline=None)
@given(st.lists(CAPACITIES, min_size=6, max_size=6), st.lists(st.booleans(), min_size=6,
                                                             max_size=6), flow_specs)
def test_the_filling_is_the_textbook_one_to_the_last_bit(capacities, losses, specs):
    resources = [Resource(f"r{i}", c, (lambda n: 1.0 if n < 2 else 1 - 0.1 / n) if lossy
                          else None) for i, (c, lossy) in enumerate(zip(capacities, losses))]
    flows = [Flow(1.0, tuple(resources[i] for i in idx), cap, None,
                  None if ack is None else (1.0,) + (ack,) * (len(idx) - 1))
             for idx, ack, cap in specs]
    expected = textbook(flows)
    _filling(flows)
    assert [f.rate for f in flows] == expected
    max_min_rates(flows)
    assert all(math.isclose(f.rate, e, rel_tol=1e-12) for f, e in zip(flows, expected))


def test_an_incast_shares_the_receivers_link_and_a_cap_gives_way():
    link_in = Resource("server in", 1.0)
    senders = [Resource(f"nic {i}", 10.0) for i in range(4)]
    flows = [Flow(1.0, (nic, link_in), math.inf, None) for nic in senders]
    flows.append(Flow(1.0, (senders[0],), 0.1, None))          # a capped flow beside
    max_min_rates(flows)
    assert [f.rate for f in flows] == [0.25] * 4 + [0.1]


lossless_specs = st.lists(st.tuples(
    st.lists(st.integers(0, 7), min_size=1, max_size=4),
    st.one_of(st.none(), st.sampled_from([1.0, 0.0218, 0.5])),
    st.sampled_from([math.inf, math.inf, 1e8, 1.5, 0.3]),
    st.sampled_from([0.0, 0.0, 0.5, 1.0]),                            # start (s)
    st.sampled_from([1.0, 3.0, 1e8])), min_size=2, max_size=60)      # amount


@settings(max_examples=25, deadline=None)
@given(st.lists(CAPACITIES, min_size=8, max_size=8), lossless_specs)
def test_flows_on_arrays_end_when_they_do_on_objects(capacities, specs):
    """The filling on arrays (``_filling_arrays``, its ``Crossings`` kept up to date as flows
    start and end) gives the same rates to the last bit, and so flows end at the same
    instants, as ``_filling`` on the flow objects; so do rates remembered for the flows'
    kinds (``FluidShare._rates_now``) against rates computed every time."""
    resources = [Resource(f"r{i}", c) for i, c in enumerate(capacities)]
    flows = [Flow(amount, tuple(resources[i] for i in idx), cap, None,
                  None if ack is None else (1.0,) + (ack,) * (len(idx) - 1))
             for idx, ack, cap, _at, amount in specs]
    _filling(flows)
    expected = [f.rate for f in flows]
    _filling_arrays(flows, Crossings(flows))
    assert [f.rate for f in flows] == expected

    def ends(arrays_from: int, rates_kept: int) -> list[float]:
        fluid.ARRAYS_FROM, fluid.RATES_KEPT = arrays_from, rates_kept
        env = simpy.Environment()
        share = FluidShare(env)
        out = [math.nan] * len(specs)

        def start(k, idx, ack, cap, at, amount):
            yield env.timeout(at)
            yield share.transfer(amount, tuple(resources[i] for i in idx), cap,
                                 None if ack is None else (1.0,) + (ack,) * (len(idx) - 1))
            out[k] = env.now
        for k, spec in enumerate(specs):
            env.process(start(k, *spec))
        env.run()
        return out
    shipped = fluid.ARRAYS_FROM, fluid.RATES_KEPT
    try:
        on_objects = ends(10**9, 0)
        assert ends(2, 4096) == on_objects
        assert ends(8, 0) == on_objects         # (arrays dropped, amounts written back)
    finally:
        fluid.ARRAYS_FROM, fluid.RATES_KEPT = shipped
