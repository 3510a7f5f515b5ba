"""simulator.pool: held-out errors of several sweeps, bias and noise told apart."""
from __future__ import annotations

import pandas as pd
import pytest

from simulator import pool
from tests.conftest import py


def write_sweep(folder, errors, ci_s=0.3, calibrated_error=0.5):
    """A compare.csv whose psgd points at P = 3, 4 are off by ``errors`` (measured 10 s);
    P = 2 is a calibration point with a large error that pooling must ignore."""
    rows = [{"scheme": "psgd", "workers": 2, "measured_s": 10.0, "measured_ci_s": ci_s,
             "predicted_s": 10.0 * (1 + calibrated_error), "rel_error": calibrated_error,
             "held_out": False}]
    for p, e in zip((3, 4), errors):
        rows.append({"scheme": "psgd", "workers": p, "measured_s": 10.0, "measured_ci_s": ci_s,
                     "predicted_s": 10.0 * (1 + e), "rel_error": e, "held_out": True})
    folder.mkdir(parents=True)
    pd.DataFrame(rows).to_csv(folder / "compare.csv", index=False)
    return folder


def test_mean_range_and_ci_count_over_sweeps(tmp_path):
    a = write_sweep(tmp_path / "a", (0.04, -0.08))
    b = write_sweep(tmp_path / "b", (-0.02, -0.12))
    out = pool.pool(pool.read_sweeps([a, b])).set_index("workers")
    assert list(out.index) == [3, 4]                      # the calibration point is left out
    assert out.loc[3, "mean_error"] == pytest.approx(0.01)
    assert (out.loc[3, "min_error"], out.loc[3, "max_error"]) == pytest.approx((-0.02, 0.04))
    assert out.loc[4, "mean_error"] == pytest.approx(-0.10)
    # |error| <= CI (0.3 s of 10 s = 3%): 2% only, at P = 3 in sweep b
    assert list(out["inside_ci"]) == [1, 0]
    assert out.loc[3, "measured_ci_rel"] == pytest.approx(0.03)
    s = pool.summary(out.reset_index()).iloc[0]
    assert s.bias_median == pytest.approx(0.055) and s.bias_worst == pytest.approx(0.10)
    assert s.spread_worst == pytest.approx(0.06) and s.inside_ci == pytest.approx(0.25)


def test_sweep_without_held_out_points_counts_all(tmp_path):
    d = tmp_path / "s"
    d.mkdir()
    pd.DataFrame([{"scheme": "ddp", "workers": 2, "measured_s": 5.0, "measured_ci_s": 0.1,
                   "predicted_s": 5.5, "rel_error": 0.1, "held_out": False}]).to_csv(
        d / "compare.csv", index=False)
    assert pool.pool(pool.read_sweeps([d]))["mean_error"].tolist() == pytest.approx([0.1])


def test_cli_writes_table_and_figure(tmp_path):
    a = write_sweep(tmp_path / "a", (0.04, -0.08))
    b = write_sweep(tmp_path / "b", (-0.02, -0.12))
    r = py("simulator.pool", str(a), str(b), "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    assert "bias median" in r.stdout and "-10.0%" in r.stdout
    assert len(pd.read_csv(tmp_path / "out" / "pooled.csv")) == 2
    png = tmp_path / "out" / "pooled.png"
    assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 10_000


@pytest.mark.parametrize("content, says", [
    (None, "has no compare.csv"),
    ("scheme,workers\npsgd,3\n", "not a simulator.compare table"),
    ("", "not a readable table"),
])
def test_cli_bad_folder(tmp_path, content, says):
    d = tmp_path / "sweep"
    d.mkdir()
    if content is not None:
        (d / "compare.csv").write_text(content)
    r = py("simulator.pool", str(d))
    assert r.returncode == 2 and says in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_cli_labels_must_match_folders(tmp_path):
    a = write_sweep(tmp_path / "a", (0.04, -0.08))
    r = py("simulator.pool", str(a), "--labels", "x,y")
    assert r.returncode == 2 and "--labels names 2 sweep(s) for 1 folder(s)" in r.stderr


def test_emulated_cluster_rows_pool_apart(tmp_path):
    d = write_sweep(tmp_path / "a", (0.04, -0.08))
    df = pd.read_csv(d / "compare.csv").assign(hosts=1, bandwidth_bits_per_s=float("nan"))
    cluster = df[df["held_out"]].assign(hosts=2, bandwidth_bits_per_s=1e8, rel_error=0.5)
    pd.concat([df, cluster]).to_csv(d / "compare.csv", index=False)
    out = pool.pool(pool.read_sweeps([d]))
    assert sorted(set(out["scheme"])) == ["psgd", "psgd-100mbit"]
    assert out[out["scheme"] == "psgd"]["mean_error"].tolist() == pytest.approx([0.04, -0.08])
