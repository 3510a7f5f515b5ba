"""The large-message probe's arithmetic (benchmarks.large_messages): what the ports alone take,
and the summary of its rows. No namespaces: the rows are made up here."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from benchmarks.large_messages import link_s, summary

N, RATE = 36_924_456, 120e6


@pytest.mark.parametrize("op, p, ports", [
    ("mpi_one", 4, 1), ("tcp_ring", 4, 1), ("mpi_incast", 4, 3), ("gloo_gather", 3, 2),
    ("mpi_allreduce", 4, 1.5), ("mpi_allreduce", 2, 1), ("gather_scatter_step", 4, 6)])
def test_the_ports_alone_carry_the_bytes_of_the_busiest_port(op, p, ports):
    assert link_s(op, N, p, RATE) == pytest.approx(ports * N / RATE)
    assert math.isnan(link_s("copy_fresh_one", N, p, RATE))


def test_summary_takes_rank_0_or_the_slowest_rank_and_adds_retransmits_over_ranks():
    rows = pd.DataFrame([
        {"op": op, "rank": r, "rep": k, "wall_s": w + 0.01 * r, "user_s": 0.0, "system_s": 0.002,
         "core_wait_s": 0.001, "retrans_segs": 5 * r, "machine_busy_s": 0.1}
        for op, w in (("mpi_incast", 0.93), ("mpi_allreduce", 0.5)) for r in range(4)
        for k in range(3)])
    s = summary(rows, N, RATE).set_index("op")
    assert s.loc["mpi_incast", "measured_ms"] == pytest.approx(930.0)      # rank 0's
    assert s.loc["mpi_allreduce", "measured_ms"] == pytest.approx(530.0)   # the last rank's
    assert s.loc["mpi_incast", "retrans_a_repeat"] == 30                   # 0 + 5 + 10 + 15
    assert s.loc["mpi_incast", "cpu_ms_rank"] == pytest.approx(2.0)
