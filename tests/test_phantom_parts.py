"""benchmarks/phantom_parts.py: a point's gap split into outside the steps, the sleeps and
communication sums to predicted less measured, and the first spread is read where the ranks
first synchronised (made-up records, no run)."""
import pandas as pd
import pytest

from benchmarks.phantom_parts import point_row, record_parts, step_figures


def _iterations(first_waits=(0.0, 0.012), closing=False):
    """Two ranks, 4 steps of 32 ms compute + 1 ms comm; rank r's first row waits
    ``first_waits[r]``; with ``closing`` no step synchronises (waits 0) and a closing average
    (iteration -1) has rank 1 wait 20 ms."""
    rows = []
    for rank in (0, 1):
        for i in range(4):
            wait = 0.0 if closing or i else first_waits[rank]
            rows.append({"rank": rank, "epoch": 0, "iteration": i, "compute_s": 0.032,
                         "comm_s": 0.0 if closing else 0.001, "wait_s": wait})
        if closing:
            rows.append({"rank": rank, "epoch": 0, "iteration": -1, "compute_s": 0.0,
                         "comm_s": 0.002, "wait_s": 0.020 * rank})
    return pd.DataFrame(rows)


def _record(wall_s, epoch_s):
    return {"timings": {"train_wall_s": wall_s, "epoch_s": [epoch_s]},
            "testbed": {"checks": {"cpu": {"machines": [{"max_wait_share": 0.01}],
                                           "thread_waits": [[[0.004, 9], [0.0, 0]],
                                                            [[0.008, 9]]]}}}}


def test_first_spread_is_the_first_synchronisations_wait():
    assert step_figures(_iterations(), server=False)["first_spread_s"] == pytest.approx(0.012)
    closing = step_figures(_iterations(closing=True), server=False)
    assert closing["first_spread_s"] == pytest.approx(0.020)
    assert closing["comm_wait_s"] == pytest.approx(0.0)


def test_server_rank_is_left_out_of_the_step_figures():
    it = _iterations()
    it.loc[it["rank"] == 0, "compute_s"] = 0.0005       # a server's rows: no compute
    assert step_figures(it, server=True)["compute_s"] == pytest.approx(0.032)
    assert step_figures(it, server=False)["compute_s"] == pytest.approx(0.01625)


def test_gap_parts_sum_to_predicted_less_the_split_epoch():
    # rank 0's rows: 33 + 3 x 33 ms = 132 ms; its epoch 135 ms (loop 3 ms); window 150 ms
    # (setup 15 ms); the slowest first row is rank 1's 45 ms (skew -12 ms)
    parts = record_parts(_record(0.150, 0.135), _iterations(), server=False)
    n = 4
    pred = {"measured_s": 0.160, "predicted_s": 0.140, "predicted_compute_s": 0.031 * n,
            "predicted_comm_s": 0.001 * n, "predicted_wait_s": 0.0}
    row = point_row([parts], pred, slept_step_s=0.030)
    scale = n / (n - 1)
    assert row["outside_ms"] == pytest.approx((15 - 12) * scale)
    assert row["steps_ms"] == pytest.approx((3 + 99) * scale)
    assert row["gap_sleeps_ms"] == pytest.approx(-(32 - 31) * n)
    total = row["gap_outside_ms"] + row["gap_sleeps_ms"] + row["gap_comm_ms"]
    assert total == pytest.approx(140 - (3 + 3 + 99) * scale)
    assert row["error"] == pytest.approx(0.140 / 0.160 - 1)
    assert row["sleeps_overrun"] == pytest.approx(32 / 30 - 1)
    assert row["where"] == "comm"
    assert row["core_wait_step_ms"] == pytest.approx((4 + 8) / 2 / n)
    assert row["start_spread_ms"] != row["start_spread_ms"]          # not in this record
    rec = _record(0.150, 0.135)
    rec["timings"]["rank_starts_s"] = [0.0, 0.009]
    assert record_parts(rec, _iterations(), server=False)["start_spread_s"] == 0.009


def test_ddp_compute_row_is_not_set_against_the_sleeps():
    parts = record_parts(_record(0.150, 0.135), _iterations(), server=False)
    pred = {"measured_s": 0.160, "predicted_s": 0.140, "predicted_compute_s": 0.020 * 4,
            "predicted_comm_s": 0.0, "predicted_wait_s": 0.0}
    row = point_row([parts], pred, slept_step_s=0.030, overlaps=True)
    assert row["gap_sleeps_ms"] == 0.0 and row["where"] == "comm"


def test_onehost_gap_sets_the_rows_and_the_loop_against_the_models_compute():
    # benchmarks/onehost_parts: the same split, the loop's Python a step (rank 0's 3 ms over
    # 4 steps, scaled by 4/3 as epoch_parts scales it) beside the compute rows
    from benchmarks.onehost_parts import point_parts, step_count
    it = _iterations()
    parts = {**record_parts(_record(0.150, 0.135), it, server=False),
             "workers_steps": step_count(it, server=False), "cpu_s": 0.040}
    n = 4
    pred = {"measured_s": 0.160, "predicted_s": 0.140, "predicted_compute_s": 0.034 * n,
            "predicted_comm_s": 0.001 * n, "predicted_wait_s": 0.0}
    row = point_parts([parts], pred, loop_s=0.001, overlaps=False)
    scale = n / (n - 1)
    assert row["loop_step_ms"] == pytest.approx(3 * scale / n)
    assert row["gap_compute_ms"] == pytest.approx((34 - 32 - 3 * scale / n) * n)
    total = row["gap_outside_ms"] + row["gap_compute_ms"] + row["gap_comm_ms"]
    assert total == pytest.approx(140 - (3 + 3 + 99) * scale)
    assert row["predicted_loop_ms"] == 1.0 and row["cpu_step_ms"] == pytest.approx(40.0)
    assert point_parts([parts], pred, 0.001, overlaps=True)["gap_compute_ms"] == 0.0


def test_onehost_steps_are_a_workers_not_the_servers_pushes():
    from benchmarks.onehost_parts import step_count
    it = _iterations()
    server = pd.concat([it, it[it["rank"] == 0].assign(iteration=lambda d: d["iteration"] + 4)])
    assert step_count(server, server=True) == 4
    assert step_count(server, server=False) == 8


def test_onehost_calls_cpu_is_the_models_share_of_every_ring_step():
    # gloo's ring: 2 (P - 1) steps of alpha a call, cpu_fraction of them on a core, a call
    # per tensor; bytes free here. None for a scheme without per-tensor calls.
    from benchmarks.onehost_parts import calls_cpu_s
    from simulator.testing import make_profile
    prof = make_profile(layer_param_counts=(100, 10), alpha_s=1e-3, beta_s_per_byte=0.0,
                        cpu_fraction=0.5)
    assert calls_cpu_s(prof, "allreduce", 3, "toy") == pytest.approx(0.5 * 2 * 2 * 1e-3 * 2)
    assert calls_cpu_s(prof, "psgd", 3, "toy") != calls_cpu_s(prof, "psgd", 3, "toy")


def test_demand_share_is_the_most_asked_machines_cpu_over_its_cores():
    from benchmarks.phantom_parts import demand_share
    rec = {"load": {"machines": [{"cores": 2, "demand_cores": 4.4},
                                 {"cores": 4, "demand_cores": 2.0}]}}
    assert demand_share(rec) == pytest.approx(2.2)
    assert demand_share({}) != demand_share({})                      # no meter: NaN
    parts = record_parts({**_record(0.150, 0.135), **rec}, _iterations(), server=False)
    assert parts["demand_share"] == pytest.approx(2.2)


def test_errors_are_binned_by_the_cpu_asked_of_the_cores():
    from benchmarks.phantom_parts import DEMAND_BINS, by_measure, share_bin
    assert [share_bin(x, DEMAND_BINS) for x in (0.3, 1.0, 1.01, 2.0, 2.5, float("nan"))] == [
        "at most the cores", "at most the cores", "1-2x the cores", "1-2x the cores",
        "over 2x the cores", "unknown"]
    df = pd.DataFrame({"scheme": ["allreduce", "allreduce", "ddp", "ddp"],
                       "error": [0.02, 0.29, -0.05, -0.13],
                       "demand_share": [0.5, 2.2, 0.8, 1.5]})
    t = by_measure(df, "demand").set_index(["scheme", "bin"])
    assert t.loc[("all", "at most the cores"), "points"] == 2
    assert t.loc[("all", "at most the cores"), "worst"] == pytest.approx(0.05)
    assert t.loc[("all", "over 2x the cores"), "beyond goal"] == 1
    assert t.loc[("ddp", "1-2x the cores"), "beyond goal"] == 1
    assert ("ddp", "over 2x the cores") not in t.index


def test_errors_are_binned_by_the_core_waits_against_the_step():
    """A point's core waits a step over its step: the rank's threads' waits, a step, mean
    over the ranks, against the steps' time an iteration."""
    from benchmarks.phantom_parts import by_measure, markdown_bins, point_row
    parts = [{"steps": 10, "setup_s": 0.0, "skew_s": 0.0, "loop_s": 0.1, "rows_s": 0.9,
              "once_s": 0.0, "compute_s": 0.05, "comm_wait_s": 0.05, "first_spread_s": 0.0,
              "bar_share": 0.0, "core_wait_s": 0.025, "start_spread_s": 0.0,
              "demand_share": 0.5}]
    pred = {"measured_s": 1.0, "predicted_s": 1.0, "predicted_compute_s": 0.5,
            "predicted_comm_s": 0.5, "predicted_wait_s": 0.0}
    assert point_row(parts, pred, 0.05)["core_wait_share"] == pytest.approx(0.25)
    df = pd.DataFrame({"scheme": ["allreduce", "allreduce", "psgd"],
                       "error": [0.02, -0.30, 0.01], "core_wait_share": [0.05, 0.4, 0.10]})
    t = by_measure(df, "core_waits").set_index(["scheme", "bin"])
    assert t.loc[("all", "under 10% of the step"), "points"] == 2
    assert t.loc[("all", "over 20% of the step"), "beyond goal"] == 1
    assert "| core waits a step |" in markdown_bins(by_measure(df, "core_waits"), "core_waits")


def test_two_binnings_at_once_are_one_usage_error(tmp_path, capsys):
    from benchmarks.phantom_parts import main
    assert main([str(tmp_path), "--by-demand", "--by-core-waits"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not both" in err
