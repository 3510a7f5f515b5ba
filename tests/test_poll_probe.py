"""calibrate.poll_probe: busy-waiting MPI ranks on shared cores, measured beside the
time-slice model's hand-off."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from calibrate.probes.poll_probe import summarize, with_model
from tests.conftest import ROOT


def test_rows_are_medians_over_ranks_beside_the_model_handoff():
    out = {"ranks": 8, "bytes": 400, "calls": 10, "per_rank": [
        {"call_s": t, "core_share": 0.25, "voluntary_per_call": 0.0,
         "involuntary_per_call": i} for t, i in ((1e-3, 10.0), (2e-3, 12.0), (3e-3, 14.0))]}
    row = with_model(summarize(out), cores=2, quantum_s=0.004)
    assert row["call_s"] == pytest.approx(2e-3) and row["involuntary_per_call"] == 12.0
    assert row["ranks_per_core"] == 4
    assert row["model_handoff_s"] == pytest.approx((4 - 1) ** 2 * 0.004 / (2 * 4))


@pytest.mark.slow
def test_two_ranks_run_and_report_every_field():
    done = subprocess.run([sys.executable, "-m", "calibrate.poll_probe", "--ranks", "2",
                           "--calls", "5", "--bytes", "1024", "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    (row,) = json.loads(done.stdout)
    assert row["ranks"] == 2 and row["bytes"] == 1024 and row["calls"] == 5
    assert row["call_s"] > 0 and 0 < row["core_share"] <= 1.5
    assert row["model_handoff_s"] == 0.0          # 2 ranks on 2 cores: nobody waits


@pytest.mark.parametrize("argv", [["--ranks", "1"], ["--bytes", "0"], ["--calls", "x"]])
def test_bad_input_is_one_line_and_exit_2(argv, capsys):
    from calibrate.probes.poll_probe import main
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip()
