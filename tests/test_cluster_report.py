"""simulator.output.cluster_report: held-out flags, and the error with measured stalls added."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from simulator.output import cluster_report as cr


def rows():
    base = {"hosts": 9, "runs": 1, "measured_ci_s": 0.0, "predicted_compute_s": 0.1,
            "predicted_comm_s": 1.0, "predicted_wait_s": 0.0}
    return pd.DataFrame([
        {**base, "scheme": "gather_scatter", "workers": 8, "bandwidth_bits_per_s": 20e6,
         "measured_s": 10.0, "predicted_s": 7.0, "held_out": True, "measured_stall_s": 2.5,
         "tcp_timeouts_per_epoch": 12.0},
        {**base, "scheme": "ps_async", "workers": 2, "bandwidth_bits_per_s": 100e6,
         "measured_s": 4.0, "predicted_s": 5.0, "held_out": False,
         "measured_stall_s": np.nan, "tcp_timeouts_per_epoch": np.nan}])


def test_stalls_added_error_beside_the_error():
    df = cr.with_flags(rows(), 100e6)
    assert list(df["unseen_rate"]) == [True, False]
    assert df["rel_error_stalls_added"].tolist() == pytest.approx([-0.05, 0.25])  # NaN: none
    df["rel_error"] = (df["predicted_s"] - df["measured_s"]) / df["measured_s"]
    errors = cr.error_table(df).set_index(["points", "scheme"])
    assert ("20 Mbit/s", "gather_scatter") in errors.index
    got = errors.loc[("all points", "gather_scatter")]
    assert got.median_error == pytest.approx(0.30)
    assert got.median_error_stalls_added == pytest.approx(0.05)
    table = cr.markdown_table(df)
    assert "| 2.50 (12.0) | -5.0% |" in table and "| - | +25.0% |" in table
    assert "5.0% / 5.0%" in cr.markdown_errors(errors.reset_index())
