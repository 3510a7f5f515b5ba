"""Inside an MPI allreduce whose ranks are all of their cores' processes, a message waits
for no turn on a core (``Routes.in_call``: MPICH's wait loop yields the core under
``MPI_THREAD_MULTIPLE``); a core-mate outside the call keeps the wait. Closed forms:
Rabenseifner at P = 4 on one host of 2 cores is its 4 steps of alpha + s * beta + reduce,
with the hand-off ``q / 4`` per step only where a core-mate is outside the call."""
from __future__ import annotations

import pytest
import simpy

from simulator.model.comm.closed_forms import handoff_s
from contracts.profile import Transport
from simulator.model.comm import MessageComm
from simulator.model.comm.costs import collective_time_s
from simulator.model.network import Routes
from simulator.model.recorder import Recorder

ALPHA, BETA, GAMMA, Q = 3e-6, 1e-10, 3e-11, 4e-3
N = 39_360.0                           # the CNN's gradients, float32


def _routes(ranks_on_host: int, cores: int = 2) -> Routes:
    h = handoff_s(ranks_on_host, cores, Q)
    pools = tuple(r % cores for r in range(ranks_on_host))
    return Routes((0,) * ranks_on_host, None, Transport("mpi", ALPHA, BETA, GAMMA),
                  (h,) * ranks_on_host, pools)


def _rabenseifner_4_s(wait_s: float) -> float:
    """Halving n/2, n/4 (each reduced), doubling n/4, n/2: one wait per step."""
    sizes, reduced = (N / 2, N / 4, N / 4, N / 2), (N / 2, N / 4, 0.0, 0.0)
    return sum(ALPHA + wait_s + s * BETA + g * GAMMA for s, g in zip(sizes, reduced))


def _simulated_s(routes: Routes, ranks) -> float:
    env = simpy.Environment()
    comm = MessageComm(env, routes, routes.shm, Recorder(routes.placement))
    for i in range(len(ranks)):
        env.process(comm._run("allreduce", ranks[i], ranks, i, N, 0,
                              "reduce_scatter_allgather", ("t",), False))
    env.run()
    return env.now


def test_all_ranks_of_the_cores_in_the_call_wait_for_no_turn():
    routes, ranks = _routes(4), (0, 1, 2, 3)
    assert routes.handoff_s[0] == pytest.approx(Q / 4)
    assert collective_time_s("allreduce", ranks, N, routes, GAMMA,
                             "reduce_scatter_allgather") == pytest.approx(_rabenseifner_4_s(0.0))
    assert _simulated_s(routes, ranks) == pytest.approx(_rabenseifner_4_s(0.0))


def test_a_core_mate_outside_the_call_keeps_the_wait():
    routes = _routes(5)                         # ranks 0, 2, 4 on core 0; 1, 3 on core 1
    ranks = (0, 1, 2, 3)                        # rank 4 computes: core 0 is held
    view = routes.in_call(ranks)
    assert view.handoff_s[:4] == (routes.handoff_s[0], 0.0, routes.handoff_s[2], 0.0)
    assert view.handoff_s[4] == routes.handoff_s[4]
    assert routes.in_call(ranks) is view        # remembered by the group


def test_other_collectives_and_unknown_pools_keep_the_wait():
    routes = _routes(4)
    plain = Routes(routes.placement, None, routes.shm, routes.handoff_s)
    assert plain.in_call((0, 1, 2, 3)) is plain
    wait = routes.handoff_s[0]
    assert collective_time_s("bcast", (0, 1), N, routes, GAMMA) == pytest.approx(
        ALPHA + wait + N * BETA)
