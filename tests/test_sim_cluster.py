"""Emulated clusters in the simulator: hosts with their own links but one shared pool of cores."""
from __future__ import annotations

import pytest

from simulator.compare import cluster_of
from simulator.model.comm import closed_forms as cf
from contracts.checks import ConfigError
from contracts.cluster import Cluster, Link, load_cluster
from contracts.workload import Workload
from simulator.engine import simulate
from simulator.model.config import SchemeConfig
from simulator.testing import make_profile

LINK = Link(bandwidth_bytes_per_s=1e9, latency_s=1e-5)
ITER = 5


def wl() -> Workload:
    return Workload(model="toy", iterations=ITER)


def four_hosts(shared: bool, cores: int = 2) -> Cluster:
    return Cluster(hosts=4, cores_per_host=cores, link=LINK, shared_cores=shared)


@pytest.mark.parametrize("engine", ["des", "fast"])
def test_four_hosts_sharing_two_cores_compute_at_half_speed(engine):
    prof = make_profile(cores=2)
    step_s = prof.models[0].step_fit(1).step_s(64)
    cfg = SchemeConfig("psgd", avg_every=0, engine=engine)
    alone = simulate(cfg, 4, wl(), four_hosts(shared=False), prof)
    shared = simulate(cfg, 4, wl(), four_hosts(shared=True), prof)
    assert alone.compute_s == pytest.approx(ITER * step_s, rel=1e-9)
    assert shared.compute_s == pytest.approx(2 * ITER * step_s, rel=1e-9)   # 4 threads, 2 cores
    # the network is unchanged: one allreduce across 4 hosts at the end, in both
    assert shared.time_s - shared.compute_s == pytest.approx(alone.time_s - alone.compute_s,
                                                             rel=1e-9)


def test_shared_cores_no_slowdown_while_cores_suffice():
    prof = make_profile(cores=4)
    step_s = prof.models[0].step_fit(1).step_s(64)
    r = simulate("mpi_allreduce", 4, wl(), four_hosts(shared=True, cores=4), prof)
    assert r.compute_s == pytest.approx(ITER * step_s, rel=1e-9)


def test_shared_cores_link_per_host_kept():
    """Each host still has its own NIC: a ring allreduce costs the link's closed form."""
    prof = make_profile(cores=8, gamma_s_per_byte=0.0)
    n = prof.models[0].grad_bytes
    r = simulate(SchemeConfig("mpi_allreduce", algorithm="ring", fidelity="message"), 4, wl(),
                 four_hosts(shared=True, cores=8), prof)
    expect = cf.ring_allreduce_s(4, n, LINK.latency_s, 1 / LINK.bandwidth_bytes_per_s, 0.0)
    assert r.comm_s / ITER == pytest.approx(expect, rel=1e-6)


@pytest.mark.parametrize("scheme", ["gather_scatter", "allreduce", "mpi_allreduce", "psgd"])
def test_fast_path_equals_des_with_shared_cores(scheme):
    prof = make_profile(cores=2, spread_cv=0.3)
    c = Cluster(hosts=3, cores_per_host=2, link=LINK, shared_cores=True)
    fast = simulate(SchemeConfig(scheme, engine="fast"), 3, wl(), c, prof, seed=5)
    des = simulate(SchemeConfig(scheme, engine="des", fidelity="analytic"), 3, wl(), c, prof,
                   seed=5)                 # (auto: gather_scatter's messages between hosts)
    assert fast.time_s == pytest.approx(des.time_s, rel=1e-9)
    assert fast.compute_s == pytest.approx(des.compute_s, rel=1e-9)


def test_ps_sync_server_shares_the_pool():
    """The server's host draws from the same cores: the server is slower than alone only
    while workers compute, and never faster than with its own cores."""
    prof = make_profile(cores=2)
    own = simulate(SchemeConfig("ps_sync", engine="des"), 4, wl(),
                   Cluster(hosts=5, cores_per_host=2, link=LINK), prof)
    shared = simulate(SchemeConfig("ps_sync", engine="des"), 4, wl(),
                      Cluster(hosts=5, cores_per_host=2, link=LINK, shared_cores=True), prof)
    assert shared.time_s > own.time_s


def test_cluster_toml_reads_shared_cores(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('[cluster]\nhosts = 4\ncores_per_host = 2\nshared_cores = true\n'
                 '[link]\nbandwidth = "200mbit"\nlatency = "50us"\n')
    c = load_cluster(f)
    assert c.shared_cores and c.core_pools == 1 and c.core_pool_of(3) == 0
    f.write_text('[cluster]\nhosts = 4\ncores_per_host = 2\nshared_cores = "yes"\n'
                 '[link]\nbandwidth = "200mbit"\nlatency = "50us"\n')
    with pytest.raises(ConfigError, match="shared_cores"):
        load_cluster(f)


def test_compare_marks_emulated_records_as_shared():
    rec = {"environment": {"cores": 2, "cluster": {
        "namespaces": ["psgd-h0", "psgd-h1", "psgd-h2"], "bandwidth_bits_per_s": 200_000_000}}}
    c = cluster_of(rec)
    assert c.hosts == 3 and c.shared_cores and c.cores_per_host == 2
    assert c.link.bandwidth_bytes_per_s == 25e6
    assert not cluster_of({"environment": {"cores": 2}}).shared_cores
