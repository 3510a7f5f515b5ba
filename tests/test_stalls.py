"""simulator.stalls: retransmission stalls told apart from a run's typical step."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from simulator import stalls


def iterations(step_s_per_iteration, ranks=2, first_rank=0):
    """An iterations table whose slowest rank takes the given time at each iteration."""
    rows = []
    for i, t in enumerate(step_s_per_iteration):
        for rank in range(first_rank, first_rank + ranks):
            slow = rank == first_rank
            rows.append({"rank": rank, "epoch": 0, "iteration": i, "compute_s": 0.01,
                         "comm_s": t - 0.01 if slow else 0.02, "wait_s": 0.0})
    return pd.DataFrame(rows)


def test_stalls_of_a_retransmission_timeout_counted_beyond_the_typical_step():
    # warm-up 1.0 s (left out), typical 0.17 s, two steps stalled by one and two RTOs
    steps = [1.0, 0.17, 0.17, 0.37, 0.17, 0.17, 0.57, 0.17, 0.30]
    got = stalls.stall_s(iterations(steps), "mpi_allreduce")
    # 0.2 + 0.4 s beyond 0.17; 0.13 s (below 3/4 of RtoMin) is not a stall; scaled 9/8
    assert got == pytest.approx((0.2 + 0.4) * 9 / 8)


def test_server_rank_left_out_and_asynchronous_schemes_have_none():
    steps = [0.5, 0.1, 0.1, 0.1, 0.5]
    it = iterations(steps, ranks=2, first_rank=1)
    server = pd.DataFrame([{"rank": 0, "epoch": 0, "iteration": i, "compute_s": 0.0,
                            "comm_s": 9.0, "wait_s": 0.0} for i in range(5)])
    both = pd.concat([server, it], ignore_index=True)
    assert stalls.stall_s(both, "ps_sync") == pytest.approx(0.4 * 5 / 4)
    assert stalls.stall_s(both, "ps_async") is None and stalls.stall_s(it, "serial") is None
    assert stalls.stall_s(it, "psgd") is None          # steps alone, one average at the end
    assert stalls.stall_s(iterations([0.5, 0.1]), "allreduce") is None     # too few


def test_figures_mean_over_runs_per_epoch():
    a = {"it": iterations([1.0, 0.1, 0.1, 0.1, 0.5]),
         "comm": {"tcp": [{"host": "h0", "ranks": [0], "timeouts": 3},
                          {"host": "h1", "ranks": [1], "timeouts": 1}]}}
    b = {"it": iterations([1.0, 0.1, 0.1, 0.1, 0.1]), "comm": {"bytes_sent_per_rank": [0]}}
    got = stalls.stall_figures([a, b], "allreduce", 2, lambda r: r["it"])
    assert got["measured_stall_s"] == pytest.approx((0.4 * 5 / 4 + 0.0) / 2 / 2)
    assert got["tcp_timeouts_per_epoch"] == 2.0                     # (3 + 1) / 2 epochs
    none = stalls.stall_figures([b], "ps_async", 1, lambda r: r["it"])
    assert np.isnan(none["measured_stall_s"]) and np.isnan(none["tcp_timeouts_per_epoch"])
