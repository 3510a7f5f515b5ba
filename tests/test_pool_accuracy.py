"""simulator.pool on time-to-accuracy validations: means over seeds, one target, bad folders."""
from __future__ import annotations

import pandas as pd
import pytest

from simulator import pool
from simulator import pool_accuracy as pa


def write_validation(folder, acc_pred, t_meas, t_pred, target=0.8):
    """One seed's accuracy_validation.csv: psgd at P = 1 and 2 (measured accuracy 0.80),
    P = 2 with the given predicted accuracy and times (None: target not reached)."""
    rows = [{"scheme": "psgd", "workers": 1, "final_accuracy_measured": 0.82,
             "final_accuracy_predicted": 0.82, "time_to_target_measured_s": 10.0,
             "time_to_target_predicted_s": 10.0},
            {"scheme": "serial", "workers": 1, "final_accuracy_measured": 0.82,
             "final_accuracy_predicted": 0.82, "time_to_target_measured_s": 10.0,
             "time_to_target_predicted_s": 11.0},
            {"scheme": "psgd", "workers": 2, "final_accuracy_measured": 0.80,
             "final_accuracy_predicted": acc_pred, "time_to_target_measured_s": t_meas,
             "time_to_target_predicted_s": t_pred}]
    folder.mkdir(parents=True)
    pd.DataFrame(rows).to_csv(folder / pa.FILE, index=False)
    (folder / "report.md").write_text(f"3 epochs, seeds 1, target test accuracy {target:g}; ...")
    return folder


def test_means_over_seeds_and_time_error_only_where_both_reached(tmp_path):
    a = write_validation(tmp_path / "a", 0.81, 20.0, 22.0)      # +1 point, +10%
    b = write_validation(tmp_path / "b", 0.79, 20.0, 19.0)      # -1 point, -5%
    c = write_validation(tmp_path / "c", 0.80, None, 30.0)      # not reached when measured
    rows, target = pa.read_validations([a, b, c], ["a", "b", "c"])
    assert target == 0.8
    out = pa.pool(rows)
    assert list(out["scheme"]) == ["serial", "psgd", "psgd"]    # the schemes' own order
    r = out[(out.scheme == "psgd") & (out.workers == 2)].iloc[0]
    assert r.final_accuracy_error_points == pytest.approx(0.0, abs=1e-9)   # the seeds' means
    assert r.final_accuracy_mean_abs_error_points == pytest.approx(2 / 3)
    assert r.reached_both == 2 and r.validations == 3
    assert r.time_to_target_error == pytest.approx(0.025)          # (+10% - 5%) / 2
    assert (r.time_to_target_error_min, r.time_to_target_error_max) == pytest.approx((-0.05, 0.1))
    assert r.time_to_target_measured_s == pytest.approx(20.0)


def test_cli_writes_table_and_figure(tmp_path, capsys):
    a = write_validation(tmp_path / "a", 0.81, 20.0, 22.0)
    b = write_validation(tmp_path / "b", 0.79, 20.0, 19.0)
    assert pool.main([str(a), str(b), "--held-out-above", "1", "--out",
                      str(tmp_path / "o")]) == 0
    text = capsys.readouterr().out
    assert "to 0.8 meas" in text and "P > 1, final accuracy" in text
    assert "within 1 point: 3 of 3" in text
    assert (tmp_path / "o" / "pooled_accuracy.csv").is_file()
    assert (tmp_path / "o" / "time-to-target.png").stat().st_size > 0


@pytest.mark.parametrize("case, named", [
    ("targets", "different targets"), ("mixed", "mix accuracy validations"),
    ("no-report", "no report.md")])
def test_bad_folders_one_line(tmp_path, capsys, case, named):
    a = write_validation(tmp_path / "a", 0.81, 20.0, 22.0)
    b = write_validation(tmp_path / "b", 0.79, 20.0, 19.0, target=0.85)
    if case == "mixed":
        b = tmp_path / "m"
        b.mkdir()
        pd.DataFrame([{"scheme": "psgd"}]).to_csv(b / "compare.csv", index=False)
    if case == "no-report":
        (b / "report.md").unlink()
    assert pool.main([str(a), str(b)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and named in err[0]


def test_runs_predicted_alike_give_the_spread_of_one_measurement(tmp_path, capsys):
    """Three P = 1 runs predicted alike, measured 9, 10 and 11 s: one run's spread is 10%
    (sd about their mean); a single seed's error is beyond it past 19.6%."""
    alike = [{"scheme": s, "workers": 1, "final_accuracy_measured": 0.82,
              "final_accuracy_predicted": 0.82, "time_to_target_measured_s": m,
              "time_to_target_predicted_s": 10.0}
             for s, m in (("serial", 9.0), ("psgd", 10.0), ("allreduce", 11.0))]
    off = [{"scheme": s, "workers": 2, "final_accuracy_measured": 0.8,
            "final_accuracy_predicted": 0.8, "time_to_target_measured_s": 10.0,
            "time_to_target_predicted_s": pred} for s, pred in (("psgd", 11.5), ("ddp", 13.0))]
    folder = tmp_path / "v"
    folder.mkdir()
    pd.DataFrame(alike + off).to_csv(folder / pa.FILE, index=False)
    (folder / "report.md").write_text("3 epochs, seeds 1, target test accuracy 0.8; ...")
    rows, _target = pa.read_validations([folder], ["v"])
    spread, runs, groups = pa.repeat_spread(rows)
    assert spread == pytest.approx(0.1) and (runs, groups) == (3, 1)
    out = pa.pool(rows).set_index(["scheme", "workers"])
    assert not out.loc[("psgd", 2), "beyond_noise"]                # +15%
    assert out.loc[("ddp", 2), "beyond_noise"]                     # +30%
    assert pool.main([str(folder)]) == 0
    assert "one run 10.0% (sd over 3 runs in 1 groups" in capsys.readouterr().out
    assert "beyond 1.96 of it: 1 of 5 (ddp P=2 +30%)" in pa.format_table(pa.pool(rows), 1, 0.8)


def test_no_runs_predicted_alike_no_spread(tmp_path):
    a = write_validation(tmp_path / "a", 0.81, 20.0, 22.0)
    rows, _target = pa.read_validations([a], ["a"])
    assert pa.repeat_spread(rows) is None
    assert "measurement spread" not in pa.format_table(pa.pool(rows), 1, 0.8)
