"""The two fidelities agree: the analytic closed form on a placement is the message model.

``comm.costs`` prices each step of a collective by the busiest NIC or
endpoint its messages cross; ``comm.collectives`` sends the same messages
over the simulated links. For every algorithm, random clusters (hosts,
ranks per host, placement, bandwidth, latency, bytes) must give the same
time within 2%, and where every rank has its own host and path the closed
forms of ``simulator.model.comm.closed_forms`` exactly.
"""
from __future__ import annotations

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from libraries import gloo as gloo_cut
from libraries.mpich import choose_allreduce
from simulator.model.comm import closed_forms as cf
from contracts.cluster import ACK_SHARE, Cluster, Hardware, Link
from contracts.profile import Transport
from contracts.workload import Workload
from simulator.engine import simulate
from simulator.model.comm import MessageComm
from simulator.model.comm.costs import collective_time_s
from simulator.model.config import SchemeConfig
from simulator.model.fabric import FabricRoutes
from simulator.model.network import Routes
from simulator.model.recorder import Recorder
from simulator.testing import make_profile

ALGORITHMS = ("ring", "recursive_doubling", "reduce_scatter_allgather", "tree", "hierarchical",
              "smp", "auto", "gloo_ring")


def message_time_s(kind, ranks, n_bytes, routes, transport, algorithm="ring", root=0) -> float:
    env = simpy.Environment()
    comm = MessageComm(env, routes, transport, Recorder(routes.placement))
    ends = []

    def rank(r):
        if kind == "allreduce":
            yield from comm.allreduce(r, ranks, n_bytes, algorithm)
        else:
            yield from getattr(comm, kind)(r, ranks, n_bytes, root=root)
        ends.append(env.now)
    for r in ranks:
        env.process(rank(r))
    env.run()
    return max(ends)


cluster_params = dict(
    hosts=st.integers(1, 6), per_host=st.integers(1, 4), packed=st.booleans(),
    gbit=st.sampled_from([0.1, 1.0, 10.0, 100.0]), latency_us=st.sampled_from([0.0, 5.0, 50.0]),
    n_bytes=st.sampled_from([4.0, 4096.0, 1e6, 4e7]),
    shm_gbyte=st.sampled_from([1.0, 8.0]), shm_alpha_us=st.sampled_from([1.0, 100.0]),
    acks=st.sampled_from([0.0, ACK_SHARE]))


def routes_of(hosts, per_host, packed, gbit, latency_us, shm_gbyte, shm_alpha_us, nics=0,
              leaf=0, acks=0.0):
    """Plain routes (one NIC per host, shared memory inside), or with ``nics`` the
    fabric's: that many NICs per host, a device link inside, leaves of ``leaf`` hosts
    (2:1 oversubscribed) when ``leaf``."""
    p = hosts * per_host
    placement = tuple(r // per_host if packed else r % hosts for r in range(p))
    link = Link(gbit * 1e9 / 8, latency_us * 1e-6,
                ack_share=0.0 if nics else acks) if hosts > 1 else None
    shm = Transport("mpi", shm_alpha_us * 1e-6, 1 / (shm_gbyte * 1e9), 1e-10)
    if not nics:
        return Routes(placement, link, shm), shm
    hw = Hardware(intra=Link(shm_gbyte * 1e9, shm_alpha_us * 1e-6), nics=nics,
                  topology="two_tier" if leaf else "switch", hosts_per_leaf=leaf,
                  oversubscription=2.0)
    cluster = Cluster(hosts=hosts, cores_per_host=per_host, link=link,
                      placement="packed" if packed else "round_robin", hardware=hw)
    return FabricRoutes(placement, cluster, shm), shm


@settings(max_examples=150, deadline=None)
@given(kind=st.sampled_from(["allreduce", "gather", "scatter", "bcast"]),
       algorithm=st.sampled_from(ALGORITHMS), root=st.integers(0, 3), nics=st.integers(0, 2),
       leaf=st.sampled_from([0, 2]), **cluster_params)
def test_analytic_collectives_are_the_message_model(kind, algorithm, root, nics, leaf, hosts,
                                                    per_host, packed, gbit, latency_us, n_bytes,
                                                    shm_gbyte, shm_alpha_us, acks):
    routes, shm = routes_of(hosts, per_host, packed, gbit, latency_us, shm_gbyte, shm_alpha_us,
                            nics, leaf, acks)
    ranks = tuple(range(len(routes.placement)))
    if len(ranks) < 2:
        return
    root = root % len(ranks)
    if kind == "allreduce":
        algorithm = choose_allreduce(algorithm, n_bytes, len(ranks), routes.hosts(ranks))
    analytic = collective_time_s(kind, ranks, n_bytes, routes, shm.gamma_s_per_byte, algorithm,
                                 root)
    message = message_time_s(kind, ranks, n_bytes, routes, shm, algorithm, root)
    assert analytic == message or abs(analytic / message - 1) <= 0.02, (analytic, message)


def test_a_shared_nic_is_priced_by_its_ranks():
    """mpi_allreduce's ring over 8 hosts with 4 ranks each, round robin: every hop leaves
    its host, so each NIC carries four chunks at once; packed, only one."""
    link = Link(1.25e9, 20e-6)
    shm = Transport("mpi", 1e-6, 1e-10)
    ranks, n = tuple(range(32)), 4e7
    spread = Routes(tuple(r % 8 for r in ranks), link, shm)
    packed = Routes(tuple(r // 4 for r in ranks), link, shm)
    t_spread = collective_time_s("allreduce", ranks, n, spread, 0.0, "ring")
    t_packed = collective_time_s("allreduce", ranks, n, packed, 0.0, "ring")
    chunk = n / 32
    assert t_spread == 62 * (20e-6 + 4 * chunk / 1.25e9)
    assert t_packed == 62 * max(20e-6 + chunk / 1.25e9, 1e-6 + chunk * 1e-10)
    assert t_spread == pytest.approx(message_time_s("allreduce", ranks, n, spread, shm), rel=1e-9)


def test_one_rank_per_host_is_the_contention_free_closed_form():
    link = Link(1e9, 10e-6)
    shm = Transport("mpi", 1e-6, 1e-10)
    for p in (2, 3, 5, 8):
        routes = Routes(tuple(range(p)), link, shm)
        ranks = tuple(range(p))
        for algorithm, closed in cf.ALLREDUCE.items():
            if algorithm == "release_gather":
                continue
            got = collective_time_s("allreduce", ranks, 1e6, routes, 2e-10, algorithm)
            if algorithm.startswith("gloo_ring"):   # reduces a segment while the next moves
                f = gloo_cut.GLOO_RING_FRAMING_BYTES       # gloo's preambles between hosts
                assert got <= closed(p, 1e6, 10e-6, 1e-9, 2e-10, framing=f) * (1 + 1e-12)
                n = 8 * p * round(1e6 / (8 * p))  # 2P equal segments of whole elements
                got = collective_time_s("allreduce", ranks, n, routes, 0.0, algorithm)
                framed = closed(p, n, 10e-6, 1e-9, framing=f)
                assert abs(got - framed) <= 1e-12 * got
                continue
            assert abs(got - closed(p, 1e6, 10e-6, 1e-9, 2e-10)) <= 1e-12 * got


@settings(max_examples=60, deadline=None)
@given(scheme=st.sampled_from(["psgd", "async_avg", "gather_scatter", "allreduce", "ddp",
                               "mpi_allreduce", "ps_sync", "ps_async", "horovod"]),
       hosts=st.integers(1, 4), per_host=st.integers(1, 3), packed=st.booleans(),
       gbit=st.sampled_from([0.1, 1.0, 25.0]), latency_us=st.sampled_from([1.0, 50.0]),
       params=st.sampled_from([2_000, 200_000, 2_000_000]))
def test_where_auto_takes_analytic_it_is_the_message_model(scheme, hosts, per_host, packed,
                                                           gbit, latency_us, params):
    """Whole runs with a core per rank (and per server): wherever ``auto`` picks the
    analytic fidelity, it gives the message model's time within 2%."""
    p = hosts * per_host
    cluster = Cluster(hosts=hosts, cores_per_host=per_host + 1,
                      link=Link(gbit * 1e9 / 8, latency_us * 1e-6) if hosts > 1 else None,
                      placement="packed" if packed else "round_robin", ranks_per_host=per_host)
    prof = make_profile(cores=per_host + 1, gamma_s_per_byte=1e-10,
                        layer_param_counts=(params // 2, params - params // 2))
    work = Workload(model="toy", iterations=4)
    auto, message = (simulate(SchemeConfig(scheme, fidelity=f, engine="des", avg_every=2), p,
                              work, cluster, prof) for f in ("auto", "message"))
    if auto.fidelity == "analytic":
        assert abs(auto.time_s / message.time_s - 1) <= 0.02, (auto.time_s, message.time_s)
    else:
        assert auto.time_s == message.time_s


@pytest.mark.parametrize("p", [2, 3, 4, 5, 8, 13, 16, 32])
@pytest.mark.parametrize("n_bytes", [4e3, 1e6, 4e7])
def test_tree_on_its_own_hosts_is_its_closed_form(p, n_bytes):
    """NCCL's double binary tree, one rank per host: with P a power of two (balanced
    trees) the messages take exactly the closed form's rounds (each a latency and its
    busiest NIC direction's chunks); otherwise subtrees of different heights let some
    ranks run ahead of the round, and the closed form is an upper bound within 10%."""
    link, shm = Link(1e9, 10e-6), Transport("nccl", 1e-6, 1e-10, 2e-11)
    routes = Routes(tuple(range(p)), link, shm)
    closed = cf.tree_allreduce_s(p, n_bytes, 10e-6, 1e-9, 2e-11)
    message = message_time_s("allreduce", tuple(range(p)), n_bytes, routes, shm, "tree")
    if p & (p - 1) == 0:
        assert message == pytest.approx(closed, rel=1e-9)
    else:
        assert message <= closed * (1 + 1e-9) and closed <= 1.10 * message, (message, closed)


@pytest.mark.parametrize("hosts,local", [(1, 4), (2, 2), (3, 4), (5, 3)])
@pytest.mark.parametrize("n_bytes", [4e3, 4e7])
def test_hierarchical_with_a_nic_per_local_rank_is_its_closed_form(hosts, local, n_bytes):
    """L ranks per host with L NICs: the L cross-host rings do not share a NIC, so the
    messages take the contention-free closed form, and so does the analytic fidelity."""
    intra, link = Link(20e9, 3e-6), Link(3e9, 7e-6)
    cluster = Cluster(hosts=hosts, cores_per_host=local, link=link if hosts > 1 else None,
                      placement="packed", hardware=Hardware(intra=intra, nics=local))
    shm = Transport("nccl", 1e-6, 1e-10, 2e-11)
    ranks = tuple(range(hosts * local))
    routes = FabricRoutes(cluster.placement_of(len(ranks)), cluster, shm)
    closed = cf.hierarchical_allreduce_s(len(ranks), n_bytes, local, 3e-6, 1 / 20e9, 7e-6,
                                         1 / 3e9, 2e-11)
    message = message_time_s("allreduce", ranks, n_bytes, routes, shm, "hierarchical")
    analytic = collective_time_s("allreduce", ranks, n_bytes, routes, 2e-11, "hierarchical")
    assert message == pytest.approx(closed, rel=1e-9)
    assert analytic == pytest.approx(closed, rel=1e-9)


def test_double_binary_trees_are_trees_with_disjoint_inner_ranks():
    for p in range(2, 200):
        for parents in cf.double_tree(cf.singletons(p)):
            assert sum(1 for x in parents if x < 0) == 1
            assert max(sum(1 for x in parents if x == r) for r in range(p)) <= 2
        first, second = cf.double_tree(cf.singletons(p))
        both = {x for x in first if x >= 0} & {x for x in second if x >= 0}
        assert len(both) <= p % 2, (p, both)


def test_bus_bandwidth_is_nccl_tests():
    """nccl-tests: busbw = algbw * 2(n-1)/n; a ring of n ranks moves 2(n-1)/n of the data
    through every link, so its bus bandwidth is the link's when latency is nothing."""
    p, n, bw = 8, 1e9, 10e9
    t = cf.ring_allreduce_s(p, n, 0.0, 1 / bw)
    assert cf.bus_bandwidth(n, t, p) == pytest.approx(bw)


def test_acknowledgements_take_their_share_of_a_two_way_exchange():
    """Both directions of a link carry n bytes: each also carries the other's ACKs, so each
    message takes n (1 + ack_share) / B; one way alone it takes n / B (the reverse is idle)."""
    b, n = 2.5e6, 4.8e6
    routes = Routes((0, 1), Link(b, 0.0, ack_share=ACK_SHARE), Transport("mpi", 1e-6, 1e-10))
    both = message_time_s("allreduce", (0, 1), 2 * n, routes, routes.shm, "recursive_doubling")
    assert both == pytest.approx(2 * n * (1 + ACK_SHARE) / b, rel=1e-9)
    assert collective_time_s("allreduce", (0, 1), 2 * n, routes, 0.0,
                             "recursive_doubling") == pytest.approx(both, rel=1e-9)
    assert collective_time_s("gather", (0, 1), n, routes, 0.0) == pytest.approx(n / b)
