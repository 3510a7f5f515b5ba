"""Every collective sends what its library sends: partners in order and message sizes.

Each test runs one algorithm's generators under ``simulator.testing.trace`` (every
message takes a second, whatever its size) and pins what each rank sends, in the
order it sends it, at P = 8 on 2 hosts of 4 ranks and at a P that is not a power
of two; the docstrings say which file and function of the library fix the order.
The message model then takes the closed forms of ``simulator.model.comm.closed_forms`` where
nothing contends.
"""
from __future__ import annotations

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from libraries import gloo as gloo_cut
from contracts.cluster import calibrated_cluster
from simulator.model.comm import closed_forms as cf
from contracts.cluster import Link
from contracts.profile import Transport
from simulator.model.comm import MessageComm, collectives, gloo, mpich, nccl
from simulator.model.network import Routes
from simulator.model.recorder import Recorder
from simulator.testing import gloo_hosts, sends_of, trace

TWO_HOSTS = (0, 0, 0, 0, 1, 1, 1, 1)
N = 64.0


def crossing_bytes(tracer, rank: int) -> float:
    """Bytes ``rank`` sent to ranks on another host."""
    pl = tracer.routes.placement
    return sum(n for dst, n in sends_of(tracer, rank) if pl[dst] != pl[rank])


# ------------------------------------------------------------------ MPICH allreduces

def test_rabenseifner_halves_from_the_nearest_partner_and_doubles_back_to_it():
    """allreduce_intra_reduce_scatter_allgather.c: halving with mask 1, 2, 4 (n/2, n/4,
    n/8), doubling with mask 4, 2, 1 (n/8, n/4, n/2): the halves stay on the host."""
    t = trace(mpich.rabenseifner_allreduce, tuple(range(8)), N, TWO_HOSTS)
    assert sends_of(t, 0) == [(1, 32), (2, 16), (4, 8), (4, 8), (2, 16), (1, 32)]
    assert sends_of(t, 5) == [(4, 32), (7, 16), (1, 8), (1, 8), (7, 16), (4, 32)]
    assert all(crossing_bytes(t, r) == 2 * N / 8 for r in range(8))


def test_rabenseifner_folds_even_ranks_into_odd_ones_when_p_is_not_a_power_of_two():
    """P = 6 on 2 hosts of 3: ranks 0 and 2 send everything to 1 and 3 and get the
    result back; 1, 3, 4, 5 run the power-of-two core."""
    t = trace(mpich.rabenseifner_allreduce, tuple(range(6)), 48.0, (0, 0, 0, 1, 1, 1))
    assert sends_of(t, 0) == [(1, 48)]
    assert sends_of(t, 1) == [(3, 24), (4, 12), (4, 12), (3, 24), (0, 48)]
    assert sends_of(t, 2) == [(3, 48)]
    assert sends_of(t, 3) == [(1, 24), (5, 12), (5, 12), (1, 24), (2, 48)]
    assert sends_of(t, 4) == [(5, 24), (1, 12), (1, 12), (5, 24)]


def test_recursive_doubling_exchanges_everything_nearest_first():
    """allreduce_intra_recursive_doubling.c: mask 1, 2, 4, the whole buffer each."""
    t = trace(mpich.recursive_doubling_allreduce, tuple(range(8)), N, TWO_HOSTS)
    assert sends_of(t, 0) == [(1, N), (2, N), (4, N)]
    assert sends_of(t, 6) == [(7, N), (4, N), (2, N)]
    t = trace(mpich.recursive_doubling_allreduce, tuple(range(6)), N, (0, 0, 0, 1, 1, 1))
    assert sends_of(t, 0) == [(1, N)] and sends_of(t, 1) == [(3, N), (4, N), (0, N)]


def test_mpich_ring_sends_blocks_of_n_over_p_to_the_next_rank():
    """allreduce_intra_ring.c: 2(P-1) steps to rank + 1, any P."""
    for p, pl in ((8, TWO_HOSTS), (6, (0, 0, 0, 1, 1, 1))):
        t = trace(mpich.ring_allreduce, tuple(range(p)), N, pl)
        for r in range(p):
            assert sends_of(t, r) == [((r + 1) % p, N / p)] * (2 * (p - 1))


def test_smp_reduces_in_each_host_and_allreduces_between_the_first_ranks():
    """ch4_coll_impl.h, composition alpha: reduce_intra_reduce_scatter_gather.c on each
    host (halving with 1 then 2, gather 2 -> 0 and 3 -> 1, then 1 -> 0), Rabenseifner
    between ranks 0 and 4, bcast_intra_binomial.c (0 -> 2, 0 -> 1, 2 -> 3)."""
    n = 4e5
    t = trace(mpich.smp_allreduce, tuple(range(8)), n, TWO_HOSTS)
    assert sends_of(t, 0) == [(1, n / 2), (2, n / 4), (4, n / 2), (4, n / 2), (2, n), (1, n)]
    assert sends_of(t, 1) == [(0, n / 2), (3, n / 4), (0, n / 2)]
    assert sends_of(t, 2) == [(3, n / 2), (0, n / 4), (0, n / 4), (3, n)]
    assert sends_of(t, 3) == [(2, n / 2), (1, n / 4), (1, n / 4)]
    assert [crossing_bytes(t, r) for r in range(8)] == [n, 0, 0, 0, n, 0, 0, 0]


def test_smp_with_three_ranks_a_host_reduces_binomially_when_small():
    """Up to 2048 bytes MPICH reduces by a binomial tree (reduce_intra_binomial.c)."""
    t = trace(mpich.smp_allreduce, tuple(range(6)), 48.0, (0, 0, 0, 1, 1, 1))
    assert sends_of(t, 1) == [(0, 48)] and sends_of(t, 2) == [(0, 48)]
    assert sends_of(t, 0) == [(3, 24), (3, 24), (2, 48), (1, 48)]


def test_reduce_scatter_gather_folds_odd_ranks_into_even_ones():
    """reduce_intra_reduce_scatter_gather.c at P = 6: 1 -> 0 and 3 -> 2, halving among
    0, 2, 4, 5, then the gather 4 -> 0, 5 -> 2, 2 -> 0."""
    t = trace(mpich.reduce_scatter_gather, tuple(range(6)), 48.0)
    assert [sends_of(t, r) for r in range(6)] == [
        [(2, 24), (4, 12)], [(0, 48)], [(0, 24), (5, 12), (0, 24)], [(2, 48)],
        [(5, 24), (0, 12), (0, 12)], [(4, 24), (2, 12), (2, 12)]]


def test_scatter_broadcasts_pass_blocks_down_a_binomial_tree():
    """bcast_utils.c's scatter (0 -> 4: 4 blocks, 0 -> 2: 2, 0 -> 1: 1), then
    bcast_intra_scatter_ring_allgather.c's 7 ring steps of one block to rank + 1, or
    ..._recursive_doubling_allgather.c's exchanges with mask 1, 2, 4."""
    t = trace(mpich.scatter_ring_bcast, tuple(range(8)), 80.0)
    assert sends_of(t, 0) == [(4, 40), (2, 20), (1, 10)] + [(1, 10)] * 7
    assert sends_of(t, 5) == [(6, 10)] * 7
    t = trace(mpich.scatter_doubling_bcast, tuple(range(8)), 80.0)
    assert sends_of(t, 0) == [(4, 40), (2, 20), (1, 10), (1, 10), (2, 20), (4, 40)]
    assert sends_of(t, 7) == [(6, 10), (5, 20), (3, 40)]


def test_binomial_trees_reduce_up_the_lowest_bit_and_broadcast_down_the_highest():
    """reduce_intra_binomial.c: with mask 1, 2, 4 a rank sends to ``rank - mask`` at its
    lowest set bit (1 -> 0, 3 -> 2, 2 -> 0, 4 -> 0); bcast_intra_binomial.c: from the
    parent, then to ``rank + mask`` with the mask falling (0 -> 4, 2, 1; 4 -> 6, 5)."""
    t = trace(mpich.binomial_reduce, tuple(range(8)), N, TWO_HOSTS)
    assert [sends_of(t, r) for r in range(8)] == [
        [], [(0, N)], [(0, N)], [(2, N)], [(0, N)], [(4, N)], [(4, N)], [(6, N)]]
    t = trace(mpich.binomial_bcast, tuple(range(8)), N, TWO_HOSTS)
    assert [sends_of(t, r) for r in range(8)] == [
        [(4, N), (2, N), (1, N)], [], [(3, N)], [], [(6, N), (5, N)], [], [(7, N)], []]
    assert [crossing_bytes(t, r) for r in range(8)] == [N, 0, 0, 0, 0, 0, 0, 0]


# ------------------------------------------------------------------ against closed forms

A_SHM, B_SHM, A_NET, B_NET, G = 2e-6, 1e-10, 20e-6, 1e-9, 3e-11


def run_alone(collective, placement, n_bytes, gamma=G) -> float:
    env = simpy.Environment()
    shm = Transport("mpi", A_SHM, B_SHM, gamma)
    routes = Routes(placement, Link(1 / B_NET, A_NET) if len(set(placement)) > 1 else None, shm)
    comm = MessageComm(env, routes, shm, Recorder(placement))
    ranks = tuple(range(len(placement)))
    for i in range(len(ranks)):
        env.process(collective(comm, ranks, i, n_bytes, "t"))
    env.run()
    return env.now


@pytest.mark.parametrize("hosts,local", [(2, 4), (4, 2), (3, 4), (2, 2), (5, 1), (1, 4)])
@pytest.mark.parametrize("n_bytes", [1e3, 4e5])
def test_smp_is_its_closed_form_without_contention(hosts, local, n_bytes):
    placement = tuple(r // local for r in range(hosts * local))
    closed = cf.smp_allreduce_s(len(placement), n_bytes, local, A_SHM, B_SHM, A_NET, B_NET, G)
    assert run_alone(mpich.smp_allreduce, placement, n_bytes) == pytest.approx(closed, rel=1e-9)


@pytest.mark.parametrize("p", [2, 4, 8, 16])
def test_mpich_reduces_and_broadcasts_are_their_closed_forms(p):
    one = (0,) * p
    n = 4e5
    assert run_alone(mpich.reduce_scatter_gather, one, n) == pytest.approx(
        cf.reduce_scatter_gather_s(p, n, A_SHM, B_SHM, G), rel=1e-9)
    assert run_alone(mpich.binomial_reduce, one, n) == pytest.approx(
        cf.binomial_reduce_s(p, n, A_SHM, B_SHM, G), rel=1e-9)
    assert run_alone(mpich.scatter_doubling_bcast, one, n) == pytest.approx(
        cf.scatter_doubling_bcast_s(p, n, A_SHM, B_SHM), rel=1e-9)
    ring = run_alone(mpich.scatter_ring_bcast, one, n)
    assert ring <= cf.scatter_ring_bcast_s(p, n, A_SHM, B_SHM) * (1 + 1e-9)


# ------------------------------------------------------------------ gloo, as torch calls it

def test_gloo_ring_sends_two_segments_a_rank_to_the_previous_rank():
    """gloo/allreduce.cc ``ring`` (torch's ProcessGroupGloo sets no algorithm): to rank - 1,
    numSegments = roundUp(max(ceil(n / 1 MiB), 2P), P): 16 segments of n/16 at P = 8,
    (P - 1) * 2 = 14 a phase; 12 of n/12 at P = 6. Each message carries gloo's framing
    (gloo/transport/tcp/pair.cc: three 48-byte preambles)."""
    f = gloo_cut.GLOO_RING_FRAMING_BYTES
    assert f == 3 * 48
    t = trace(gloo.ring_allreduce, tuple(range(8)), N, TWO_HOSTS)
    for r in range(8):                          # ranks 0 and 4 send to the other host
        assert sends_of(t, r) == [((r - 1) % 8, N / 16 + (f if r in (0, 4) else 0))] * 28
    assert [crossing_bytes(t, r) for r in range(8)] == [28 * (N / 16 + f), 0, 0, 0,
                                                        28 * (N / 16 + f), 0, 0, 0]
    t = trace(gloo.ring_allreduce, tuple(range(6)), 48.0, (0, 0, 0, 1, 1, 1))
    assert sends_of(t, 3) == [(2, 4.0 + f)] * 20 and sends_of(t, 4) == [(3, 4.0)] * 20


def test_gloo_ring_cuts_whole_elements_and_skips_empty_segments():
    """A 10-element float32 bias at P = 8: 16 segments of one element, the last six empty
    (chunks 5-7). The reduce-scatter sends every chunk but the rank's own, the allgather
    every chunk but rank - 1's (``computeReduceScatterOffsets``,
    ``computeAllgatherOffsets``): 8 or 10 non-empty segments a phase (what
    ``real.records.wire`` counts, and what the model sends)."""
    sends = [18, 16, 16, 16, 16, 18, 20, 20]
    t = trace(gloo.ring_allreduce, tuple(range(8)), 40.0, TWO_HOSTS)
    f = gloo_cut.GLOO_RING_FRAMING_BYTES
    for r in range(8):
        assert gloo_cut.gloo_ring_rank_traffic(8, r, 10, 4) == (4 * sends[r], sends[r],
                                                          sends[(r + 1) % 8])
        assert sends_of(t, r) == [((r - 1) % 8, 4.0 + (f if r in (0, 4) else 0))] * sends[r]
    # 37 elements over 16 segments: 3 elements (12 B) each, the 13th has one, the rest none
    lengths = gloo_cut.gloo_ring_lengths(8, 0, 148.0)
    # rank 0 sends segments 2-15, then 0-13: ten and twelve whole ones and the 13th's 4 B
    assert sum(s for phase in lengths for s, _ in phase) == 10 * 12 + 4 + 12 * 12 + 4
    assert sorted({s for phase in lengths for s, _ in phase}) == [0.0, 4.0, 12.0]


def test_gloo_ring_cuts_large_buffers_in_segments_of_at_most_1_mib():
    assert gloo_cut.gloo_ring_segments(8, 4e5) == (2, 4e5 / 16)
    per_rank, seg = gloo_cut.gloo_ring_segments(4, 37e6)     # ceil(37e6 / 2^20) = 36 segments
    assert (per_rank, seg) == (9, 37e6 / 36) and seg <= 2**20
    t = trace(gloo.ring_allreduce, (0, 1, 2, 3), 37e6)
    assert len(sends_of(t, 0)) == 2 * 3 * 9


def test_gloo_ring_keeps_two_segments_in_flight():
    """Segments k and k+1 are posted together; k+2 only once k has arrived."""
    t = trace(gloo.ring_allreduce, (0, 1, 2), 24.0)
    times = [when for when, src, _dst, _n in t.sends if src == 0]
    assert times == [0, 0, 1, 1, 2, 2, 3, 3]


def test_torch_gloo_allreduce_is_the_segmented_ring():
    from simulator.model.comm.choice import resolve_algorithm
    routes = Routes(TWO_HOSTS, Link(1e9, 1e-5), Transport("gloo", 1e-5, 1e-9))
    for asked in ("auto", "ring"):
        assert resolve_algorithm("gloo", asked, tuple(range(8)), 4e5, routes) == "gloo_ring"


@pytest.mark.parametrize("p", [2, 3, 4, 8])
@pytest.mark.parametrize("n_bytes", [4e3, 4e5, 4e7])
def test_gloo_ring_is_its_closed_form_without_reductions(p, n_bytes):
    """One rank per host: exact with g = 0 where the buffer is S equal segments of whole
    elements; with g, gloo reduces one segment while the next moves, and the closed form
    is an upper bound."""
    n_bytes = whole_segments(p, n_bytes)
    spread = tuple(range(p))
    f = gloo_cut.GLOO_RING_FRAMING_BYTES                  # every hop crosses hosts
    closed = cf.gloo_ring_allreduce_s(p, n_bytes, A_NET, B_NET, framing=f)
    assert run_alone(gloo.ring_allreduce, spread, n_bytes, 0.0) == pytest.approx(closed, rel=1e-9)
    with_g = run_alone(gloo.ring_allreduce, spread, n_bytes, 1e-9)
    assert closed < with_g <= cf.gloo_ring_allreduce_s(p, n_bytes, A_NET, B_NET, 1e-9,
                                                       f) * (1 + 1e-12)


def whole_segments(p: int, n_bytes: float) -> float:
    """The nearest size gloo's ring cuts into S equal segments of whole float32 elements."""
    segments = gloo_cut.gloo_ring_segments(p, n_bytes)[0] * p
    return max(1, round(n_bytes / (4 * segments))) * 4 * segments


def test_gathers_and_scatters_go_through_the_root_in_rank_order():
    """A gather and a scatter by rendezvous (``collectives``, ps_sync's MPI gather): every
    rank sends its n to the root; the root posts its sends to 1, 2, ..., P-1 at once."""
    for p, pl in ((8, TWO_HOSTS), (6, (0, 0, 0, 1, 1, 1))):
        t = trace(collectives.gather, tuple(range(p)), N, pl)
        assert [sends_of(t, r) for r in range(p)] == [[]] + [[(0, N)]] * (p - 1)
        t = trace(collectives.scatter, tuple(range(p)), N, pl)
        assert sends_of(t, 0) == [(r, N) for r in range(1, p)]
        assert all(sends_of(t, r) == [] for r in range(1, p))


GLOO_B = 1e8                                 # bytes/s, no latency, no bursts: closed forms


def gloo_gather_scatter_cycle_s(p: int, tau_s: float, compute_s: float, steps: int = 5):
    """gather_scatter's steady step with gloo's gather and scatter (``comm.gloo``) on one
    rank a host: every rank computes, gathers to rank 0, gets its piece of the scatter."""
    env, ranks, comm = gloo_hosts(p, GLOO_B)
    gathered, pieces = [], {}

    def rank(r):
        for _ in range(steps):
            yield env.timeout(compute_s)
            yield from comm.gather(r, ranks, tau_s * GLOO_B, root=0)
            if r == 0:
                gathered.append(env.now)
            yield from comm.scatter(r, ranks, tau_s * GLOO_B, root=0)
            pieces[r] = env.now - gathered[-1]
    for r in ranks:
        env.process(rank(r))
    env.run()
    return gathered[-1] - gathered[-2], pieces


@settings(max_examples=40, deadline=None)
@given(p=st.integers(2, 9), compute=st.floats(0.0, 12.0))
def test_gloo_scatter_drains_in_turn_then_the_gather_is_an_incast(p, compute):
    """gloo/scatter.cc: the root's waitSend returns once each piece is in its socket, and
    its port sends them in turn: rank k has its piece k messages (tau) after the scatter
    starts, and the root computes meanwhile. gloo/gather.cc, tcp/pair.cc: each rank's
    payload waits for the root's NOTIFY_RECV_READY (Pair::handleRemotePendingRecv), which
    leaves after the scatter has drained (D = max(c, (P-1) tau), then P-1 notices of
    e = 48 bytes sharing the port); the payloads then cross into the root's port one
    after another: a step is max(D + (P-1)(e + tau), c + P tau), the first term
    2 (P-1) tau wherever the root's compute hides under the drain."""
    tau, c, e = 1e-3, compute * 1e-3, gloo_cut.GLOO_PREAMBLE_BYTES / GLOO_B
    cycle, pieces = gloo_gather_scatter_cycle_s(p, tau, c)
    drained = max(c, (p - 1) * tau)
    assert cycle == pytest.approx(max(drained + (p - 1) * (e + tau), c + p * tau), rel=1e-9)
    assert [pieces[r] for r in range(1, p)] == pytest.approx([k * tau for k in range(1, p)])


# ------------------------------------------------------------------ NCCL

def test_nccl_builds_its_trees_over_hosts_with_a_chain_inside_each():
    """trees.cc ncclGetDtree over the 2 hosts (host 0 the first tree's root, the mirror
    the second's), connect.cc: a chain 0-1-2-3 and 4-5-6-7; host 1's head hangs under
    host 0's first rank (child 1 of a balanced tree), and the reverse."""
    assert cf.double_tree(((0, 1, 2, 3), (4, 5, 6, 7))) == (
        [-1, 0, 1, 2, 0, 4, 5, 6], [4, 0, 1, 2, -1, 4, 5, 6])
    # one rank a host: NCCL's own trees; rank 0 is the root with one child
    assert cf.double_tree(cf.singletons(6)) == ([-1, 2, 4, 2, 0, 4], [1, 5, 3, 1, 3, -1])
    assert cf.double_tree(cf.singletons(13))[0] == [-1, 2, 4, 2, 8, 6, 4, 6, 0, 10, 12, 10, 8]
    # 3 hosts of 3: host 1 is host 2's child 0 (under its second rank, 7), host 2 host
    # 0's child 1 (under rank 0)
    assert cf.double_tree(((0, 1, 2), (3, 4, 5), (6, 7, 8)))[0] == [-1, 0, 1, 7, 3, 4, 0, 6, 7]


def test_nccl_tree_sends_half_the_buffer_in_chunks_along_the_chains():
    """512 KiB: one 256 KiB chunk a half (NCCL's 256 kB tree chunk). Rank 3 ends both
    chains: it sends its chunk of each tree up to 2 and nothing down."""
    n = 2 * 2**18
    t = trace(collectives.tree_allreduce, tuple(range(8)), n, TWO_HOSTS)
    assert sends_of(t, 3) == [(2, n / 2)] * 2
    assert sorted(sends_of(t, 0)) == sorted([(4, n / 2), (1, n / 2), (4, n / 2), (1, n / 2)])
    assert [crossing_bytes(t, r) for r in range(8)] == [n, 0, 0, 0, n, 0, 0, 0]


def test_nccl_rings_run_host_by_host():
    """connect.cc: a ring goes through every rank of a host before the next host."""
    from simulator.model.network import nccl_order
    assert nccl_order((0, 1, 0, 1, 0, 1, 0, 1), tuple(range(8))) == (0, 2, 4, 6, 1, 3, 5, 7)
    assert nccl_order(TWO_HOSTS, tuple(range(8))) == tuple(range(8))


def test_an_nccl_ring_over_round_robin_ranks_is_the_packed_ring():
    """Ranks dealt round robin over 2 hosts: NCCL still rings host by host, so the run
    takes what the packed placement takes (a ring in rank order would cross the
    network at every hop)."""
    from contracts.cluster import Cluster, Device, Hardware
    from contracts.workload import Workload
    from simulator.engine import simulate
    from simulator.model.config import SchemeConfig
    from simulator.testing import make_profile
    hw = Hardware(device=Device("gpu", 1e13), intra=Link(50e9, 5e-6))
    times = []
    for placement in ("packed", "round_robin"):
        cluster = Cluster(hosts=2, cores_per_host=4, link=Link(1.25e9, 10e-6),
                          placement=placement, hardware=hw)
        for engine in ("des", "fast"):
            cfg = SchemeConfig("allreduce", backend="nccl", algorithm="ring", engine=engine)
            times.append(simulate(cfg, 8, Workload("toy", iterations=3), cluster,
                                  make_profile(cores=4)).time_s)
    assert times == pytest.approx([times[0]] * 4, rel=1e-9)


# ------------------------------------------------------------------ gloo on accelerator hosts

PCIE, NVLINK = Link(10e9, 0.0), Link(100e9, 1e-6)


def gpu_hosts(hosts, local, host_link=PCIE, intra=NVLINK):
    from contracts.cluster import Cluster, Device, Hardware
    return Cluster(hosts=hosts, cores_per_host=local, placement="packed",
                   link=Link(1.25e9, 10e-6) if hosts > 1 else None,
                   hardware=Hardware(device=Device("gpu", 1e13), intra=intra,
                                     host_link=host_link))


def test_gloo_on_a_cuda_tensor_copies_it_out_rings_on_the_host_and_copies_it_back():
    """ProcessGroupGlooCuda.cpp, AsyncAllreduceCUDAHostWork: a copy to pinned memory, gloo's
    ring on the host (as on CPU tensors), a copy back."""
    t = trace(gloo.host_ring_allreduce, tuple(range(8)), N, TWO_HOSTS)
    assert sends_of(t, 0) == [(7, N / 16 + gloo_cut.GLOO_RING_FRAMING_BYTES)] * 28
    assert [n for _, n in t.stages] == [N] * 16           # each of 8 ranks: out, back


def test_gloo_on_gpus_pays_two_copies_and_talks_tcp_inside_a_host():
    """Two hosts of 4 GPUs: the same-host hops of gloo's ring cross the host's TCP loopback
    (the profile's gloo transport), not the GPUs' link; each call adds two copies."""
    from simulator.model.comm.choice import resolve_algorithm
    from simulator.model.comm.costs import collective_time_s
    from simulator.model.fabric import FabricRoutes
    cluster = gpu_hosts(2, 4)
    loopback = Transport("gloo", 30e-6, 1 / 2e9, 0.0)
    routes = FabricRoutes(cluster.placement_of(8), cluster, loopback)
    ranks, n = tuple(range(8)), 4e6
    assert resolve_algorithm("gloo", "auto", ranks, n, routes) == "gloo_ring_host"
    got = collective_time_s("allreduce", ranks, n, routes, 0.0, "gloo_ring_host")
    ring = run_on(routes.host_routes, loopback, ranks, n)
    assert got == pytest.approx(2 * n / 10e9 + ring, rel=1e-9)
    per_rank, seg = gloo_cut.gloo_ring_segments(8, n)
    framed = seg + gloo_cut.GLOO_RING_FRAMING_BYTES                     # between the hosts
    hop = max(30e-6 + 2 * seg / 2e9, 10e-6 + 2 * framed / 1.25e9)   # a pair of segments
    assert ring == pytest.approx(2 * (7 * per_rank // 2) * hop, rel=1e-9)


def run_on(routes, transport, ranks, n_bytes) -> float:
    env = simpy.Environment()
    comm = MessageComm(env, routes, transport, Recorder(routes.placement))
    for i in range(len(ranks)):
        env.process(gloo.ring_allreduce(comm, ranks, i, n_bytes, "t"))
    env.run()
    return env.now


def test_gloo_on_gpus_is_refused_without_the_copy_rate_or_for_horovod():
    from contracts.checks import ConfigError
    from contracts.workload import Workload
    from simulator.engine import simulate
    from simulator.model.config import SchemeConfig
    from simulator.testing import make_profile
    work, prof = Workload("toy", iterations=2), make_profile(cores=4)
    with pytest.raises(ConfigError, match=r"\[host_link\] bandwidth"):
        simulate(SchemeConfig("ddp", backend="gloo"), 8, work, gpu_hosts(2, 4, None), prof)
    with pytest.raises(ConfigError, match="not modelled"):
        simulate(SchemeConfig("horovod", backend="gloo"), 8, work, gpu_hosts(2, 4), prof)
    for engine in ("des", "fast"):
        cfg = SchemeConfig("ddp", backend="gloo", engine=engine)
        assert simulate(cfg, 8, work, gpu_hosts(2, 4), prof).comm_s > 0


# ------------------------------------------------------------------ hierarchical allreduces

def test_horovods_hierarchy_reduces_along_a_chain_copies_and_broadcasts():
    """Horovod 0.13.6 operations.cc with HOROVOD_HIERARCHICAL_ALLREDUCE=1: ncclReduce to
    local rank 0 (reduce.h: 1 -> 2 -> 3 -> 0, 512 KiB chunks), a copy to the host, MPI's
    allreduce between ranks 0 and 4 (Rabenseifner: n/2 each way twice), a copy back,
    ncclBcast (0 -> 1 -> 2 -> 3)."""
    n = 2 * 2**19
    t = trace(nccl.reduce_broadcast_mpi, tuple(range(8)), n, TWO_HOSTS)
    assert sends_of(t, 1) == [(2, n / 2)] * 4                  # reduce, then broadcast
    assert sends_of(t, 3) == [(0, n / 2)] * 2
    assert sends_of(t, 0) == [(4, n / 2)] * 2 + [(1, n / 2)] * 2
    assert [crossing_bytes(t, r) for r in range(8)] == [n, 0, 0, 0, n, 0, 0, 0]
    assert [size for _, size in t.stages] == [n] * 4          # the two roots: out and back


def test_caffe2_gloo_reduces_a_hosts_gpus_in_host_memory():
    """gloo's CudaAllreduceRing with a host workspace: every GPU copies out, the host adds,
    gloo's ring between the hosts (4 segments of n/4 each way at P = 2), every GPU
    copies the sum back."""
    n = 2 * 2**19
    t = trace(nccl.reduce_broadcast_gloo, tuple(range(8)), n, TWO_HOSTS)
    assert [dst for dst, size in sends_of(t, 0) if size] == [4] * 4
    assert all(not sends_of(t, r) for r in (1, 2, 3, 5, 6, 7))
    assert len(t.stages) == 16


@pytest.mark.parametrize("hosts,local", [(2, 4), (3, 2), (4, 1), (1, 4)])
@pytest.mark.parametrize("n_bytes", [1e5, 8e6])
def test_horovods_hierarchy_is_its_closed_form_without_contention(hosts, local, n_bytes):
    from simulator.model.fabric import FabricRoutes
    cluster = gpu_hosts(hosts, local, host_link=Link(10e9, 3e-6), intra=Link(40e9, 5e-6))
    shm = Transport("nccl", 5e-6, 1 / 40e9, 0.0)
    routes = FabricRoutes(cluster.placement_of(hosts * local), cluster, shm)
    env = simpy.Environment()
    comm = MessageComm(env, routes, shm, Recorder(routes.placement))
    ranks = tuple(range(hosts * local))
    for i in range(len(ranks)):
        env.process(nccl.reduce_broadcast_mpi(comm, ranks, i, n_bytes, "t"))
    env.run()
    closed = cf.reduce_broadcast_s(len(ranks), n_bytes, local, 5e-6, 1 / 40e9, 10e-6,
                                   1 / 1.25e9, 3e-6 + n_bytes / 10e9)
    assert env.now == pytest.approx(closed, rel=1e-9)


def test_the_hierarchies_are_selected_as_their_users_selected_them():
    """--allreduce-algorithm reduce_broadcast: Horovod's with nccl, Caffe2's with gloo;
    refused without accelerator hosts or the copy's rate."""
    from contracts.checks import ConfigError
    from contracts.workload import Workload
    from simulator.engine import simulate
    from simulator.model.config import SchemeConfig
    from simulator.testing import make_profile
    work, prof = Workload("toy", iterations=2), make_profile(cores=4)
    for backend in ("nccl", "gloo"):
        for scheme in ("horovod", "ddp") if backend == "nccl" else ("ddp",):
            runs = [simulate(SchemeConfig(scheme, backend=backend, algorithm="reduce_broadcast",
                                          engine=e), 8, work, gpu_hosts(2, 4), prof)
                    for e in ("des", "fast")]
            assert runs[0].time_s == pytest.approx(runs[1].time_s, rel=1e-6)
    with pytest.raises(ConfigError, match="accelerator hosts"):
        simulate(SchemeConfig("ddp", algorithm="reduce_broadcast"), 4, work, calibrated_cluster(prof.cores), prof)
    with pytest.raises(ConfigError, match="host_link"):
        simulate(SchemeConfig("ddp", backend="nccl", algorithm="reduce_broadcast"), 8, work,
                 gpu_hosts(2, 4, None), prof)


def test_horovods_later_hierarchy_reduce_scatters_in_the_host_and_rings_across():
    """Horovod 0.15+ (hierarchical): a ring reduce-scatter of n/4 blocks inside each host,
    an allreduce of each rank's quarter with the rank of the same place on the other
    host (a ring of n/8 blocks), a ring allgather inside the host."""
    t = trace(collectives.hierarchical_allreduce, tuple(range(8)), N, TWO_HOSTS)
    assert sends_of(t, 0) == [(1, 16)] * 3 + [(4, 8)] * 2 + [(1, 16)] * 3
    assert sends_of(t, 5) == [(6, 16)] * 3 + [(1, 8)] * 2 + [(6, 16)] * 3


def test_release_gather_reduces_up_radix_4_and_releases_from_the_root():
    """posix_coll_release_gather.h at P = 6 on one host: 1..4 under 0, 5 under 1; the
    root releases to all five (radix 64). (MPICH runs it single-threaded only.)"""
    t = trace(mpich.release_gather_allreduce, tuple(range(6)), 8.0, (0,) * 6)
    assert sends_of(t, 0) == [(r, 8.0) for r in range(1, 6)]
    assert sends_of(t, 5) == [(1, 8.0)] and sends_of(t, 2) == [(0, 8.0)]
