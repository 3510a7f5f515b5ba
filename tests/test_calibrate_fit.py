"""calibrate's fits recover known parameters from seeded synthetic noisy data."""
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calibrate.fits import fit_comm, fit_compute
from calibrate.fits.linefit import fit_line, fit_segments, predict_segments, segment_edges

SIZES = 4 * 4.0 ** np.arange(13)            # 4 B .. 64 MiB


def noisy(y, rng, rel_sd=0.03):
    return y * (1 + rel_sd * rng.standard_normal(len(y)))


def test_line_recovers_hockney_parameters_with_cis_that_cover_them():
    rng = np.random.default_rng(1)
    alpha, beta = 20e-6, 0.25e-9
    x = np.repeat(SIZES, 5)
    line = fit_line(x, noisy(alpha + beta * x, rng))
    assert line.intercept == pytest.approx(alpha, rel=0.05)
    assert line.slope == pytest.approx(beta, rel=0.05)
    assert abs(line.intercept - alpha) <= line.intercept_ci
    assert abs(line.slope - beta) <= line.slope_ci
    assert line.r2 > 0.99


def test_negative_intercept_is_clamped_to_zero():
    x = np.array([1.0, 2, 3, 4])
    line = fit_line(x, 2 * x - 0.5)
    assert line.intercept == 0.0 and line.slope > 0


def test_two_segment_line_is_found_with_its_breakpoint():
    """Eager below 64 KiB, rendezvous above: a latency jump and a different slope."""
    rng = np.random.default_rng(2)
    eager = (5e-6, 0.5e-9)
    rendezvous = (60e-6, 0.2e-9)
    y_true = np.where(SIZES <= 65536, eager[0] + eager[1] * SIZES,
                      rendezvous[0] + rendezvous[1] * SIZES)
    lines = fit_segments(SIZES, noisy(y_true, rng, 0.02))
    assert len(lines) == 2
    assert lines[0].x_max == 65536 and lines[1].x_min == 262144
    assert lines[0].intercept == pytest.approx(eager[0], rel=0.1)
    assert lines[1].intercept == pytest.approx(rendezvous[0], rel=0.15)
    assert lines[1].slope == pytest.approx(rendezvous[1], rel=0.05)
    rel = np.abs(predict_segments(lines, SIZES) - y_true) / y_true
    assert rel.max() < 0.1
    edges = segment_edges(lines)
    assert edges[0][0] == 0 and edges[0][1] + 1 == edges[1][0]


def test_one_line_is_kept_when_one_line_fits():
    rng = np.random.default_rng(3)
    assert len(fit_segments(SIZES, noisy(10e-6 + 1e-9 * SIZES, rng, 0.02))) == 1


@settings(max_examples=30, deadline=None)
@given(st.floats(1e-7, 1e-3), st.floats(1e-12, 1e-8))
def test_exact_lines_are_recovered(alpha, beta):
    line = fit_line(SIZES, alpha + beta * SIZES)
    assert line.intercept == pytest.approx(alpha, rel=1e-6, abs=1e-12)
    assert line.slope == pytest.approx(beta, rel=1e-6)


def test_step_fit_uses_medians_and_bootstrap_cis():
    rng = np.random.default_rng(4)
    a, b = 2e-3, 1e-4
    batches = np.repeat([16, 32, 64, 128, 256], 15)
    step = noisy(a + b * batches, rng, 0.02)
    step[::17] *= 5                                   # a busy host: a few very slow steps
    fit = fit_compute.step_fit(pd.DataFrame({"batch": batches, "step_s": step}), threads=1)
    assert fit.step_intercept_s == pytest.approx(a, rel=0.15)
    assert fit.step_s_per_sample == pytest.approx(b, rel=0.03)
    assert 0 < fit.slope_ci_s < 0.1 * b
    assert fit.batches == (16, 32, 64, 128, 256)
    assert fit.spread_cv > 0.02


def test_sharing_slowdown_and_max_k():
    rows = pd.DataFrame({"k": [1] * 5 + [2] * 5 + [4] * 5,
                         "step_s": [1.0] * 5 + [1.1] * 5 + [2.0] * 5})
    assert fit_compute.sharing_slowdown(rows) == pytest.approx({1: 1.0, 2: 1.1, 4: 2.0})
    assert set(fit_compute.sharing_slowdown(rows, max_k=2)) == {1, 2}


def test_server_cost_and_gamma():
    rng = np.random.default_rng(5)
    params = np.repeat([1e3, 1e4, 1e5, 1e6, 1e7], 5)
    rows = pd.DataFrame({"params": params, "adds": 3,
                         "update_s": noisy(2e-6 + 5e-10 * params, rng, 0.02),
                         "sum_s": noisy(3 * (1e-6 + 1e-10 * 4 * params), rng, 0.02)})
    server, gamma = fit_compute.server_cost(rows)
    assert server.update_s_per_param == pytest.approx(5e-10, rel=0.05)
    assert gamma == pytest.approx(1e-10, rel=0.05)


def test_collective_is_max_over_ranks_then_median_over_reps():
    raw = pd.DataFrame([{"backend": "mpi", "op": "bcast", "algorithm": "-", "workers": 2,
                         "bytes": n, "rep": rep, "rank": rank,
                         "time_s": (1e-6 + 1e-9 * n) * (1 + rank) * (1 + 0.01 * rep)}
                        for n in (4, 64, 1024, 16384) for rep in range(3) for rank in range(2)])
    points = fit_comm.collective_points(raw)
    row = points[points["bytes"] == 4].iloc[0]
    assert row["time_s"] == pytest.approx(2 * (1e-6 + 4e-9) * 1.01)
    [(fit, _)] = fit_comm.fit_collectives(points)
    assert fit.segments[0].beta_s_per_byte == pytest.approx(2e-9 * 1.01, rel=1e-6)
    assert fit.worst_rel_error < 1e-6
    assert fit_comm.collective_points(raw, max_workers=1).empty


def test_a_measured_link_goes_into_the_profile(tmp_path):
    """``calibrate.fit --link``: the network calibrate.link measured links hosts like this one
    in a prediction (``simulator.describe.default_link``)."""
    from calibrate.fits.fit import with_network
    from contracts.profile import load_default
    f = tmp_path / "link.toml"
    f.write_text('[cluster]\nhosts = 2\ncores_per_host = 2\n'
                 '[link]\nbandwidth = "1gbit"\nlatency = "30us"\n')
    net = with_network(load_default(), str(f)).network
    assert (net.bandwidth_bytes_per_s, net.latency_s) == pytest.approx((1.25e8, 3e-5))
    assert net.source == "calibrate.link, link.toml"
