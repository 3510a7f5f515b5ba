"""compare leaves disturbed runs out (and says so), writes its files before printing;
validate's report shows the load it waited for and the calibration's quality."""
from __future__ import annotations

import json
import subprocess
import sys

from simulator import compare
from contracts import profile as profiles
from contracts import record
from pipelines.validate import wait_for_low_load
from tests.conftest import ROOT, py
from tests.test_compare import true_profile, write_records


def mark_disturbed(runs, run_ids):
    for run_id in run_ids:
        path = runs / run_id / record.RECORD_FILE
        rec = json.loads(path.read_text())
        rec["disturbed"] = True
        path.write_text(json.dumps(rec))


def test_disturbed_runs_are_left_out_unless_asked(tmp_path):
    prof = true_profile()
    write_records(tmp_path, prof)
    mark_disturbed(tmp_path, ["psgd-P2-r0", "psgd-P3-r1"])
    df = compare.compare(tmp_path, prof)
    assert df.attrs["disturbed_left_out"] == 2
    assert list(df["runs"]) == [2, 1, 1, 2] and df["disturbed_runs"].sum() == 0
    assert "left out 2 of 8 run(s): 2 disturbed" in compare.disturbed_note(df)
    kept = compare.compare(tmp_path, prof, include_disturbed=True)
    assert list(kept["runs"]) == [2, 2, 2, 2] and kept["disturbed_runs"].sum() == 2
    assert "kept 2 disturbed" in compare.disturbed_note(kept)


def test_only_disturbed_runs_is_a_one_line_error(tmp_path):
    prof = true_profile()
    write_records(tmp_path / "runs", prof)
    mark_disturbed(tmp_path / "runs", [d.name for d in record.find_runs(tmp_path / "runs")])
    r = py("simulator.compare", str(tmp_path / "runs"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "left out 8 of 8 run(s): 8 disturbed" in r.stderr
    assert "--include-disturbed keeps them" in r.stderr


def test_compare_piped_into_head_keeps_its_files(tmp_path):
    prof = true_profile()
    write_records(tmp_path / "runs", prof)
    mark_disturbed(tmp_path / "runs", ["psgd-P1-r0"])
    profiles.save(prof, tmp_path / "p.json")
    cmd = (f"{sys.executable} -m simulator.compare {tmp_path / 'runs'} --profile "
           f"{tmp_path / 'p.json'} --out {tmp_path / 'out'} | head -1")
    done = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.stdout.startswith("scheme") and len(done.stdout.splitlines()) == 1
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr
    assert (tmp_path / "out" / "compare.csv").stat().st_size > 0
    assert (tmp_path / "out" / "compare-psgd.png").stat().st_size > 0
    full = py("simulator.compare", str(tmp_path / "runs"), "--profile", str(tmp_path / "p.json"),
              "--out", str(tmp_path / "out2"))
    assert "left out 1 of 8 run(s): 1 disturbed" in full.stdout and full.returncode == 0


def test_validate_report_shows_the_calibration_quality(tmp_path):
    prof = true_profile()
    write_records(tmp_path / "runs", prof)
    mark_disturbed(tmp_path / "runs", ["psgd-P4-r0"])
    profiles.save(prof, tmp_path / "profile.json")
    (tmp_path / "calibration").mkdir()
    (tmp_path / "calibration" / "quality.json").write_text(json.dumps({
        "bar": {}, "bar_text": "step lines: R² >= 0.98", "passed": False, "forced": True,
        "checks": [{"fit": "step cnn threads=1", "figures": "R² 0.9490", "ok": False,
                    "probe": "compute"}],
        "quiet_wait": {"waits": [{"when": "before probing", "quiet": False, "waited_s": 120.0,
                                  "busy_cores": 1.4, "quiet_cores": 0.25}]},
        "probe_repeats": {"compute probe": 2}}))
    r = py("pipelines.validate", "--workers", "1-4", "--out", str(tmp_path),
           "--skip-sweep", "--skip-calibrate")
    assert r.returncode == 0, r.stderr
    report = (tmp_path / "report.md").read_text()
    assert "some fits are below the bar** (written with --force)" in report
    assert "| step cnn threads=1 | R² 0.9490 | **below** |" in report
    assert "before probing: waited 120 s; other processes then used 1.4 cores (still busy)" in report
    assert "compute probe: measured again 2 time(s)" in report
    assert "left out 1 of 8 run(s): 1 disturbed" in report


def test_waiting_for_a_low_load_average_is_bounded_and_reported():
    assert "waited 0 s for the 1-minute load average to fall" in wait_for_low_load(1e9, 5)
    note = wait_for_low_load(0.0, 0.2, poll_s=0.1)
    assert "(the limit)" in note and "busy machine" in note


def test_partial_results_still_count_and_damaged_iterations_are_named(tmp_path):
    """Issue 40, items 3 and 9: one run disturbed, one with a damaged iterations.csv, one
    without it: compare exits 0 with the rest, names each file (the damaged one by its
    line) and says how many it left out."""
    from tests.test_compare import _iterations
    prof = true_profile()
    runs = tmp_path / "runs"
    write_records(runs, prof)
    profiles.save(prof, tmp_path / "p.json")
    mark_disturbed(runs, ["psgd-P2-r0"])
    _iterations(runs / "psgd-P3-r0", 0.1, 0.1, 5)
    damaged = runs / "psgd-P3-r0" / record.ITER_FILE
    damaged.write_text(damaged.read_text()[:-10])           # its last line cut short
    (runs / "psgd-P4-r1" / record.ITER_FILE).unlink()
    r = py("simulator.compare", str(runs), "--profile", str(tmp_path / "p.json"),
           "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    said = r.stderr.splitlines()
    assert any("psgd-P3-r0" in ln and "iterations.csv" in ln and "line 11" in ln
               for ln in said), r.stderr
    assert any("psgd-P4-r1" in ln and "iterations.csv" in ln for ln in said), r.stderr
    assert "left out 1 of 6 run(s): 1 disturbed" in r.stdout
    df = compare.compare(runs, prof)
    assert list(df["runs"]) == [2, 1, 1, 1]


def test_testbed_bound_runs_are_left_out_and_counted(tmp_path):
    prof = true_profile()
    write_records(tmp_path / "runs", prof)
    for run_id in ("psgd-P2-r0", "psgd-P2-r1"):
        path = tmp_path / "runs" / run_id / record.RECORD_FILE
        rec = json.loads(path.read_text())
        rec["testbed_bound"] = True
        path.write_text(json.dumps(rec))
    df = compare.compare(tmp_path / "runs", prof)
    assert df.attrs["left_out"] == {"testbed-bound": 2} and 2 not in list(df["workers"])
    note = compare.disturbed_note(df)
    assert "left out 2 of 8 run(s): 2 testbed-bound" in note
    assert "--include-testbed-bound keeps them" in note
    kept = compare.compare(tmp_path / "runs", prof, keep=("testbed-bound",))
    assert list(kept["runs"]) == [2, 2, 2, 2]
    r = py("simulator.compare", str(tmp_path / "runs"), "--out", str(tmp_path / "out"))
    assert r.returncode == 0 and "2 testbed-bound" in r.stdout + r.stderr
