"""benchmarks.scatter_order: gloo's scatter with the root's pieces in turn or sharing its port."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.scatter_order import main, pieces_together
from simulator.model.comm import gloo
from simulator.testing import gloo_hosts

BANDWIDTH = 1e8       # bytes/s, no latency, no bursts: closed forms


def scatter_arrivals_s(p: int, tau_s: float) -> list[float]:
    """When ranks 1..P-1 (one a host) have their piece of one gloo scatter of tau's bytes."""
    env, ranks, comm = gloo_hosts(p, BANDWIDTH)
    got = {}

    def rank(r):
        yield from comm.scatter(r, ranks, tau_s * BANDWIDTH, root=0)
        got[r] = env.now
    for r in ranks:
        env.process(rank(r))
    env.run()
    return [got[r] for r in range(1, p)]


@settings(max_examples=20, deadline=None)
@given(p=st.integers(2, 9))
def test_pieces_in_turn_arrive_one_apart_and_together_all_at_the_drains_end(p):
    """In turn (the model): rank k has its piece k tau after the start. Together (every
    connection's window below its piece, the limit): the P - 1 pieces share the port's
    rate and all arrive when it has drained, (P - 1) tau. The model is restored after."""
    tau = 1e-3
    in_turn = gloo._in_turn
    assert scatter_arrivals_s(p, tau) == pytest.approx([k * tau for k in range(1, p)])
    with pieces_together():
        assert scatter_arrivals_s(p, tau) == pytest.approx([(p - 1) * tau] * (p - 1))
    assert gloo._in_turn is in_turn


def test_a_folder_that_is_no_phantom_validation_is_a_usage_error(tmp_path, capsys):
    assert main([str(tmp_path), "--out", str(tmp_path / "o.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not a phantom validation folder" in err
    assert not (tmp_path / "o.csv").exists()
