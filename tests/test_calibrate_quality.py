"""The calibration's quality bar: noisy fits are measured again, then refused unless forced."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd

from calibrate import __main__ as cal_main
from calibrate import fit, quality
from tests.test_calibrate_cli import synthetic_workdir


def noisy_steps(d, noise: float, seed: int = 1) -> None:
    """Replace the compute probe's table with steps whose noise is ``noise`` (relative)."""
    rng = np.random.default_rng(seed)
    steps = [{"model": "cnn", "threads": t, "batch": b, "rep": r, "forward_s": 0.0,
              "backward_s": 0.6 * s, "update_s": 0.0, "step_s": s}
             for t in (1, 2) for b in (16, 32, 64) for r in range(5)
             for s in [(1e-3 + 1e-4 * b / t) * abs(1 + noise * rng.standard_normal())]]
    pd.DataFrame(steps).to_csv(d / "compute_steps.csv", index=False)


def test_clean_fits_pass_and_noisy_ones_name_their_probe(tmp_path):
    synthetic_workdir(tmp_path, np.random.default_rng(0))
    found = quality.checks(fit.build(tmp_path), cores=2)
    assert not quality.failing(found)
    assert any(c.ok is None and c.fit.startswith("ping-pong mpi") for c in found)
    noisy_steps(tmp_path, 0.6)
    found = quality.checks(fit.build(tmp_path), cores=2)
    assert quality.probes_to_repeat(found) == ["compute"]
    assert "below the bar" in quality.refusal(found) and "--force" in quality.refusal(found)


def test_sharing_slowed_by_others_is_below_the_bar(tmp_path):
    synthetic_workdir(tmp_path, np.random.default_rng(0))
    pd.DataFrame([{"k": k, "proc": 0, "rep": r, "step_s": {1: 1.0, 2: 1.95}[k]}
                  for k in (1, 2) for r in range(3)]).to_csv(tmp_path / "sharing.csv", index=False)
    found = quality.checks(fit.build(tmp_path), cores=2)
    bad = quality.failing(found)
    assert [c.fit for c in bad] == ["sharing k=2 on 2 cores"] and "1.95" in bad[0].figures


def test_fit_refuses_below_the_bar_in_one_line_unless_forced(tmp_path, capsys):
    synthetic_workdir(tmp_path, np.random.default_rng(0))
    noisy_steps(tmp_path, 0.6)
    out = tmp_path / "p.json"
    assert fit.main(["--workdir", str(tmp_path), "--out", str(out), "--no-plot"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "below the bar" in err[0] and not out.exists()
    q = json.loads((tmp_path / "quality.json").read_text())
    assert q["passed"] is False and q["bar"] == quality.BAR
    assert fit.main(["--workdir", str(tmp_path), "--out", str(out), "--no-plot", "--force"]) == 0
    assert out.exists() and json.loads((tmp_path / "quality.json").read_text())["forced"]


def test_noisy_probes_are_measured_again_until_the_fits_pass(tmp_path, monkeypatch):
    synthetic_workdir(tmp_path, np.random.default_rng(0))
    noisy_steps(tmp_path, 0.6)
    ran = []

    def rerun(argv, timeout_s):            # the repeated compute probe measures a quiet machine
        ran.append(argv)
        noisy_steps(tmp_path, 0.01)
    monkeypatch.setattr(cal_main, "run_step", rerun)
    args = SimpleNamespace(repeat_noisy=2, quiet_wait=0, runs=None, max_workers=None)
    steps = [("compute probe", ["python", "compute"]), ("sharing probe", ["python", "sharing"])]
    waits: list[dict] = []
    _, found, repeats = cal_main.fit_until_good(args, [], SimpleNamespace(timeout_s=1), steps,
                                                tmp_path, waits)
    assert not quality.failing(found)
    assert ran == [["python", "compute"]] and repeats == {"compute probe": 1}
    assert waits == [{"when": "before repeating compute", "skipped": True}]


def test_noise_that_stays_is_refused_after_the_repeats(tmp_path, monkeypatch):
    synthetic_workdir(tmp_path, np.random.default_rng(0))
    noisy_steps(tmp_path, 0.6)
    monkeypatch.setattr(cal_main, "run_step", lambda argv, timeout_s: noisy_steps(tmp_path, 0.6, 7))
    args = SimpleNamespace(repeat_noisy=1, quiet_wait=0, runs=None, max_workers=None)
    _, found, repeats = cal_main.fit_until_good(args, [], SimpleNamespace(timeout_s=1),
                                                [("compute probe", ["c"])], tmp_path, [])
    assert quality.failing(found) and repeats == {"compute probe": 1}
