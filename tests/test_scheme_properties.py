"""A scheme's properties, stated once per stage, agree between the stages: real.schemes
(how real.train runs it) and simulator.model.schemes (how the model simulates it) name
the same schemes, the same parameter server and its rank, the same exchange per step and
the same default K; a record's ranks are the simulator's."""
from __future__ import annotations

import pytest

from real import schemes as real_schemes
from simulator.model.schemes import EXCHANGES, SCHEMES


@pytest.mark.parametrize("name", sorted(real_schemes.SCHEMES))
def test_real_and_simulated_schemes_agree(name):
    real, sim = real_schemes.SCHEMES[name], SCHEMES[name]
    assert real.exchange == sim.exchange and real.exchange in EXCHANGES
    assert real.server == sim.server
    assert real.default_every == sim.default_every
    assert real.ranks(4) == sim.ranks(4)
    assert sim.worker_ranks(4)[0] == real.first_worker_rank
    assert sim.server_rank(4) == (0 if real.server else None)
    assert (real.launch == "single") == sim.single_worker
    assert (real.launch == "own") == sim.single_host


def test_every_simulated_scheme_sends_a_known_exchange():
    assert {s.exchange for s in SCHEMES.values()} <= set(EXCHANGES)
    assert set(real_schemes.SCHEMES) <= set(SCHEMES)
