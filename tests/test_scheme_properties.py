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
    assert real.lock_step == sim.lock_step
    assert [real.averaging_every(k) for k in (0, 5)] == [sim.averaging_every(k) for k in (0, 5)]


def test_what_the_stages_ask_a_real_scheme():
    """The properties real and calibrate ask instead of a name: the speedup's baseline,
    MPICH's allreduce flag, gloo's per-tensor allreduce runs, a replay's optimizers, and
    which runs measure core sharing (no rank waits between its steps)."""
    s = real_schemes.SCHEMES
    assert [n for n in s if s[n].baseline] == ["serial"]
    assert [n for n in s if s[n].picks_mpi_allreduce] == ["mpi_allreduce"]
    assert [n for n in s if s[n].allreduces_each_tensor] == ["allreduce"]
    assert [n for n in s if s[n].optimizer_per_worker] == ["hogwild"]
    assert [n for n in s if s[n].epochs_by_updates] == ["ps_async"]
    assert [n for n in s if not s[n].waits_between_steps(0)] == ["serial", "psgd", "hogwild"]
    assert s["psgd"].waits_between_steps(10) and s["async_avg"].waits_between_steps(0)


def test_the_steps_between_exchanges_of_the_weights():
    """K is the run's --average-every, else the scheme's default (async_avg's 10; psgd's
    0, at the end only); a scheme that exchanges every step has no K."""
    assert [SCHEMES["psgd"].averaging_every(k) for k in (0, 5)] == [0, 5]
    assert [SCHEMES["async_avg"].averaging_every(k) for k in (0, 5)] == [10, 5]
    assert SCHEMES["allreduce"].averaging_every(5) == 0 == SCHEMES["ps_sync"].averaging_every(0)


def test_every_simulated_scheme_sends_a_known_exchange():
    assert {s.exchange for s in SCHEMES.values()} <= set(EXCHANGES)
    assert set(real_schemes.SCHEMES) <= set(SCHEMES)
