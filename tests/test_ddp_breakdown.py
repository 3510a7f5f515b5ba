"""benchmarks/ddp_breakdown.py: a record's steady epoch split into setup, the loop's Python,
rows and the first-row skew sums to what simulator.compare measures (steady_epoch_s), on a
made-up record (no run)."""
import importlib.util
from pathlib import Path

import pandas as pd
import pytest

from simulator.compare import steady_epoch_s

_SPEC = importlib.util.spec_from_file_location(
    "ddp_breakdown", Path(__file__).resolve().parents[1] / "benchmarks" / "ddp_breakdown.py")
ddp_breakdown = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(ddp_breakdown)


def _record_and_rows():
    """Two ranks, 4 steps: rank 0's rows 50, 40, 40, 40 ms; rank 1's first row 60 ms."""
    rows = []
    for rank, first in ((0, 0.050), (1, 0.060)):
        for i in range(4):
            rows.append({"rank": str(rank), "epoch": "0", "iteration": str(i),
                         "compute_s": str(first if i == 0 else 0.035), "comm_s": "0.003",
                         "wait_s": "0.002"})
    # rank 0: rows 0.055 + 3 x 0.040 = 0.175 s; its epoch 0.180 s (loop 5 ms); the window
    # 0.210 s (setup 30 ms)
    rec = {"timings": {"train_wall_s": 0.210, "epoch_s": [0.180]}}
    return rec, rows


def test_parts_sum_to_compares_steady_epoch():
    rec, rows = _record_and_rows()
    parts = ddp_breakdown.epoch_parts(rec, rows)
    scale = 4 / 3
    assert parts["setup_s"] == pytest.approx(0.030 * scale)
    assert parts["loop_s"] == pytest.approx(0.005 * scale)
    assert parts["rows_s"] == pytest.approx(0.120 * scale)
    assert parts["skew_s"] == pytest.approx((0.055 - 0.065) * scale)
    assert parts["step_rows_s"] == pytest.approx(0.040)
    table = pd.DataFrame(rows).astype({"rank": int, "iteration": int, "compute_s": float,
                                       "comm_s": float, "wait_s": float})
    rec["_iterations"] = table
    assert parts["steady_s"] == pytest.approx(steady_epoch_s(rec, "ddp", 1), abs=1e-12)


def test_a_closing_average_counts_once_not_as_a_step():
    """psgd's closing average (rows of iteration -1: 300 ms on rank 0, 500 ms on rank 1,
    inside rank 0's epoch and the window) is added once, the slowest worker's, and is not
    scaled by n / (n - 1) with the steps; compare's steady epoch agrees."""
    rec, rows = _record_and_rows()
    for rank, avg_s in ((0, 0.300), (1, 0.500)):
        rows.append({"rank": str(rank), "epoch": "0", "iteration": "-1", "compute_s": "0",
                     "comm_s": str(avg_s), "wait_s": "0"})
    rec = {"timings": {"train_wall_s": 0.210 + 0.500, "epoch_s": [0.180 + 0.500]}}
    parts = ddp_breakdown.epoch_parts(rec, rows)
    assert parts["once_s"] == pytest.approx(0.500)
    assert parts["loop_s"] == pytest.approx(0.005 * 4 / 3)
    rec["_iterations"] = pd.DataFrame(rows).astype(
        {"rank": int, "iteration": int, "compute_s": float, "comm_s": float, "wait_s": float})
    steady_s = steady_epoch_s(rec, "psgd", 1)
    assert steady_s == pytest.approx((0.210 - 0.065) * 4 / 3 + 0.500)
    assert parts["steady_s"] == pytest.approx(steady_s, abs=1e-12)


def test_too_few_steps_is_an_error():
    rec, rows = _record_and_rows()
    with pytest.raises(ValueError, match="fewer than 3"):
        ddp_breakdown.epoch_parts(rec, [r for r in rows if int(r["iteration"]) < 2])
