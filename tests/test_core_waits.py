"""benchmarks.core_waits: a record's figures of the cores, on a made-up record (no run)."""
import pytest

from benchmarks.core_waits import core_figures


def test_core_figures_of_a_made_up_record():
    """Two ranks over a 2 s window: rank 0's threads waited 0.3 + 0.1 s over 1000 + 1000 times
    on a core, rank 1's 0.2 s over 2000; the CPU check's bar 4%; each rank used 50% of a core
    over its 2 s window in 4 steps."""
    rec = {"timings": {"train_wall_s": 2.0},
           "testbed": {"checks": {"cpu": {
               "verdict": "pass",
               "machines": [{"max_wait_share": 0.04, "busy_cores": 1.25}],
               "thread_waits": [[[0.3, 1000], [0.1, 1000]], [[0.2, 2000]]]}}},
           "load": {"per_rank": [{"cpu_percent": 50.0, "window_s": 2.0}] * 2}}
    f = core_figures(rec, [0.9, 0.25, 0.25, 0.26])
    assert f["verdict"] == "pass"
    assert f["bar_share"] == 0.04
    assert f["waits_share"] == pytest.approx((0.4 + 0.2) / 2 / 2.0)
    assert f["wait_per_wakeup_s"] == pytest.approx(0.6 / 4000)
    assert f["cpu_per_rank_step_s"] == pytest.approx(0.5 * 2.0 / 4)
    assert f["busy_cores"] == 1.25
    assert f["step_s"] == pytest.approx(0.76 / 3)
