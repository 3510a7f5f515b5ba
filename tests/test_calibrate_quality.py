"""The calibration's quality bar: noisy fits are measured again, then refused unless forced."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd

from calibrate import __main__ as cal_main
from calibrate.fits import fit, quality
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


def test_a_forced_profile_is_marked_and_every_prediction_says_so(tmp_path, capsys):
    """Issue 40, item 4: a profile written below its bar says so in the file, in fit --show
    (each weak fit marked) and in the header of every prediction that uses it."""
    from calibrate.fits.report import show
    from simulator import predict
    from contracts import profile as prof
    synthetic_workdir(tmp_path, np.random.default_rng(0))
    noisy_steps(tmp_path, 0.6)
    out = tmp_path / "p.json"
    assert fit.main(["--workdir", str(tmp_path), "--out", str(out), "--no-plot", "--force"]) == 0
    assert "marked below its quality bar" in capsys.readouterr().out
    p = prof.load(out)
    assert p.provenance.bar == quality.BAR_TEXT and p.provenance.below_bar
    assert all(w.startswith("step cnn threads=") for w in p.provenance.below_bar)
    shown = show(str(out))
    assert "quality: BELOW THE BAR" in shown and "**BELOW**" in shown
    assert predict.main(["--profile", str(out), "--workers", "2", "--hosts", "1",
                         "--schemes", "psgd", "--no-plot", "--out", str(tmp_path / "pred")]) == 0
    header = capsys.readouterr().out.split("time per epoch")[0]
    assert "WARNING: the profile is below its quality bar in fits this prediction uses: " \
           "step cnn threads=" in header
    meta = json.loads((tmp_path / "pred" / "predictions.json").read_text())["meta"]
    assert meta["profile_quality"].startswith("WARNING")


def test_a_profile_that_passes_says_nothing_and_an_older_one_is_judged(tmp_path, capsys):
    from calibrate.fits.report import show
    from contracts import profile as prof
    from contracts import quality as bar
    synthetic_workdir(tmp_path, np.random.default_rng(0))
    out = tmp_path / "p.json"
    assert fit.main(["--workdir", str(tmp_path), "--out", str(out), "--no-plot"]) == 0
    p = prof.load(out)
    assert p.provenance.bar and not p.provenance.below_bar
    assert bar.warning(p, "cnn") == "" and "every fit passes the bar" in show(str(out))
    shipped = prof.load_default()          # written before the mark: judged as it is read
    assert not shipped.provenance.bar
    assert bar.below_bar(shipped) and all("ps_cnn" in w for w in bar.below_bar(shipped))
    assert bar.warning(shipped, "cnn").startswith("Note:")
    assert bar.warning(shipped, "ps_cnn").startswith("WARNING:")


def test_below_the_bar_names_the_command_that_refits_the_saved_data(tmp_path, capsys):
    """The refusal gives the command that writes the profile from the kept measurements in
    seconds (marked), and that command does it."""
    import shlex
    synthetic_workdir(tmp_path, np.random.default_rng(0))
    noisy_steps(tmp_path, 0.6)
    found = quality.checks(fit.build(tmp_path), cores=2)
    said = quality.refusal(found, tmp_path, tmp_path / "my profile.json")
    command = said.split("in seconds: ")[1]
    assert command.startswith("python -m calibrate.fit --workdir ") and command.endswith("--force")
    argv = shlex.split(command)[3:]
    assert fit.main(argv + ["--no-plot"]) == 0
    assert (tmp_path / "my profile.json").exists()


def test_calibration_says_its_stages_and_time_up_front_and_its_wait(monkeypatch, capsys):
    """The expected time grows with the plan of a bigger machine; the wait for a quiet
    machine is said with the load it sees and how long it will wait."""
    from calibrate.probes import estimate, plan
    from real.records import load
    small, big = plan.full_plan(2), plan.full_plan(16)

    def labels(pl):
        return (["compute probe", "sharing probe", "server probe", "scheduler probe"]
                + [f"comm P={p} {a}" for p in pl.comm_workers for a in pl.comm_algorithms])
    two, sixteen = (estimate.expected_s(pl, labels(pl), False) for pl in (small, big))
    assert len(two) == 4 + 3 * 4 + 1 and len(sixteen) == 4 + 31 * 4 + 1
    assert sum(sixteen.values()) > 4 * sum(two.values())
    line = estimate.summary(two, 2, 120)
    assert line.startswith("17 stages on 2 cores, about ") and "120 s waiting" in line
    assert estimate.REFERENCE_MACHINE in line
    busy = iter([1.4, 0.1])
    monkeypatch.setattr(load, "machine_busy_cores", lambda window_s: next(busy))
    capsys.readouterr()
    waited = cal_main.wait_quiet(120, "before probing")
    err = capsys.readouterr().err
    assert waited["quiet"]
    assert "before probing: other processes use 1.40 cores (quiet: under 0.25); waiting up " \
           "to 120 s" in err


def test_spread_above_the_limit_is_said_and_written(tmp_path, capsys):
    """Issue 40, item 6: a probe part whose repeats scatter (here by 60%) warns in one line
    and writes its spread into its meta file; a steady one says nothing."""
    from calibrate.probes import probe
    noisy_steps(tmp_path, 0.6)
    found = probe.part_spread(tmp_path / "compute_steps.csv", "compute", "compute probe")
    err = capsys.readouterr().err
    assert found["above_limit"] and found["limit_cv"] == quality.SPREAD_LIMIT_CV
    assert "warning: compute probe: run-to-run spread" in err and len(err.splitlines()) == 1
    noisy_steps(tmp_path, 0.02)
    steady = probe.part_spread(tmp_path / "compute_steps.csv", "compute", "compute probe")
    assert not steady["above_limit"] and capsys.readouterr().err == ""


def test_a_workload_of_scattered_steps_warns_and_says_so_in_its_file(capsys):
    from calibrate.probes.workload import spread_verdict
    said = spread_verdict(0.68, 20)
    assert said["spread_limit_cv"] == quality.SPREAD_LIMIT_CV
    assert said["spread_warning"].startswith("run-to-run spread 68% of 20 timed steps")
    assert "warning: run-to-run spread 68%" in capsys.readouterr().err
    assert "spread_warning" not in spread_verdict(0.05, 20)


def test_a_line_that_fails_with_steady_steps_is_not_measured_again(tmp_path):
    """A step line below the bar from steady timings (not a line in the batch) is refused
    without measuring again: a repeat cannot change it."""
    rows = [{"model": "cnn", "threads": 1, "batch": b, "rep": r, "forward_s": 0.0,
             "backward_s": 0.0, "update_s": 0.0, "step_s": (1e-3 * (b / 16) ** 2) * (1 + 0.01 * r)}
            for b in (16, 32, 64, 128, 256) for r in range(5)]
    synthetic_workdir(tmp_path, np.random.default_rng(0))
    pd.DataFrame(rows).to_csv(tmp_path / "compute_steps.csv", index=False)
    found = quality.checks(fit.build(tmp_path), cores=2)
    bad = quality.failing(found)
    assert bad and all(c.steady for c in bad)
    assert quality.probes_to_repeat(found) == []
    assert "steady timings" in quality.refusal(found)
