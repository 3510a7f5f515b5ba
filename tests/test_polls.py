"""Sleeping polls and the acknowledged sends that wait for them (``model.comm.polls``):
the schedule of ``real.launch.dist.wait``, the closed forms, and ps_sync's sends of w."""
from __future__ import annotations

from dataclasses import replace

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.cluster import Cluster, Link
from contracts.workload import Workload
from real.launch import dist
from simulator.engine import simulate
from simulator.model.comm import polls
from simulator.model.config import SchemeConfig
from simulator.testing import make_profile

POLL_S = 1e-3
BACKED_OFF_S = 1.55e-3          # 50 + 100 + 200 + 400 + 800 us: the sleeps reach 1 ms


def test_the_schedule_is_the_one_real_runs_wait_with():
    assert polls.FIRST_SLEEP_S == dist.FIRST_SLEEP_S
    assert polls.checks_s(POLL_S, 2e-3) == pytest.approx(
        [0, 50e-6, 150e-6, 350e-6, 750e-6, 1.55e-3, 2.55e-3])
    assert polls.checks_s(0.2e-3, 0.6e-3) == pytest.approx(
        [0, 50e-6, 150e-6, 350e-6, 550e-6, 750e-6])
    assert [polls.interval_s(w, POLL_S) for w in (0, 60e-6, 0.2e-3, 1e-3, 5e-3)] == \
        pytest.approx([50e-6, 100e-6, 200e-6, 800e-6, 1e-3])
    assert polls.wake_lag_s(5e-3, POLL_S) == pytest.approx(POLL_S / 2)
    assert polls.wake_lag_s(5e-3, 0.0) == 0.0


def test_an_ack_right_after_the_send_is_seen_at_the_doubling_checks():
    """Ack at u uniform on [0, 1 ms]: seen at 50, 150, 350, 750 or 1550 us with
    probabilities 0.05, 0.1, 0.2, 0.4, 0.25."""
    expected = .05 * .05 + .1 * .15 + .2 * .35 + .4 * .75 + .25 * 1.55
    assert polls.ack_seen_s(0.0, POLL_S, POLL_S) == pytest.approx(expected * 1e-3)
    assert polls.ack_seen_s(0.1e-3, 0.0, POLL_S) == pytest.approx(150e-6)   # no spread


@given(st.floats(BACKED_OFF_S, 1.0))
def test_after_the_back_off_a_send_costs_its_arrival_and_one_poll(arrival_s):
    """The receiver's half poll and the sender's next check on its 1 ms grid: another half."""
    assert polls.ack_seen_s(arrival_s, POLL_S, POLL_S) == pytest.approx(arrival_s + POLL_S,
                                                                         rel=1e-9)


@pytest.mark.parametrize("p", [1, 2, 4])
def test_ps_sync_sends_of_w_wait_for_the_workers_acks(p):
    """w takes m = 2 ms to arrive (past the back-off, so every wait has reached 1 ms): each
    send holds the server m + poll, a worker starts poll / 2 after its w arrived, its push
    takes m, and the server, waiting for the last one, sees it poll / 2 after it arrived and
    copies it out of libfabric's buffer (n at the host's copy rate, ``take_pushes``), so an
    iteration is step + (P + 1) m + (P - 1) poll + poll / 2 + poll / 2 + copy (spinning
    ranks: step + (P + 1) m, ``test_sim_model``), and the answers to the last pushes
    P (m + poll)."""
    prof = make_profile(cores=1, update_intercept_s=0.0, update_s_per_param=0.0)
    n, alpha = prof.models[0].grad_bytes, 1e-5
    beta = (2e-3 - alpha) / n
    m = alpha + n * beta
    step_s = prof.models[0].step_fit(1).step_s(64)
    polled = replace(prof, transports=tuple(replace(t, poll_s=POLL_S) for t in prof.transports))
    cluster = Cluster(hosts=p + 1, cores_per_host=1,
                      link=Link(bandwidth_bytes_per_s=1 / beta, latency_s=alpha))
    r = simulate(SchemeConfig("ps_sync", fidelity="message"), p, Workload(model="toy",
                                                                          iterations=3),
                 cluster, polled)
    copy_s = n * prof.transports[0].beta_s_per_byte
    per_iteration = step_s + (p + 1) * m + (p - 1) * POLL_S + POLL_S / 2 + POLL_S / 2 + copy_s
    assert r.time_s == pytest.approx(3 * per_iteration + p * (m + POLL_S), rel=1e-9)


def test_mpi_init_connects_rank_0_to_its_dissemination_partners_only():
    """strace of ranks that only call MPI_Init (and ``benchmarks/first_contact.py``):
    rank 0 connected to every peer at 4 ranks, and not to 3 at 6, nor to 3, 6, 7, 10 at 13."""
    from simulator.model.comm.mpich import init_peers
    assert init_peers(0, 4) == {1, 2, 3}
    assert set(range(1, 6)) - init_peers(0, 6) == {3}
    assert set(range(1, 13)) - init_peers(0, 13) == {3, 6, 7, 10}
    assert len(init_peers(0, 17)) == 8 and len(init_peers(0, 9)) == 6


def test_ps_sync_first_w_opens_the_connections_mpi_init_left_closed():
    """P = 5 (six ranks): only worker 3 is not connected to the server by MPI_Init. The
    first w goes to workers 1 and 2 in m + poll = 3 ms each (m = 2 ms, as above); worker 3's
    waits for the connection (4 latencies, and one and a half of the worker's 1 ms polls),
    then the worker, which answered at a poll and polls every 1 ms from there, sees the w
    that arrived m + alpha (2.01 ms) after that answer 3 ms after it, and the server, whose
    wait began when w left, sees the ack at its check of 3.55 ms; workers 4 and 5 take
    3 ms each again. The later iterations' sends are as before."""
    prof = make_profile(cores=1, update_intercept_s=0.0, update_s_per_param=0.0)
    n, alpha = prof.models[0].grad_bytes, 1e-5
    beta = (2e-3 - alpha) / n
    m = alpha + n * beta
    polled = replace(prof, transports=tuple(replace(t, poll_s=POLL_S) for t in prof.transports))
    cluster = Cluster(hosts=6, cores_per_host=1,
                      link=Link(bandwidth_bytes_per_s=1 / beta, latency_s=alpha))
    r = simulate(SchemeConfig("ps_sync", fidelity="message"), 5, Workload(model="toy",
                                                                          iterations=2),
                 cluster, polled, trace=True)
    rows = sorted((e["ts"] * 1e-6, (e["ts"] + e["dur"]) * 1e-6, e["tid"], e["name"])
                  for e in r.trace["traceEvents"] if e.get("ph") == "X")
    sends = [(t0, t1) for t0, t1, rank, name in rows if rank == 0 and name == "send w"]
    got_w = [t1 for t0, t1, rank, name in rows if rank == 3 and name == "read w"]
    opened = 4 * alpha + 1.5e-3 + 3.55e-3
    assert sends[0][1] - sends[0][0] == pytest.approx(4 * (m + POLL_S) + opened, rel=1e-9)
    assert sends[1][1] - sends[1][0] == pytest.approx(5 * (m + POLL_S), rel=1e-9)
    assert got_w[0] == pytest.approx(2 * (m + POLL_S) + 3 * alpha + 1.5e-3 + 3e-3, rel=1e-9)


def test_async_avg_first_push_opens_its_connection_at_rank_0s_progress_calls():
    """async_avg's world is its P ranks: at P = 6 on six hosts MPI_Init leaves worker 3
    unconnected to rank 0 (at 12: 3, 5, 6, 7, 9; none on one host). Its first push waits three
    latencies, rank 0's next progress call (the Iprobe at 1 s accepts), the one after (rank 0
    starts serving at 1.5 s: from there its calls progress all along) and one latency back;
    a connected worker's push, or worker 3's second, does not wait."""
    from types import SimpleNamespace
    from simulator.model.comm.mpich import unopened_peers
    from simulator.model.schemes.holder import Holder
    alpha = 1e-5
    routes = SimpleNamespace(link=Link(bandwidth_bytes_per_s=1e8, latency_s=alpha),
                             placement=list(range(12)))
    assert unopened_peers(routes, 0, range(1, 6)) == {3}
    assert unopened_peers(routes, 0, range(1, 12)) == {3, 5, 6, 7, 9}
    assert unopened_peers(SimpleNamespace(link=None, placement=[0] * 6), 0, range(1, 6)) == set()
    env = simpy.Environment()
    setup = SimpleNamespace(workers=[SimpleNamespace(rank=r) for r in range(6)],
                            plan=SimpleNamespace(avg_every=1), comm=SimpleNamespace(routes=routes))
    holder, done = Holder(env, setup), {}

    def rank0():
        yield env.timeout(1.0)
        holder.progress()                 # an Iprobe that finds nothing
        yield env.timeout(0.5)
        holder.serving = True             # serving: progress all along
        holder.progress()

    def push(src, key):
        yield from holder.connect(src)
        done[key] = env.now

    env.process(rank0())
    for src, key in ((3, "first"), (1, "connected")):
        env.process(push(src, key))
    env.run(until=2.0)
    assert done == {"connected": 0.0, "first": pytest.approx(1.5 + alpha, abs=1e-12)}
    env.process(push(3, "second"))
    env.run(until=3.0)
    assert done["second"] == pytest.approx(2.0)


def test_ps_async_answers_wait_for_the_workers_acks():
    """One worker, w and the push 2 ms each: the server, idle since its last answer, takes
    the push poll / 2 late; the worker, waiting since its push saw the ack, takes w poll / 2
    late: poll more an iteration than with spinning ranks, and the server's last answer
    ends poll / 2 after the worker took it (its next check after the ack); the first w
    (``first_w``, sent as ps_sync's) is taken poll / 2 late too."""
    prof = make_profile(cores=1, update_intercept_s=0.0, update_s_per_param=0.0)
    n, alpha = prof.models[0].grad_bytes, 1e-5
    cluster = Cluster(hosts=2, cores_per_host=1,
                      link=Link(bandwidth_bytes_per_s=n / (2e-3 - alpha), latency_s=alpha))
    polled = replace(prof, transports=tuple(replace(t, poll_s=POLL_S) for t in prof.transports))
    runs = [simulate(SchemeConfig("ps_async", fidelity="message"), 1,
                     Workload(model="toy", iterations=3), cluster, pr) for pr in (prof, polled)]
    assert runs[1].time_s - runs[0].time_s == pytest.approx(4 * POLL_S, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 2)),
                min_size=1, max_size=6))
def test_the_servers_loop_schedules_what_a_simpy_resource_does(pushes):
    """ps_async's ``Loop`` against ``simpy.Resource(env, 1)``: processes that wait a whole
    number of ticks (ties on purpose), take the loop, hold it and release it (at once, or
    from a timeout's callback, as a sleeping poll's ack does) and go on at once, beside a
    process that records every tick: the same order of grants, releases, steps after them
    and ticks, at the same times."""
    from simulator.model.schemes.ps import Loop

    def run(make):
        env = simpy.Environment()
        loop, log = make(env), []

        def ticks():
            for k in range(12):
                log.append(("tick", k, env.now))
                yield env.timeout(1)

        def push(name, delay, hold, later):
            yield env.timeout(delay)
            turn = loop.request()
            yield turn
            log.append(("granted", name, env.now))
            yield env.timeout(hold)
            if later:
                env.timeout(later).callbacks.append(lambda _ev: loop.release(turn))
            else:
                loop.release(turn)
            log.append(("released", name, env.now))
            yield env.timeout(0)                 # behind the release's own event
            log.append(("after", name, env.now))
        env.process(ticks())
        for name, (delay, hold, later) in enumerate(pushes):
            env.process(push(name, delay, hold, later))
        env.run()
        return log
    assert run(Loop) == run(lambda env: simpy.Resource(env, capacity=1))
