"""Woken gloo ranks wait for a busy core (``CoreHost.wake``), and the balancer draws its
delay from the measured spread: closed forms, the profile fields and their fits."""
import json
import os
from dataclasses import replace

import pytest
import simpy

from calibrate.probes.sched_probe import _placements, balance_delays_s, wake_wait_s
from contracts.cluster import Cluster
from contracts.profile import ProfileError, from_dict, to_dict
from contracts.workload import Workload
from simulator.engine import simulate
from simulator.model.hardware.cores import CoreHost
from simulator.testing import make_profile

D = 0.004                       # wake wait (seconds)
W = 0.02                        # work of one job


def host(cores=2, wake_s=D, delays=()):
    env = simpy.Environment()
    return env, CoreHost(env, 0, cores, lambda k: 1.0, 1.0, wake_s, delays)


def on_core_at(env, h, procs):
    """Wake ``procs`` now; when each got its core."""
    got = {}
    for p in procs:
        h.wake(p).callbacks.append(lambda _ev, p=p: got.setdefault(p, env.now))
    return got


def test_woken_ranks_beyond_the_cores_are_let_in_one_wait_apart():
    """Four ranks leave a call on two cores and compute: two start at once, the third
    one wait later, the fourth two."""
    env, h = host()
    got = on_core_at(env, h, "abcd")
    env.run(until=1e-9)
    for p in list(got):                       # those on a core compute at once
        h.compute(W, proc=p)
    env.run(until=W / 2)
    assert got == {"a": 0.0, "b": 0.0, "c": pytest.approx(D), "d": pytest.approx(2 * D)}


def test_a_rank_that_sleeps_again_frees_its_core_at_once():
    """Ranks that go on to their next call (gloo's per-tensor allreduce) take no core:
    the ranks woken with them wait for nothing."""
    env, h = host()
    got = on_core_at(env, h, "abc")
    h.sleep("a")
    h.sleep("b")
    env.run(until=W)
    assert got == {"a": 0.0, "b": 0.0, "c": 0.0}


def test_an_idle_core_takes_a_waiting_rank_before_its_turn():
    env, h = host(wake_s=10 * W)
    h.compute(W, proc="x")
    h.compute(2 * W, proc="y")
    got = on_core_at(env, h, "c")
    env.run(until=3 * W)
    assert got["c"] == pytest.approx(W)       # x's core falls idle at W


def test_without_a_measured_wait_ranks_start_at_once():
    env, h = host(wake_s=0.0)
    h.compute(W, proc="x")
    h.compute(W, proc="y")
    got = on_core_at(env, h, "c")
    env.run(until=W / 2)
    assert got == {"c": 0.0}


def test_the_wait_slows_gather_scatter_on_an_oversubscribed_host_only():
    wl = Workload(model="toy", iterations=30, threads_per_worker=1)
    cl = Cluster(hosts=1, cores_per_host=2)
    base = make_profile(cores=2, balance_delay_s=0.025, cpu_fraction=0.5)
    waits = replace(base, wake_wait_s=0.004)
    two = [simulate("gather_scatter", 2, wl, cl, p).time_s for p in (base, waits)]
    four = [simulate("gather_scatter", 4, wl, cl, p).time_s for p in (base, waits)]
    assert two[1] == pytest.approx(two[0])    # a free core for every rank: no wait
    assert four[1] > four[0] * 1.02


def test_the_balancer_draws_its_delay_from_the_measured_spread_evenly():
    env, h = host(delays=(0.01, 0.02, 0.03, 0.04))
    drawn = [h._next_delay_s() for _ in range(400)]
    assert set(drawn) == {0.01, 0.02, 0.03, 0.04}
    assert all(90 <= drawn.count(d) <= 110 for d in set(drawn))
    env, h = host(delays=())
    assert h._next_delay_s() == 1.0           # no spread: the one delay


def test_profile_fields_round_trip_and_old_profiles_load():
    old = json.loads(json.dumps(to_dict(make_profile())))
    raw = {**old, "wake_wait_s": 0.0043, "balance_delays_s": [0.01, 0.03]}
    back = from_dict(raw)
    assert back.wake_wait_s == 0.0043 and back.balance_delays_s == (0.01, 0.03)
    del old["wake_wait_s"], old["balance_delays_s"]
    assert from_dict(old).wake_wait_s == 0.0 and from_dict(old).balance_delays_s == ()
    with pytest.raises(ProfileError, match="wake_wait_s"):
        from_dict({**raw, "wake_wait_s": -1})
    with pytest.raises(ProfileError, match="balance_delays_s"):
        from_dict({**raw, "balance_delays_s": [0.01, "soon"]})


def test_fits_of_the_scheduler_rows():
    assert wake_wait_s([{"later_s": 0.002}, {"later_s": 0.006}]) == pytest.approx(0.004)
    assert wake_wait_s([]) == 0.0
    rows = [{"moved_s": 0.03, "window_s": 0.15}, {"moved_s": float("nan"), "window_s": 0.15},
            {"moved_s": 0.01, "window_s": 0.15}]
    assert balance_delays_s(rows) == (0.01, 0.03, 0.15)


def test_placements_count_how_the_ranks_sat_on_the_cores():
    steps = [[(0.0, 0), (0.001, 1), (0.004, 0), (0.008, 1)],     # 2+2
             [(0.0, 1), (0.001, 0), (0.004, 1), (0.008, 1)],     # 3+1
             [(0.0, 0), (0.001, 1), (0.004, 1), (0.008, 0)],     # 2+2
             [(0.0, 1), (0.001, 1), (0.004, 1), (0.008, 1)]]     # 4
    assert _placements(steps) == "2+2 50%  3+1 25%  4 25%"


def test_wake_probe_times_two_gloo_ranks_training_on_one_core(monkeypatch):
    """One launch of two gloo ranks pinned to one core (``gloo_steps``, the probe's own); the
    wake probe's rows are the later rank of each of its steps (``wake_rows`` reads that
    launch, handed to it, rather than starting a second)."""
    from calibrate.probes import sched_probe
    pinned = min(os.sched_getaffinity(0))
    steps = sched_probe.gloo_steps(2, "linear", 16, repeats=10, core=pinned)
    assert len(steps) == 10 and all(len(s) == 2 and all(0 <= t < 1.0 for t, _ in s)
                                    for s in steps)
    assert {cpu for s in steps for _, cpu in s} == {pinned}     # the core each ran on
    launched = []
    monkeypatch.setattr(sched_probe, "gloo_steps", lambda *a: launched.append(a) or steps)
    rows = sched_probe.wake_rows("linear", 16, repeats=10)
    assert launched == [(2, "linear", 16, 10, pinned)]
    assert [r["later_s"] for r in rows] == [max(t for t, _ in s) for s in steps]
    assert all(r["later_s"] >= 0 for r in rows) and 0 < wake_wait_s(rows) < 1.0
