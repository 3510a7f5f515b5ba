"""real.sweep: P = 1, 2 under mpirun, results.csv, plots, skipping completed points."""
from __future__ import annotations

import pandas as pd
import pytest

from real.records import results
from tests.conftest import py


@pytest.mark.slow
def test_sweep_p1_p2_table_and_plots(tmp_path):
    out = tmp_path / "sweep"
    args = ["real.sweep", "--algorithm", "psgd", "--workers", "1-2", "--dataset", "synthetic",
            "--train-size", "512", "--test-size", "128", "--batch-size", "32", "--out", str(out)]
    r = py(*args)
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(out / "results.csv")
    assert sorted(df["workers"]) == [1, 2] and (df["status"] == "completed").all()
    assert (df["train_wall_s"] > 0).all()
    for name in ("speedup.png", "accuracy.png"):
        assert (out / name).stat().st_size > 5000
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = pd.read_csv(out / "summary.csv")
    assert summary.loc[summary["workers"] == 1, "speedup"].iloc[0] == pytest.approx(1.0)
    assert "Speedup" in r.stdout and "psgd" in r.stdout
    # A second sweep skips what completed: the records stay byte for byte.
    before = (out / "psgd-P2-r0" / "record.json").read_bytes()
    r2 = py(*args)
    assert r2.returncode == 0 and "psgd-P2-r0: ok" not in r2.stderr
    assert (out / "psgd-P2-r0" / "record.json").read_bytes() == before


def test_summary_speedup_and_ci():
    df = pd.DataFrame({
        "algorithm": ["psgd"] * 4, "workers": [1, 1, 2, 2], "status": ["completed"] * 4,
        "train_wall_s": [10.0, 10.0, 6.0, 4.0], "final_loss": [0.5] * 4,
        "test_accuracy": [0.9] * 4, "cpu_util_percent": [100.0] * 4, "peak_rss_mb": [1.0] * 4})
    s = results.summarize(df)
    row = s[s["workers"] == 2].iloc[0]
    assert row.time_s == 5.0 and row.speedup == 2.0 and row.efficiency == 1.0
    # std = sqrt(2), standard error = 1, t(0.975, 1 dof) = 12.706
    assert row.time_ci_s == pytest.approx(12.706, rel=1e-3)
    assert "psgd" in results.format_table(s)


def test_points_run_repeat_by_repeat():
    """Every point once, then every point again: drift over the sweep lands in the CIs."""
    from real.launch.sweep import build_parser, points
    args = build_parser().parse_args(["--algorithm", "serial,psgd", "--workers", "1,2",
                                      "--repeats", "2"])
    assert points(args) == [("serial", 1, 0), ("psgd", 1, 0), ("psgd", 2, 0),
                            ("serial", 1, 1), ("psgd", 1, 1), ("psgd", 2, 1)]
