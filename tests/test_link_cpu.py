"""A gloo call's CPU over a link whose CPU per message was measured (issue 21).

Closed form: every message a rank sends or receives costs it
``c(n) = cpu_s_per_message + cpu_s_per_byte * n``; a ring allreduce step both sends and
receives a chunk of n/P, so a rank spends 2(P-1) (2 c0 + 2 c1 n / P) per call.
"""
from __future__ import annotations

import pytest

from simulator import Cluster, Link, SchemeConfig, Workload, simulate
from contracts.cluster import load_cluster
from contracts.profile import Transport
from simulator.model.comm import call_cpu_s

GLOO = Transport("gloo", alpha_s=1e-4, beta_s_per_byte=1e-9, cpu_fraction=0.67)


@pytest.mark.parametrize("p", [2, 3, 4, 8, 16])
def test_ring_allreduce_cpu_over_the_link_is_its_messages(p):
    link = Link(1.25e7, 1e-5, cpu_s_per_message=150e-6, cpu_s_per_byte=4e-9)
    n = 407_080.0
    got = call_cpu_s(GLOO, "allreduce", p, n, "ring", False, link)
    steps = 2 * (p - 1)
    assert got == pytest.approx(steps * (2 * 150e-6 + 2 * 4e-9 * n / p))


def test_a_small_buffers_cpu_counts_the_segments_gloo_sends():
    """A 10-element bias at P = 8: 10 of gloo's 16 segments carry bytes, so a phase sends
    7 * 10 messages in all, 16-20 a rank (``gloo_ring_rank_traffic``): on average
    70 / 8 a rank a phase, where an even split of 16 segments would send 14."""
    from libraries.gloo import gloo_ring_rank_traffic
    link = Link(1.25e7, 1e-5, cpu_s_per_message=150e-6)
    got = call_cpu_s(GLOO, "allreduce", 8, 40.0, "gloo_ring", False, link)
    assert got == pytest.approx(4 * 70 / 8 * 150e-6)
    assert sum(gloo_ring_rank_traffic(8, r, 10, 4)[1] for r in range(8)) == 2 * 70


def test_without_a_measured_link_the_local_share_applies():
    local = call_cpu_s(GLOO, "allreduce", 4, 1e5, "ring", False)
    assert local == pytest.approx(0.67 * 6 * (1e-4 + 1e-9 * 1e5 / 4))


def test_a_gather_senders_cpu_is_its_one_message():
    link = Link(1.25e7, 1e-5, cpu_s_per_message=1e-4, cpu_s_per_byte=2e-9)
    assert call_cpu_s(GLOO, "gather", 8, 1e6, "-", False, link) == pytest.approx(1e-4 + 2e-3)


def test_cluster_files_carry_the_link_cpu(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('[cluster]\nhosts = 2\ncores_per_host = 2\nshared_cores = true\n'
                 '[link]\nbandwidth = "100mbit"\nlatency = "10us"\n'
                 'cpu_per_message = "150us"\ncpu_per_byte = "4ns"\n')
    link = load_cluster(f).link
    assert link.cpu_s_per_message == pytest.approx(150e-6)
    assert link.cpu_s_per_byte == pytest.approx(4e-9)


def test_the_link_cpu_slows_gloo_ranks_that_share_cores_and_spares_one_host():
    def epoch(link, hosts):
        cluster = Cluster(hosts, 2, link if hosts > 1 else None, shared_cores=True)
        return simulate(SchemeConfig("allreduce"), 8, Workload(iterations=4), cluster).time_s
    plain = Link(1.25e7, 1e-5)
    costly = Link(1.25e7, 1e-5, cpu_s_per_message=300e-6, cpu_s_per_byte=8e-9)
    assert epoch(costly, 8) > epoch(plain, 8)
    assert epoch(costly, 1) == epoch(plain, 1)


def test_calibrate_link_keeps_the_cpu_medians(tmp_path):
    """calibrate.link writes gloo's CPU and device-thread wake-ups, medians per size, into
    [fit] beside its fit (so a later model can fit the CPU again), and the file still loads."""
    from types import SimpleNamespace

    import pandas as pd

    from calibrate.probes.link import cluster_toml, fit_link
    sizes = (8, 512, 4096, 262144, 1048576)
    rows = [{"backend": b, "bytes": n, "rep": r, "time_s": 1e-5 + n / 2.4e7,
             "cpu_s": 6e-5 + 3e-9 * n + r * 1e-6 if b == "gloo" else None,
             "loop_wakeups": 1.5 + n / 2896 + r if b == "gloo" else None}
            for b in ("mpi", "gloo") for n in sizes for r in range(3)]
    fits = fit_link(pd.DataFrame(rows), burst_bytes=25_000)
    cluster = SimpleNamespace(prefix="psgd", n_hosts=2, bandwidth_bits_per_s=200_000_000,
                              burst_bytes=25_000)
    text = cluster_toml(cluster, 2, fits, "python -m calibrate.link")
    line = next(x for x in text.splitlines() if x.startswith("gloo_median_cpu_s"))
    medians = [float(v) for v in line.split("=")[1].strip(" []").split(",")]
    assert medians == pytest.approx([6e-5 + 3e-9 * n + 1e-6 for n in sizes], rel=1e-5)
    assert not any(x.startswith("mpi_median_cpu_s") for x in text.splitlines())
    line = next(x for x in text.splitlines() if x.startswith("gloo_median_device_wakeups"))
    wakeups = [float(v) for v in line.split("=")[1].strip(" []").split(",")]
    assert wakeups == pytest.approx([2.5 + n / 2896 for n in sizes], rel=1e-5)
    (tmp_path / "link.toml").write_text(text)
    assert load_cluster(tmp_path / "link.toml").link.cpu_s_per_byte == pytest.approx(3e-9, rel=1e-3)


def test_small_sizes_are_timed_round_by_round():
    from calibrate.probes.link import interleaved
    assert interleaved([8, 64, 512], 3) == [(0, 8), (0, 64), (0, 512), (1, 512), (1, 64),
                                            (1, 8), (2, 8), (2, 64), (2, 512)]


def test_cpu_per_message_is_the_median_with_its_tail_beside_it():
    """One launch: 97 repetitions at 40-56 us and 3 at 3 ms: the median, a CI around it,
    3% tail, the mean with it."""
    import pandas as pd

    from calibrate.probes.link import cpu_per_message
    x = pd.Series([40e-6 + (i % 17) * 1e-6 for i in range(97)] + [3e-3] * 3)
    got = cpu_per_message(x, pd.Series(0, x.index))
    assert got["cpu_s_per_message"] == pytest.approx(48e-6)
    lo, hi = got["cpu_ci_s_per_message"]
    assert 44e-6 <= lo <= 48e-6 <= hi <= 52e-6
    assert got["cpu_tail_share"] == pytest.approx(0.03)
    assert got["cpu_tail_mean_s"] == pytest.approx(3e-3)
    assert got["cpu_mean_s_per_message"] == pytest.approx(x.mean())


def test_cpu_per_message_is_the_median_of_the_launches_medians():
    """Three launches at 50, 100 and 60 us (a few us of jitter each): 60 us, each launch's
    median kept, and a repetition's tail judged against its own launch (200 us is 4x the
    first launch's median, not the second's)."""
    import pandas as pd

    from calibrate.probes.link import cpu_per_message
    levels = (50e-6, 100e-6, 60e-6)
    x = pd.Series([lv + (i % 5) * 1e-6 - 2e-6 for lv in levels for i in range(40)]
                  + [250e-6, 250e-6])
    launch = pd.Series([k for k in range(3) for _ in range(40)] + [0, 1])
    got = cpu_per_message(x, launch)
    assert got["cpu_s_per_message"] == pytest.approx(60e-6)
    assert got["cpu_launch_medians_s"] == pytest.approx(list(levels), abs=1e-12)
    assert got["cpu_tail_share"] == pytest.approx(1 / 122)
