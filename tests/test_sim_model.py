"""The simulator against closed forms and invariants (deterministic, small, fast)."""
from __future__ import annotations

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from libraries import mpich
from contracts.cluster import calibrated_cluster
from simulator.model.comm import closed_forms as cf
from contracts.checks import ConfigError
from contracts.cluster import Cluster, Link
from contracts.profile import Transport
from contracts.workload import Workload
from simulator.engine import simulate
from simulator.model.comm import MessageComm
from simulator.model.config import Heterogeneity, SchemeConfig
from simulator.model.hardware.host import Host
from simulator.model.network import Routes
from simulator.model.recorder import Recorder
from simulator.testing import make_profile

ALPHA, BETA = 1e-5, 1e-9
LINK = Link(bandwidth_bytes_per_s=1 / BETA, latency_s=ALPHA)
SYNC = ("psgd", "gather_scatter", "allreduce", "ddp", "mpi_allreduce", "ps_sync")
FAST = tuple(s for s in SYNC if s != "ps_sync")    # ps_sync workers start one by one


def one_per_host(p: int, cores: int = 1) -> Cluster:
    return Cluster(hosts=p, cores_per_host=cores, link=LINK)


def wl(iterations: int = 6) -> Workload:
    return Workload(model="toy", iterations=iterations)


# ------------------------------------------------------------------ determinism, P = 1

def test_same_seed_same_result_other_seed_differs():
    prof = make_profile(spread_cv=0.2)
    het = Heterogeneity(speed_cv=0.3, stragglers=1)
    cfg = SchemeConfig("ps_async", fidelity="message")
    a = simulate(cfg, 4, wl(20), calibrated_cluster(prof.cores), prof, seed=3, heterogeneity=het)
    b = simulate(cfg, 4, wl(20), calibrated_cluster(prof.cores), prof, seed=3, heterogeneity=het)
    c = simulate(cfg, 4, wl(20), calibrated_cluster(prof.cores), prof, seed=4, heterogeneity=het)
    assert a == b
    assert a.time_s != c.time_s


@pytest.mark.parametrize("scheme", ("serial", "hogwild") + SYNC)
def test_one_worker_takes_the_compute_time(scheme):
    prof = make_profile()
    step_s = prof.models[0].step_fit(1).step_s(64)
    r = simulate(scheme, 1, wl(7), calibrated_cluster(prof.cores), prof)
    extra = 0.0
    if scheme == "hogwild":
        extra = 7 * 2 * prof.models[0].grad_bytes * BETA
    if scheme == "ps_sync":      # P = 1 means one worker plus the server: not compute alone
        assert r.time_s > 7 * step_s
        return
    assert r.time_s == pytest.approx(7 * step_s + extra, rel=1e-12)
    assert r.compute_s == pytest.approx(r.time_s, rel=1e-12)


# ------------------------------------------------------------------ processor sharing

def run_jobs(cores: int, works: list[float], slowdown=None, threads: int = 1) -> list[float]:
    env = simpy.Environment()
    prof = make_profile(cores=cores, sharing_slowdown=slowdown)
    host = Host(env, 0, cores, prof.sharing_efficiency)
    finish = [None] * len(works)

    def job(i, w):
        yield host.compute(w, threads)
        finish[i] = env.now
    for i, w in enumerate(works):
        env.process(job(i, w))
    env.run()
    return finish


@pytest.mark.parametrize("k,cores", [(1, 2), (2, 2), (3, 2), (8, 2), (5, 4), (16, 3)])
def test_k_equal_jobs_on_c_cores_share_them(k, cores):
    finish = run_jobs(cores, [1.0] * k)
    assert finish == pytest.approx([1.0 / min(1.0, cores / k)] * k, rel=1e-12)


def test_unequal_jobs_follow_processor_sharing():
    # 2 cores, jobs 1, 2, 3: 3 share until t=1.5 (job 1 done), then 2 run at full speed
    assert run_jobs(2, [1.0, 2.0, 3.0]) == pytest.approx([1.5, 2.5, 3.5], rel=1e-12)


def test_measured_sharing_slowdown_is_applied():
    # 4 processes on 2 cores measured 2.5x slower each (ideal 2x): efficiency 0.8
    finish = run_jobs(2, [1.0] * 4, slowdown={1: 1.0, 4: 2.5})
    assert finish == pytest.approx([2.5] * 4, rel=1e-12)


def test_threads_count_as_sharers():
    assert run_jobs(4, [1.0, 1.0], threads=4) == pytest.approx([2.0, 2.0], rel=1e-12)


# ------------------------------------------------------------------ message model vs closed forms

def run_collective(kind, p, n_bytes, algorithm="ring", gamma=0.0, placement=None, root=0):
    env = simpy.Environment()
    placement = placement or tuple(range(p))
    link = LINK if len(set(placement)) > 1 else None
    routes = Routes(placement, link, Transport("mpi", ALPHA, BETA, gamma))
    rec = Recorder(placement)
    comm = MessageComm(env, routes, Transport("mpi", ALPHA, BETA, gamma), rec)
    ranks, ends = tuple(range(p)), []

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


@pytest.mark.parametrize("p", [2, 3, 4, 5, 7, 8, 16])
@pytest.mark.parametrize("gamma", [0.0, 3e-10])
def test_ring_allreduce_message_model_is_the_closed_form(p, gamma):
    n = 4 * 2**20
    expected = 2 * (p - 1) * ALPHA + 2 * (p - 1) / p * n * BETA + (p - 1) / p * n * gamma
    assert run_collective("allreduce", p, n, "ring", gamma) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("algorithm", ["recursive_doubling", "reduce_scatter_allgather"])
@pytest.mark.parametrize("p", [2, 3, 4, 6, 8, 13])
def test_other_allreduces_match_their_closed_forms(algorithm, p):
    n = 2**20
    expected = cf.ALLREDUCE[algorithm](p, n, ALPHA, BETA, 2e-10)
    assert run_collective("allreduce", p, n, algorithm, 2e-10) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("p", [2, 3, 4, 5])
def test_release_gather_matches_its_closed_form_for_one_level_trees(p):
    n = 2**20
    expected = 2 * ALPHA + 2 * (p - 1) * n * BETA + (p - 1) * n * 2e-10
    assert cf.release_gather_allreduce_s(p, n, ALPHA, BETA, 2e-10) == pytest.approx(expected)
    shm = tuple([0] * p)                             # one host: shared memory
    assert run_collective("allreduce", p, n, "release_gather", 2e-10, placement=shm) == \
        pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("p", [6, 9, 16, 21, 40])
def test_release_gather_closed_form_bounds_deeper_trees(p):
    """Beyond one level the form charges every level a full parent: an upper bound."""
    n = 2**18
    msg = run_collective("allreduce", p, n, "release_gather", 2e-10, placement=tuple([0] * p))
    bound = cf.release_gather_allreduce_s(p, n, ALPHA, BETA, 2e-10)
    assert bound / 1.6 < msg <= bound * (1 + 1e-9)


def test_kary_depth():
    assert [cf.kary_depth(p, 4) for p in (1, 2, 5, 6, 21, 22)] == [0, 1, 1, 2, 2, 3]
    assert cf.kary_depth(65, 64) == 1 and cf.kary_depth(66, 64) == 2


def test_auto_allreduce_is_mpichs_choice():
    """MPICH 5.0's choice (``libraries.mpich.choose_allreduce``): the MPIR level on one host
    (release/gather needs a single-threaded MPI; mpi4py's is MULTIPLE) and with one rank
    per host; ch4's composition ``smp`` over several hosts with several ranks on some."""
    assert mpich.choose_allreduce("auto", 4e4, 4, hosts=1) == "reduce_scatter_allgather"
    assert mpich.choose_allreduce("auto", 4e4, 4, hosts=4) == "reduce_scatter_allgather"
    assert mpich.choose_allreduce("auto", 4e4, 4) == "reduce_scatter_allgather"
    assert mpich.choose_allreduce("auto", 4e4, 8, hosts=2) == "smp"
    assert mpich.choose_allreduce("auto", 4e4, 5, hosts=2) == "smp"
    # recursive doubling up to 8 bytes, or for fewer float32 elements than pof2(P)
    assert mpich.choose_allreduce("auto", 8, 4, hosts=1) == "recursive_doubling"
    assert mpich.choose_allreduce("auto", 12, 4, hosts=1) == "recursive_doubling"
    assert mpich.choose_allreduce("auto", 16, 4, hosts=1) == "reduce_scatter_allgather"
    assert mpich.choose_allreduce("auto", 4 * 15, 16) == "recursive_doubling"
    assert mpich.choose_allreduce("auto", 4 * 16, 16) == "reduce_scatter_allgather"
    assert mpich.choose_allreduce("ring", 4e4, 4, hosts=1) == "ring"
    # a forced Rabenseifner falls back to auto below pof2 elements (size-ge-pof2)
    assert mpich.choose_allreduce("reduce_scatter_allgather", 4 * 7, 8) == "recursive_doubling"


def test_the_mpir_level_choices_of_reduce_and_broadcast():
    assert mpich.mpir_reduce_choice(2048, 4) == "binomial"
    assert mpich.mpir_reduce_choice(2052, 4) == "reduce_scatter_gather"
    assert mpich.mpir_bcast_choice(4e6, 7) == "binomial"
    assert mpich.mpir_bcast_choice(12288, 8) == "binomial"
    assert mpich.mpir_bcast_choice(2**19, 8) == "scatter_recursive_doubling_allgather"
    assert mpich.mpir_bcast_choice(2**19 + 4, 8) == "scatter_ring_allgather"
    assert mpich.mpir_bcast_choice(2**14, 12) == "scatter_ring_allgather"


def test_auto_allreduce_on_one_host_pays_the_hand_off_once_per_step():
    """Four polling ranks on one oversubscribed host: MPICH runs Rabenseifner's allreduce
    over shared memory (mpi4py's MPI is multi-threaded), so a call waits 2 log2(4) h for
    its ranks' turns."""
    from simulator.model.comm import AnalyticComm
    h, n, p = 1e-3, 4e4, 4

    def call_s(placement, link):
        env = simpy.Environment()
        t = Transport("mpi", ALPHA, BETA)
        comm = AnalyticComm(env, Routes(placement, link, t, (h,) * p), t, Recorder(placement))
        ranks = tuple(range(p))               # one group: the same tuple for every rank
        for r in ranks:
            env.process(comm.allreduce(r, ranks, n, "auto"))
        env.run()
        return env.now
    assert call_s((0,) * p, None) == pytest.approx(4 * (ALPHA + h) + 1.5 * n * BETA)
    across = call_s((0, 0, 1, 1), LINK)
    # two hosts of two ranks: MPICH's composition, a reduce to each host's first rank
    # (2 h), Rabenseifner between them across the link (2 h), a broadcast (h)
    a_l, b_l = LINK.latency_s, 1 / LINK.bandwidth_bytes_per_s
    expect = (3 * (ALPHA + h) + 2 * n * BETA) + 2 * (a_l + h) + n * b_l
    assert across == pytest.approx(expect)


@pytest.mark.parametrize("kind,closed", [("gather", cf.gather_s), ("scatter", cf.scatter_s),
                                         ("bcast", cf.binomial_bcast_s)])
@pytest.mark.parametrize("p", [2, 3, 5, 8])
def test_rooted_collectives_match_closed_forms(kind, closed, p):
    n = 2**18
    assert run_collective(kind, p, n) == pytest.approx(closed(p, n, ALPHA, BETA), rel=1e-9)


def test_incast_at_a_root_grows_linearly_with_senders():
    n = 2**20
    times = [run_collective("gather", p + 1, n) for p in (1, 2, 4, 8, 16)]
    per_sender = [(t - ALPHA) / p for t, p in zip(times, (1, 2, 4, 8, 16))]
    assert per_sender == pytest.approx([n * BETA] * 5, rel=1e-9)


def test_shared_nic_is_congested():
    # 4 ranks on 2 hosts, round robin: every ring message crosses hosts, 2 share each NIC
    n = 2**22
    free = run_collective("allreduce", 4, n, placement=(0, 1, 2, 3))
    shared = run_collective("allreduce", 4, n, placement=(0, 1, 0, 1))
    assert shared > 1.9 * free - 12 * ALPHA


def test_ps_incast_time_grows_linearly_with_workers():
    """The server sends w to one worker after the other (P (alpha + n beta)); the workers
    start as their w arrives and push it whole (each worker on a host of its own: the
    pushes cross while the server still sends), so only the last one's gradient is still
    on the wire when it is done, and the server copies it out of libfabric's buffer (n at
    the host's copy rate): (P + 1)(alpha + n beta) + copy per iteration, linear in P, and
    after the last iteration the server answers the last pushes: P more sends. At P = 8
    the first w opens the connections to workers 3 and 6, which MPI_Init left closed: 4
    latencies each (the ranks spin, ``polls.connect_s``)."""
    prof = make_profile(cores=1, update_intercept_s=0.0, update_s_per_param=0.0)
    n = prof.models[0].grad_bytes
    step_s = prof.models[0].step_fit(1).step_s(64)
    for p, opened in ((1, 0), (2, 0), (4, 0), (8, 2)):
        r = simulate(SchemeConfig("ps_sync", fidelity="message"), p, wl(3),
                     Cluster(hosts=p + 1, cores_per_host=1, link=LINK), prof)
        per_iteration = (r.time_s - 3 * step_s - p * (ALPHA + n * BETA)
                         - opened * 4 * ALPHA) / 3
        copy_s = n * prof.transports[0].beta_s_per_byte
        assert per_iteration == pytest.approx((p + 1) * (ALPHA + n * BETA) + copy_s, rel=1e-6)


def test_ps_sync_pushes_cross_while_the_server_still_sends():
    """A link so slow that a message takes ten steps: the early workers' pushes cross the
    server's ingress while it still sends w to the later ones (MPICH's ofi netmod hands
    them to libfabric whole, the tcp provider saves them unexpected), so an iteration is
    still step + (P + 1) m + copy, where a push held for the server's receive would queue
    behind the sends."""
    prof = make_profile(cores=1, update_intercept_s=0.0, update_s_per_param=0.0)
    n = prof.models[0].grad_bytes
    step_s = prof.models[0].step_fit(1).step_s(64)
    beta = 10 * step_s / n
    m, p = ALPHA + n * beta, 4
    r = simulate(SchemeConfig("ps_sync", fidelity="message"), p, wl(3),
                 Cluster(hosts=p + 1, cores_per_host=1,
                         link=Link(bandwidth_bytes_per_s=1 / beta, latency_s=ALPHA)), prof)
    per_iteration = (r.time_s - p * m) / 3
    copy_s = n * prof.transports[0].beta_s_per_byte
    assert per_iteration == pytest.approx(step_s + (p + 1) * m + copy_s, rel=1e-6)


# ------------------------------------------------------------------ fast path vs events

@pytest.mark.parametrize("scheme", FAST)
@pytest.mark.parametrize("p", [1, 2, 3, 4, 8])
def test_fast_path_agrees_with_the_event_models(scheme, p):
    prof = make_profile(spread_cv=0.1)
    cfg = SchemeConfig(scheme, avg_every=2, algorithm="auto", bucket_bytes=100_000)
    cluster = one_per_host(p + 1)           # + 1: room for the server
    fast = simulate(SchemeConfig(**{**cfg.__dict__, "engine": "fast"}), p, wl(), cluster, prof, seed=5)
    des = simulate(SchemeConfig(**{**cfg.__dict__, "engine": "des", "fidelity": "analytic"}), p,
                   wl(), cluster, prof, seed=5)      # (auto: gather_scatter's messages between hosts)
    assert (fast.engine, des.engine) == ("fast", "des")
    assert fast.time_s == pytest.approx(des.time_s, rel=1e-9)
    for a, b in zip((fast.compute_s, fast.comm_s, fast.wait_s), (des.compute_s, des.comm_s, des.wait_s)):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-12)
    if scheme in ("psgd", "allreduce", "mpi_allreduce", "ddp"):   # symmetric: no early leavers
        msg = simulate(SchemeConfig(**{**cfg.__dict__, "fidelity": "message"}), p, wl(),
                       cluster, make_profile(spread_cv=0.0), seed=5)
        ref = simulate(SchemeConfig(**{**cfg.__dict__, "engine": "fast"}), p, wl(), cluster,
                       make_profile(spread_cv=0.0), seed=5)
        assert msg.time_s == pytest.approx(ref.time_s, rel=1e-9)


def test_gather_scatter_runs_its_messages_between_hosts_only():
    """Between hosts gloo's scatter drains after the root returns and the gather's notices
    queue behind it (``comm.gloo``): no barrier holds that, so auto picks the messages;
    on one host the closed form stays."""
    prof = make_profile()
    assert simulate("gather_scatter", 4, wl(), one_per_host(4), prof).fidelity == "message"
    assert simulate("gather_scatter", 4, wl(), Cluster(1, 4), prof).fidelity == "analytic"


def test_fast_path_shares_cores_like_the_event_model():
    prof = make_profile(cores=2, spread_cv=0.3, sharing_slowdown={1: 1.0, 2: 1.1, 6: 3.6})
    for scheme in ("mpi_allreduce", "psgd", "gather_scatter"):
        f = simulate(SchemeConfig(scheme, engine="fast", fidelity="analytic"), 6, wl(), calibrated_cluster(prof.cores), prof, seed=1)
        d = simulate(SchemeConfig(scheme, engine="des", fidelity="analytic"), 6, wl(), calibrated_cluster(prof.cores), prof, seed=1)
        assert f.time_s == pytest.approx(d.time_s, rel=1e-9)


def test_large_p_uses_the_fast_path():
    r = simulate("mpi_allreduce", 1024, wl(5), Cluster(128, 8, LINK), make_profile())
    assert r.engine == "fast" and r.time_s > 0


# ------------------------------------------------------------------ schemes

def test_ps_async_staleness_is_about_p_minus_one():
    r = simulate("ps_async", 4, wl(40), one_per_host(5), make_profile(spread_cv=0.05))
    assert 2.5 < r.mean_staleness < 3.5
    assert min(r.staleness) >= 0 and sum(r.staleness.values()) == 4 * 40


def test_async_avg_holder_serves_only_between_rank0s_steps():
    """Rank 0 at half speed (a step 2s), exchange every step. rank 1's push arrives while
    rank 0 computes, so rank 0's next Iprobe misses it (the progress after the miss reads
    it: MPID_Iprobe peeks, then progresses) and serves it one rank-0 step later: during its
    n steps rank 0 serves n/2 pushes (each: receive c, mix m, send c, after its own mix m),
    2ns + nm + n/2 (2c + m); the other n/2 it serves as they come after its last step
    (Irecv and wait), n/2 (s + 2c + m); then rank 1's last weights: c + m."""
    prof, n = make_profile(), 6
    het = Heterogeneity(speed_factors=(0.5, 1.0))
    r = simulate(SchemeConfig("async_avg", avg_every=1), 2, wl(n), Cluster(1, 2), prof,
                 heterogeneity=het)
    s = prof.models[0].step_fit(1).step_s(64)
    m = prof.server.update_s(prof.models[0].param_count)
    c = ALPHA + BETA * 4 * prof.models[0].param_count
    assert r.time_s == pytest.approx(2 * n * s + n * m + n / 2 * (2 * c + m)
                                     + n / 2 * (s + 2 * c + m) + c + m, rel=1e-9)
    # rank 1 spends the rest of its time waiting; it is done before the last mix
    assert r.comm_s_per_worker[1] == pytest.approx(r.time_s - n * s - m, rel=1e-9)
    assert sum(r.staleness.values()) == n


def test_async_avg_pushes_cross_the_holders_port_while_it_computes():
    """One host a rank, one exchange (n = K = 1). The P - 1 pushes leave at s and cross
    into rank 0's host without rank 0 (MPICH hands them to libfabric whole; its tcp
    provider saves them unexpected), sharing its ingress: all are in at s + a + (P - 1) c.
    Rank 0 (its step, its own mix twice, an Iprobe that finds none) then answers each in
    turn, mix and reply: (P - 1)(m + a + c). Each worker's last weights cross while rank 0
    answers the next; the last arrives a + c after the last reply and is mixed: m."""
    prof, p = make_profile(), 4
    r = simulate(SchemeConfig("async_avg", avg_every=1), p, wl(1), one_per_host(p), prof)
    s = prof.models[0].step_fit(1).step_s(64)
    m = prof.server.update_s(prof.models[0].param_count)
    a, c = ALPHA, BETA * 4 * prof.models[0].param_count
    assert 2 * m < a + (p - 1) * c and (p - 2) * m < a + c       # the order this assumes
    assert r.time_s == pytest.approx(s + a + (p - 1) * c + (p - 1) * (m + a + c) + a + c + m,
                                     rel=1e-9)


def test_async_avg_default_every_is_the_real_schemes():
    from real.schemes import async_avg as real_async_avg
    from simulator.model.schemes import holder
    assert holder.DEFAULT_K == real_async_avg.DEFAULT_K


def test_stragglers_slow_synchronous_schemes_down():
    prof = make_profile()
    base = simulate("mpi_allreduce", 4, wl(), one_per_host(4), prof)
    slow = simulate("mpi_allreduce", 4, wl(), one_per_host(4), prof,
                    heterogeneity=Heterogeneity(stragglers=1, straggler_slowdown=2.0))
    assert slow.time_s > 1.5 * base.time_s
    assert slow.wait_s > base.wait_s


def test_hogwild_speedup_is_limited_by_cores():
    prof = make_profile(cores=2)
    t1 = simulate("hogwild", 1, Workload(model="toy", dataset_samples=64 * 64), calibrated_cluster(prof.cores), prof).epoch_s
    t8 = simulate("hogwild", 8, Workload(model="toy", dataset_samples=64 * 64), calibrated_cluster(prof.cores), prof).epoch_s
    assert t1 / t8 == pytest.approx(2.0, rel=0.15)


def test_schemes_that_cannot_run_are_refused():
    prof = make_profile()
    with pytest.raises(ConfigError, match="hogwild"):
        simulate("hogwild", 4, wl(), one_per_host(2), prof)
    with pytest.raises(ConfigError, match="workers"):
        simulate("psgd", 0, wl(), calibrated_cluster(prof.cores), prof)
    with pytest.raises(ConfigError, match="nope"):
        simulate("nope", 2, wl(), calibrated_cluster(prof.cores), prof)
    with pytest.raises(ConfigError, match="serial"):
        simulate("serial", 2, wl(), calibrated_cluster(prof.cores), prof)


# ------------------------------------------------------------------ invariants

ALL = ("psgd", "async_avg", "gather_scatter", "allreduce", "ddp", "mpi_allreduce",
       "ps_sync", "ps_async")


@settings(max_examples=25, deadline=None)
@given(scheme=st.sampled_from(ALL), p=st.integers(1, 6), hosts=st.integers(1, 3),
       fidelity=st.sampled_from(("analytic", "message")), cv=st.sampled_from((0.0, 0.2)),
       seed=st.integers(0, 3))
def test_time_accounts_for_every_worker(scheme, p, hosts, fidelity, cv, seed):
    cluster = Cluster(hosts, 2, LINK if hosts > 1 else None)
    r = simulate(SchemeConfig(scheme, fidelity=fidelity, avg_every=2), p, wl(4), cluster,
                 make_profile(spread_cv=cv), seed=seed)
    assert r.time_s > 0 and r.epoch_s > 0
    for c, m, w in zip(r.compute_s_per_worker, r.comm_s_per_worker, r.wait_s_per_worker):
        assert min(c, m, w) >= 0
        assert c > 0
        if scheme != "ddp":                   # ddp's communication overlaps its backward
            assert c + m + w <= r.time_s * (1 + 1e-9)
    assert all(k >= 0 for k in r.staleness)


@settings(max_examples=25, deadline=None)
@given(scheme=st.sampled_from(SYNC), p=st.integers(2, 6),
       gbit=st.floats(0.01, 10), factor=st.floats(1.0, 100.0), seed=st.integers(0, 3))
def test_more_bandwidth_is_never_slower(scheme, p, gbit, factor, seed):
    """Lock-step schemes only: in async_avg a faster link changes the order in which the
    holder serves its workers, and a different order can end a little later (a scheduling
    anomaly of the real scheme too: async_avg at P = 3, 8 against 16 Gbit/s, +0.5%)."""
    prof = make_profile(spread_cv=0.1)
    slow, fast = (Cluster(p + 1, 2, Link(gbit * 1.25e8 * f, ALPHA)) for f in (1.0, factor))
    cfg = SchemeConfig(scheme, fidelity="message", avg_every=2)
    t_slow = simulate(cfg, p, wl(4), slow, prof, seed=seed).time_s
    t_fast = simulate(cfg, p, wl(4), fast, prof, seed=seed).time_s
    assert t_fast <= t_slow * (1 + 1e-9)


def test_default_threads_follow_real_train():
    """threads_per_worker=None: cores // ranks on the host (the parameter server counts)."""
    from simulator.engine.placement import default_threads
    from simulator.engine.run import resolve_scheme
    cl = Cluster(hosts=1, cores_per_host=4)
    assert default_threads(resolve_scheme("psgd")[0], cl, 1) == 4
    assert default_threads(resolve_scheme("psgd")[0], cl, 2) == 2
    assert default_threads(resolve_scheme("ps_sync")[0], cl, 2) == 1
    assert default_threads(resolve_scheme("psgd")[0], cl, 8) == 1
    prof = make_profile(cores=4)
    auto = simulate("serial", 1, Workload(model="toy", threads_per_worker=None), cl, prof)
    four = simulate("serial", 1, Workload(model="toy", threads_per_worker=4), cl, prof)
    assert auto.time_s == four.time_s


@pytest.mark.parametrize("measured_s", (0.0, 2e-3))
def test_ps_async_server_takes_one_push_its_update_and_its_answer_at_a_time(measured_s):
    """Server-bound across hosts: four workers whose compute is short against a push or an
    answer crossing a port. The server's loop (real/schemes/ps.py, serve_async) takes one
    push, applies it and sends the answer before the next, but a push crosses whole before
    the server takes it (libfabric's tcp provider saves an unexpected message), over the
    server's ingress while its egress carries an answer; taken, it is copied out of the
    provider's buffer. After the first w (four answers at once: 4 n / R) and the first
    four pushes (at once: 4 n / R) twenty turns take 20 (n beta + update + n / R). The
    update is the model's measured ``server_update_s`` (the real server's update,
    ``real.schemes.ps.server_update``) where the calibration has it, else the line."""
    prof = make_profile(step_intercept_s=1e-6, step_s_per_sample=0.0,
                        server_update_s=measured_s)
    rate = 1e7
    cluster = Cluster(hosts=5, cores_per_host=1, link=Link(rate, 0.0))
    r = simulate(SchemeConfig("ps_async", fidelity="message"), 4, wl(5), cluster, prof)
    n = 4 * prof.models[0].param_count
    update_s = measured_s or 1e-4 + 1e-9 * prof.models[0].param_count
    turn_s = n * 1e-9 + update_s + n / rate
    assert r.time_s == pytest.approx(8 * n / rate + 20 * turn_s, rel=0.02)


def test_ps_async_server_on_the_host_copies_each_push_in_its_turn():
    """Server-bound on one oversubscribed host (five polling ranks on two cores: a message
    waits ``h`` for its receiver's turn on a core; no eager limit, so a message is one
    leg): a push's request to send crosses while the server serves another worker, and the
    server copies the push itself in its turn (MPICH's CMA: the receiver reads the
    sender's memory, with no hand-off), then answers (alpha + h + n beta). After the first
    w (four answers out of the server's endpoint at once: alpha + h + 4 n beta) and the
    first requests (alpha + h), twenty turns take 20 (2 n beta + alpha + h); with the push
    crossing in the server's turn they took 20 (2 n beta + 2 alpha + 2 h)."""
    beta, quantum_s = 1e-9, 0.004
    prof = make_profile(step_intercept_s=1e-6, step_s_per_sample=0.0, beta_s_per_byte=beta,
                        update_intercept_s=0.0, update_s_per_param=0.0, quantum_s=quantum_s)
    r = simulate(SchemeConfig("ps_async", fidelity="message"), 4, wl(5),
                 Cluster(hosts=1, cores_per_host=2), prof)
    n, alpha = 4 * prof.models[0].param_count, 1e-5
    h = cf.handoff_s(5, 2, quantum_s)
    assert h == pytest.approx(quantum_s / 2)
    expected = (alpha + h + 4 * n * beta) + (alpha + h) + 20 * (2 * n * beta + alpha + h)
    assert r.time_s == pytest.approx(expected, rel=0.02)
