"""NCCL's LL protocol: its closed form, its messages, the tuner's choice, and its cluster keys."""
from __future__ import annotations

from dataclasses import replace

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.model.comm import closed_forms as cf
from contracts.checks import ConfigError
from contracts.cluster import Cluster, Device, Hardware, Link, LowLatency, load_cluster
from contracts.profile import Transport
from contracts.workload import Workload
from simulator.engine import simulate
from simulator.model.comm import MessageComm
from simulator.model.comm.choice import resolve_algorithm
from simulator.model.comm.costs import collective_time_s
from simulator.model.config import SchemeConfig
from simulator.model.fabric import FabricRoutes
from simulator.model.recorder import Recorder
from simulator.testing import make_profile

# NCCL 2.5.6's ring LL numbers (src/graph/tuning.cc), as the presets carry them
LL = LowLatency(call_latency_s=3.6e-6, intra_latency_s=1.0e-6, link_latency_s=0.9e-6,
                bandwidth_share=0.25)
NCCL = Transport("nccl", 5.7e-6, 1 / 11.7e9, 0.0, call_latency_s=8.4e-6)


def fabric(hosts, per_host, gbit=25.0, nics=1, protocol="auto", ll=LL, leaf=0, call_us=8.4):
    hw = Hardware(device=Device("Tesla P100 PCIe", 9.3e12), intra=Link(11.7e9, 5.7e-6),
                  nics=nics, call_latency_s=call_us * 1e-6, ll=ll, protocol=protocol,
                  topology="two_tier" if leaf else "switch", hosts_per_leaf=leaf,
                  oversubscription=2.0)
    return Cluster(hosts=hosts, cores_per_host=per_host,
                   link=Link(gbit * 1e9 / 8, 6.6e-6) if hosts > 1 else None,
                   placement="packed", hardware=hw)


def routes_of(cluster: Cluster) -> FabricRoutes:
    p = cluster.hosts * cluster.cores_per_host
    return FabricRoutes(cluster.placement_of(p), cluster, NCCL)


def message_time_s(ranks, n_bytes, routes, algorithm) -> float:
    """The call's messages on the simulated network, its library latency included."""
    env = simpy.Environment()
    comm = MessageComm(env, routes, NCCL, Recorder(routes.placement))
    ends = []

    def rank(r):
        yield from comm.allreduce(r, ranks, n_bytes, algorithm)
        ends.append(env.now)
    for r in ranks:
        env.process(rank(r))
    env.run()
    return max(ends)


@pytest.mark.parametrize("p", [2, 3, 8, 17])
@pytest.mark.parametrize("n_bytes", [4e3, 1e6, 6.4e7])
def test_ll_ring_on_its_own_hosts_is_its_closed_form(p, n_bytes):
    """One rank per host: 2(P - 1) steps, each the LL step latency and n/P bytes at a
    quarter of the NIC's bandwidth, after the LL call latency; both fidelities."""
    cluster = fabric(hosts=p, per_host=1, protocol="ll")
    routes = routes_of(cluster)
    ranks = tuple(range(p))
    closed = cf.ring_allreduce_s(p, n_bytes / 0.25, 0.9e-6, 8 / 25e9)
    assert resolve_algorithm("nccl", "ring", ranks, n_bytes, routes) == "ring_ll"
    assert collective_time_s("allreduce", ranks, n_bytes, routes, 0.0, "ring_ll") == \
        pytest.approx(closed, rel=1e-12)
    assert message_time_s(ranks, n_bytes, routes, "ring") == pytest.approx(closed + 3.6e-6,
                                                                          rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(hosts=st.integers(1, 5), per_host=st.integers(1, 4), nics=st.integers(1, 2),
       leaf=st.sampled_from([0, 2]), gbit=st.sampled_from([10.0, 25.0, 200.0]),
       n_bytes=st.sampled_from([64.0, 4096.0, 1e6, 4e7]))
def test_analytic_ll_ring_is_the_message_model(hosts, per_host, nics, leaf, gbit, n_bytes):
    """Shared NICs, device links inside hosts, oversubscribed leaves: the LL ring's closed
    form on the placement is its messages on the network within 2%."""
    cluster = fabric(hosts, per_host, gbit=gbit, nics=nics, protocol="ll", leaf=leaf,
                     call_us=0.0)
    routes = routes_of(cluster)
    ranks = tuple(range(hosts * per_host))
    if len(ranks) < 2:
        return
    analytic = collective_time_s("allreduce", ranks, n_bytes, routes, 0.0, "ring_ll")
    message = message_time_s(ranks, n_bytes, routes, "ring") - LL.call_latency_s
    assert abs(analytic / message - 1) <= 0.02, (analytic, message)


def test_auto_runs_ll_below_the_break_even_size_and_simple_above():
    """The tuner's choice on the closed forms: LL saves 2(P - 1)(5.7 (or 6.6) - 1.0 (or
    0.9)) us and 4.8 us a call and costs 3 n 2(P - 1)/P more bytes' time: between hosts
    with 512 ranks the sizes cross where those are equal."""
    cluster = fabric(hosts=128, per_host=4)
    routes = routes_of(cluster)
    ranks = tuple(range(512))
    a, b = routes.group_params(ranks)
    a_ll, _ = routes.ll_routes.group_params(ranks)
    saved_s = 8.4e-6 - 3.6e-6 + 2 * 511 * (a - a_ll)
    break_even = saved_s / (3 * b * 2 * 511 / 512)
    assert resolve_algorithm("nccl", "ring", ranks, 0.9 * break_even, routes) == "ring_ll"
    assert resolve_algorithm("nccl", "ring", ranks, 1.1 * break_even, routes) == "ring"
    assert 2e6 < break_even < 4e6                      # about 3 MB at 25 Gbit/s


@pytest.mark.parametrize("protocol,ll,expect", [
    ("simple", LL, "ring"), ("ll", LL, "ring_ll"), ("auto", None, "ring")])
def test_the_protocol_setting_is_obeyed(protocol, ll, expect):
    routes = routes_of(fabric(hosts=4, per_host=2, protocol=protocol, ll=ll))
    for n_bytes in (64.0, 1e9):
        assert resolve_algorithm("nccl", "ring", tuple(range(8)), n_bytes, routes) == expect


def fabric_with(protocol, hosts, per_host, thread_bytes=32.0, threshold=16384.0):
    base = fabric(hosts=hosts, per_host=per_host)
    return replace(base, hardware=replace(base.hardware, protocol=protocol,
                                          ll_thread_bytes=thread_bytes,
                                          ll_threshold_bytes=threshold))


def test_nccl_2_2_runs_ll_up_to_its_fixed_threshold_whatever_p():
    """NCCL 2.1-2.2: NCCL_LL_THRESHOLD, 16 KiB by default, on 8 ranks as on 512."""
    for hosts, per_host in ((2, 4), (128, 4)):
        routes = routes_of(fabric_with("nccl-2.2", hosts, per_host))
        ranks = tuple(range(hosts * per_host))
        assert resolve_algorithm("nccl", "ring", ranks, 16384, routes) == "ring_ll"
        assert resolve_algorithm("nccl", "ring", ranks, 16385, routes) == "ring"
    routes = routes_of(fabric_with("nccl-2.2", 2, 4, threshold=1e6))
    assert resolve_algorithm("nccl", "ring", tuple(range(8)), 9e5, routes) == "ring_ll"


@pytest.mark.parametrize("hosts,per_host,channels", [(1, 4, 1), (2, 4, 1), (128, 4, 1),
                                                      (16, 8, 2)])
def test_nccl_2_3_runs_ll_up_to_its_per_rank_and_ring_threshold(hosts, per_host, channels):
    """NCCL 2.3-2.4: 256 threads x threadThreshold bytes per rank and ring, the threshold
    doubled across nodes: on Pascal 8 KiB per rank and ring in one node, 16 KiB across."""
    base = fabric_with("nccl-2.3", hosts, per_host)
    routes = routes_of(replace(base, hardware=replace(base.hardware, channels=channels)))
    p = hosts * per_host
    limit = p * channels * 256 * 32 * (2 if hosts > 1 else 1)
    ranks = tuple(range(p))
    assert resolve_algorithm("nccl", "ring", ranks, limit, routes) == "ring_ll"
    assert resolve_algorithm("nccl", "ring", ranks, limit + 1, routes) == "ring"
    if hosts == 128:
        assert limit == 8 * 2**20                   # 8 MiB at 512 GPUs, one ring


def test_a_release_rule_needs_its_settings():
    with pytest.raises(ConfigError, match="needs ll_thread_threshold"):
        fabric_with("nccl-2.3", 2, 4, thread_bytes=0.0)
    with pytest.raises(ConfigError, match="needs the LL protocol's costs"):
        fabric(hosts=2, per_host=4, protocol="nccl-2.2", ll=None)


def test_trees_and_hierarchical_run_simple():
    routes = routes_of(fabric(hosts=4, per_host=2, protocol="ll"))
    ranks = tuple(range(8))
    assert resolve_algorithm("nccl", "tree", ranks, 64.0, routes) == "tree"
    assert resolve_algorithm("nccl", "hierarchical", ranks, 64.0, routes) == "hierarchical"


def gpu_profile():
    return make_profile(layer_param_counts=(200_000, 50_000, 4_000), step_intercept_s=0.0,
                        step_s_per_sample=0.002)


@pytest.mark.parametrize("p,hosts", [(4, 1), (8, 2), (12, 3)])
def test_horovod_fast_path_is_the_simpy_model_with_ll(p, hosts):
    cluster = fabric(hosts=hosts, per_host=p // hosts)
    work = Workload(model="toy", batch_per_worker=16, iterations=5)
    runs = [simulate(SchemeConfig("horovod", algorithm="ring", engine=e, cycle_s=0.004,
                                  fusion_bytes=300_000), p, work, cluster, gpu_profile())
            for e in ("fast", "des")]
    assert runs[0].engine == "fast" and runs[1].engine == "des"
    assert runs[0].time_s == pytest.approx(runs[1].time_s, rel=1e-9)


def test_ll_makes_small_allreduces_on_many_hosts_faster():
    """Small tensors over 16 hosts are latency-bound: LL's shorter steps win."""
    work = Workload(model="toy", batch_per_worker=16, iterations=4)
    simple, auto = (simulate(SchemeConfig("allreduce", algorithm="ring"), 64, work,
                             fabric(hosts=16, per_host=4, protocol=proto), gpu_profile())
                    for proto in ("simple", "auto"))
    assert auto.time_s < simple.time_s


CLUSTER = '''[cluster]
hosts = 2
devices_per_host = 4
[device]
name = "Tesla P100 PCIe"
flops = "9.3TFLOP/s"
[intra]
bandwidth = "11.7GB/s"
latency = "5.7us"
[link]
bandwidth = "25gbit"
latency = "6.6us"
[nccl]
call_latency = "8.4us"
'''
LL_KEYS = ('ll_call_latency = "3.6us"\nll_intra_latency = "1us"\nll_link_latency = "0.9us"\n'
           'll_bandwidth_share = 0.25\n')


def test_a_cluster_file_prices_the_ll_protocol(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text(CLUSTER + LL_KEYS + 'protocol = "ll"\n')
    hw = load_cluster(f).hardware
    assert hw.ll == LL and hw.protocol == "ll"
    f.write_text(CLUSTER)
    assert load_cluster(f).hardware.ll is None


@pytest.mark.parametrize("extra,words", [
    ('ll_call_latency = "3.6us"\n', "add ll_intra_latency, ll_link_latency, ll_bandwidth_share"),
    ('protocol = "ll"\n', "needs the LL protocol's costs"),
    ('protocol = "ll256"\n', "unknown NCCL protocol 'll256'"),
    ('protocol = "ll128"\n', "needs the LL128 protocol's costs"),
    (LL_KEYS.replace("0.25", "1.5"), "ll_bandwidth_share must be in (0, 1]"),
    (LL_KEYS.replace('"0.9us"', '"-1us"'), "nccl.ll_link_latency"),
    (LL_KEYS + 'protocol = "nccl-2.3"\n', "needs ll_thread_threshold in [nccl]"),
    (LL_KEYS + 'll_threshold = "16"\n', "nccl.ll_threshold"),
])
def test_bad_ll_settings_are_named(tmp_path, extra, words):
    f = tmp_path / "c.toml"
    f.write_text(CLUSTER + extra)
    with pytest.raises(ConfigError) as e:
        load_cluster(f)
    assert str(f) in str(e.value) and words in str(e.value), str(e.value)


def test_a_cluster_file_names_a_release_rule(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text(CLUSTER + LL_KEYS + 'protocol = "nccl-2.3"\nll_thread_threshold = "64B"\n')
    hw = load_cluster(f).hardware
    assert hw.protocol == "nccl-2.3" and hw.ll_thread_bytes == 64
    f.write_text(CLUSTER + LL_KEYS + 'protocol = "nccl-2.2"\nll_threshold = "1MiB"\n')
    hw = load_cluster(f).hardware
    assert hw.ll_threshold_bytes == 2**20 and hw.ll_by_size(2**20, 8, True)


def test_a_fitted_cluster_keeps_the_ll_protocol(tmp_path):
    """``calibrate.fit`` moves the Simple latencies; the protocol and the LL costs of the
    starting point reach the fitted cluster file unchanged."""
    from contracts.cluster import load_preset
    from contracts.tomlw import dumps
    from simulator.fit_timings import _nccl_kept
    hw = load_preset("pascal-pcie-25gbe").hardware
    f = tmp_path / "c.toml"
    f.write_text(CLUSTER + dumps(_nccl_kept(hw)))
    kept = load_cluster(f).hardware
    assert kept.ll == hw.ll and kept.protocol == hw.protocol == "auto"


@pytest.mark.parametrize("protocol", ["nccl-2.2", "nccl-2.3"])
def test_a_fitted_cluster_keeps_a_release_rule(tmp_path, protocol):
    from contracts.cluster import load_preset
    from contracts.tomlw import dumps
    from simulator.fit_timings import _nccl_kept
    hw = replace(load_preset("pascal-pcie-25gbe").hardware, protocol=protocol,
                 ll_threshold_bytes=65536.0)
    f = tmp_path / "c.toml"
    f.write_text(CLUSTER + dumps(_nccl_kept(hw)))
    kept = load_cluster(f).hardware
    assert kept.protocol == protocol
    assert kept.ll_by_size(65536, 512, True) == hw.ll_by_size(65536, 512, True)
    assert kept.ll_by_size(8 * 2**20, 512, True) == hw.ll_by_size(8 * 2**20, 512, True)
