"""The large-message probe's arithmetic (benchmarks.large_messages): what the ports alone take,
and the summary of its rows. No namespaces: the rows are made up here."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from benchmarks.large_messages import link_s, summary

N, RATE = 36_924_456, 120e6


@pytest.mark.parametrize("op, p, ports", [
    ("mpi_one", 4, 1), ("tcp_ring", 4, 1), ("mpi_incast", 4, 3), ("gloo_gather", 3, 2),
    ("mpi_allreduce", 4, 1.5), ("mpi_allreduce", 2, 1), ("gather_scatter_step", 4, 6)])
def test_the_ports_alone_carry_the_bytes_of_the_busiest_port(op, p, ports):
    assert link_s(op, N, p, RATE) == pytest.approx(ports * N / RATE)
    assert math.isnan(link_s("copy_fresh_one", N, p, RATE))


def test_summary_takes_rank_0_or_the_slowest_rank_and_adds_retransmits_over_ranks():
    rows = pd.DataFrame([
        {"op": op, "rank": r, "rep": k, "wall_s": w + 0.01 * r, "user_s": 0.0, "system_s": 0.002,
         "core_wait_s": 0.001, "retrans_segs": 5 * r, "machine_busy_s": 0.1}
        for op, w in (("mpi_incast", 0.93), ("mpi_allreduce", 0.5)) for r in range(4)
        for k in range(3)])
    s = summary(rows, N, RATE).set_index("op")
    assert s.loc["mpi_incast", "measured_ms"] == pytest.approx(930.0)      # rank 0's
    assert s.loc["mpi_allreduce", "measured_ms"] == pytest.approx(530.0)   # the last rank's
    assert s.loc["mpi_incast", "retrans_a_repeat"] == 30                   # 0 + 5 + 10 + 15
    assert s.loc["mpi_incast", "cpu_ms_rank"] == pytest.approx(2.0)


# ------------------------------------------------------------------ the copies in the model

from calibrate.probes.copy_probe import fit, read_rows, with_copy_probe  # noqa: E402
from contracts import profile as profiles  # noqa: E402
from contracts.cluster import Cluster, Link  # noqa: E402
from contracts.workload import Workload  # noqa: E402
from simulator.engine import simulate  # noqa: E402
from simulator.testing import make_profile  # noqa: E402

BIG = 9_231_114                      # VGG-11's parameters: 36.9 MB, above 32 MiB
KEPT, FRESH = 1e-10, 7e-10           # s a byte: the probe's 0.1 and 0.7 ns, about


def copies(prof, kept=KEPT, fresh=FRESH):
    from dataclasses import replace
    return replace(prof, copy_s_per_byte=kept, fresh_copy_s_per_byte=fresh)


def test_a_new_tensor_above_32_mib_is_fresh_memory_and_nothing_is_charged_unmeasured():
    prof = copies(make_profile())
    n = profiles.FRESH_MIN_BYTES
    assert prof.copy_s(n + 4, new=True) == pytest.approx((n + 4) * FRESH)
    assert prof.copy_s(n, new=True) == pytest.approx(n * KEPT)       # from the heap
    assert prof.copy_s(n + 4, new=False) == pytest.approx((n + 4) * KEPT)
    assert make_profile().copy_s(n + 4, new=True) == 0.0


def test_the_copy_probe_fits_each_kind_per_byte_and_a_profile_keeps_them(tmp_path):
    rows = [{"kind": k, "bytes": n, "rep": i, "time_s": n * (FRESH if k == "fresh" else KEPT)
             * (1 + 0.01 * i)} for k in ("fresh", "kept") for n in (40e6, 80e6) for i in range(3)]
    got = fit(rows)
    assert got["copy_s_per_byte"] == pytest.approx(KEPT * 1.01)
    assert got["fresh_copy_s_per_byte"] == pytest.approx(FRESH * 1.01)
    prof = with_copy_probe(make_profile(), rows)
    profiles.save(prof, tmp_path / "p.json")
    assert profiles.load(tmp_path / "p.json") == prof
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a copy probe"):
        read_rows(tmp_path / "bad.csv")


def _one_per_host(p, bandwidth=1e9, latency=1e-5):
    return Cluster(hosts=p, cores_per_host=1, link=Link(bandwidth_bytes_per_s=bandwidth,
                                                        latency_s=latency))


@pytest.mark.parametrize("p", [2, 4])
def test_mpi_allreduce_pays_flat_grads_then_its_mean_back_each_step(p):
    """real.schemes.mpi_allreduce.mpi_allreduce_mean: flat_grads (a new tensor of n > 32
    MiB: f = n fresh), the Allreduce, buf /= P and load_flat_grads (two passes over kept
    memory: 2 k): every rank pays them in turn around its call, so each step is longer by
    f + 2 k exactly."""
    prof, n, steps = make_profile(layer_param_counts=(BIG,)), 4 * BIG, 3
    wl = Workload(model="toy", iterations=steps)
    without = simulate("mpi_allreduce", p, wl, _one_per_host(p), prof)
    with_ = simulate("mpi_allreduce", p, wl, _one_per_host(p), copies(prof))
    assert with_.time_s - without.time_s == pytest.approx(steps * n * (FRESH + 2 * KEPT),
                                                          rel=1e-9)


@pytest.mark.parametrize("p", [2, 3, 5])
def test_gather_scatter_pays_the_roots_stack_sum_and_division_in_new_memory(p):
    """real.schemes.gather_scatter.gather_scatter_mean on a link too fast to matter: every
    rank's flat_grads (f), rank 0's torch.stack of the P parts, .sum(0) and / size, each a
    new tensor ((P + 2) f, while the others wait), load_flat_grads (k): a step is
    s + (P + 3) f + k."""
    prof, n, steps = make_profile(layer_param_counts=(BIG,)), 4 * BIG, 3
    wl = Workload(model="toy", iterations=steps)
    fast = _one_per_host(p, bandwidth=1e18, latency=0.0)
    without = simulate("gather_scatter", p, wl, fast, prof)
    with_ = simulate("gather_scatter", p, wl, fast, copies(prof))
    step = ((p + 3) * FRESH + KEPT) * n
    assert with_.time_s - without.time_s == pytest.approx(steps * step, rel=1e-6)


def test_calibration_runs_the_copy_probe_and_its_fit_reads_what_it_wrote(tmp_path):
    """python -m calibrate runs calibrate.copy_probe into its workdir; the fit gives the
    profile its numbers, and none (0: not measured) where the workdir has no copies.csv."""
    from calibrate.__main__ import probe_steps
    from calibrate.fits import fit as fitmod
    from calibrate.probes import plan
    steps = dict(probe_steps(plan.full_plan(2), tmp_path, []))
    assert steps["copy probe"][:3] == ["python", "-m", "calibrate.copy_probe"]
    assert steps["copy probe"][-1] == str(tmp_path / "copies.csv")
    assert fitmod._copies(fitmod._rows_if_probed(tmp_path, "copies.csv")) == {}
    rows = [{"kind": k, "bytes": 40_000_000, "rep": 0, "time_s": 0.004 if k == "kept" else 0.02}
            for k in ("kept", "fresh")]
    pd.DataFrame(rows).to_csv(tmp_path / "copies.csv", index=False)
    got = fitmod._copies(fitmod._rows_if_probed(tmp_path, "copies.csv"))
    assert got == pytest.approx({"copy_s_per_byte": 1e-10, "fresh_copy_s_per_byte": 5e-10})
