"""Per-core run queues (``simulator.cores``): closed forms and the limits it must meet."""
import json

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import simpy

from calibrate.probes.sched_probe import balance_delay_s
from contracts.cluster import Cluster
from contracts.profile import ProfileError, from_dict, to_dict
from contracts.workload import Workload
from simulator.engine import simulate
from simulator.model.config import SchemeConfig
from simulator.model.hardware.cores import CoreHost
from simulator.testing import make_profile

W = 0.01                      # seconds of work of one job
CL2 = Cluster(hosts=1, cores_per_host=2)


def finish_times(works, delay_s, cores=2, pollers=()):
    """Run jobs (proc, work_s) that start at 0 on a CoreHost; their finish times."""
    env = simpy.Environment()
    host = CoreHost(env, 0, cores, lambda k: 1.0, delay_s)
    for proc in pollers:
        host.start_polling(proc)
    done = {}
    for proc, work in works:
        host.compute(work, 1, proc in pollers, proc).callbacks.append(
            lambda _ev, p=proc: done.setdefault(p, env.now))
    env.run(until=100 * W)
    return done


def test_three_jobs_on_two_cores_sit_two_and_one_until_the_balancer_acts():
    t = finish_times([("a", W), ("b", W), ("c", W)], delay_s=10 * W)
    # a -> core 0, b -> core 1, c -> the less loaded core 0: a and c share it
    assert t["b"] == pytest.approx(W)
    assert t["a"] == pytest.approx(2 * W) and t["c"] == pytest.approx(2 * W)


def test_an_idle_core_takes_a_job_over_after_the_delay():
    """a, c share core 0; b (W/4) leaves core 1 idle at W/4; at W/2 core 1 takes over
    a, which has 3W/4 left, as has c: both end at W/2 + 3W/4 (fluid: 9W/8)."""
    t = finish_times([("a", W), ("b", W / 4), ("c", W)], delay_s=W / 2)
    assert t["b"] == pytest.approx(W / 4)
    assert t["a"] == pytest.approx(5 * W / 4) and t["c"] == pytest.approx(5 * W / 4)


def test_a_short_delay_tends_to_fluid_sharing():
    t = finish_times([("a", W), ("b", W), ("c", W)], delay_s=W / 1000)
    assert max(t.values()) == pytest.approx(1.5 * W, rel=0.01)


def test_a_poller_holds_its_core():
    """Two pollers, one per core: a third process's job shares a core with a poller
    (half speed), wherever the balancer moves it; fluid sharing would give 2/3."""
    t = finish_times([("x", W)], delay_s=W / 10, pollers=("p", "q"))
    assert t["x"] == pytest.approx(2 * W)
    # a poller's own job runs in its place, alone on its core
    t = finish_times([("p", W)], delay_s=W / 10, pollers=("p", "q"))
    assert t["p"] == pytest.approx(W)


def test_short_wake_ups_fill_the_least_loaded_cores_as_a_fluid():
    env = simpy.Environment()
    host = CoreHost(env, 0, 2, lambda k: 1.0, 10 * W)
    ends = {}
    for p in ("a", "b"):                     # a on core 0, b on core 1
        host.compute(10 * W, 1, False, p)
    for p in ("x", "y", "z"):                # three calls' CPU over two busy cores
        host.compute(W, 1, False, p, wakes=True).callbacks.append(
            lambda _ev, p=p: ends.setdefault(p, env.now))
    env.run(until=20 * W)
    # 5 runnable on 2 cores, the free ones spread evenly: each at 2/5 of a core
    assert [ends[p] for p in "xyz"] == pytest.approx([2.5 * W] * 3)
    env = simpy.Environment()
    host = CoreHost(env, 0, 2, lambda k: 1.0, 10 * W)
    host.compute(10 * W, 1, False, "a")
    host.compute(10 * W, 1, False, "b")
    host.compute(10 * W, 1, False, "c")      # core 0: a, c; core 1: b
    done = host.compute(W, 1, False, "x", wakes=True)
    env.run(until=done)
    assert env.now == pytest.approx(2 * W)   # it joins b's core, the least loaded


def test_jobs_keep_to_their_core_between_steps():
    env = simpy.Environment()
    host = CoreHost(env, 0, 2, lambda k: 1.0, 10 * W)
    ends = {p: [] for p in "abc"}

    def steps(p):
        for _ in range(4):
            yield host.compute(W, 1, False, p)
            ends[p].append(env.now)
    for p in "abc":
        env.process(steps(p))
    env.run(until=5 * W)
    # b alone on core 1 steps every W; a and c, sharing core 0, every 2W
    assert ends["b"][:4] == pytest.approx([W, 2 * W, 3 * W, 4 * W])
    assert ends["a"][:2] == pytest.approx([2 * W, 4 * W])


def _woken_job_end(b_work_s, others):
    """c runs W on core 0 and sleeps; b runs ``b_work_s`` on core 1; at 2W ``others``
    start (by name, in order, 100 W each); c computes W again at 3W: when it ends."""
    env = simpy.Environment()
    host = CoreHost(env, 0, 2, lambda k: 1.0, 100 * W)
    host.compute(W, proc="c")                       # c on core 0
    host.compute(b_work_s, proc="b")                # b on core 1
    ended = {}

    def later():
        yield env.timeout(2 * W)
        for proc in others:
            host.compute(100 * W, proc=proc)
        yield env.timeout(W)
        yield host.compute(W, proc="c")
        ended["c"] = env.now
    env.process(later())
    env.run(until=50 * W)
    return ended["c"]


def test_a_process_woken_with_no_core_idle_goes_back_to_its_last_core():
    """a takes the idle core 0, x (no history) the first of the equally loaded: 0 too.
    c, last on core 0, queues there as a third (1/3 speed: 3W), not by b on the less
    loaded core 1 (1/2 speed: 2W)."""
    assert _woken_job_end(100 * W, "ax") == pytest.approx(3 * W + 3 * W)


def test_a_process_woken_with_a_core_idle_takes_it():
    """a runs on core 0; b's core 1 falls idle at 2.5W: c takes it (W), not its last
    core 0 by a (2W)."""
    assert _woken_job_end(2.5 * W, "a") == pytest.approx(3 * W + W)


def test_core_host_takes_single_thread_jobs_only():
    host = CoreHost(simpy.Environment(), 0, 2, lambda k: 1.0, W)
    with pytest.raises(ValueError):
        host.compute(W, threads=2)


def test_nothing_changes_while_every_process_has_a_core():
    wl = Workload(model="toy", iterations=5)
    for scheme in ("allreduce", "gather_scatter", "mpi_allreduce", "ps_sync", "psgd"):
        fluid = simulate(scheme, 2, wl, Cluster(hosts=1, cores_per_host=4), make_profile(cores=4))
        cores = simulate(SchemeConfig(scheme, engine="des"), 2, wl,
                         Cluster(hosts=1, cores_per_host=4),
                         make_profile(cores=4, balance_delay_s=0.02))
        assert cores.time_s == pytest.approx(fluid.time_s, rel=1e-9), scheme


def test_synchronous_steps_take_the_busiest_core_when_steps_are_short():
    """3 ranks on 2 cores, tiny messages, a balancer slower than a step: every step
    lasts two full steps of work (two ranks on one core), not the fluid 1.5."""
    prof = make_profile(cores=2, alpha_s=1e-9, beta_s_per_byte=1e-15, balance_delay_s=1.0)
    wl = Workload(model="toy", iterations=4, batch_per_worker=32)
    step = prof.models[0].step_fit(1).step_s(32)
    r = simulate("gather_scatter", 3, wl, CL2, prof)
    assert r.engine == "des"
    assert r.time_s == pytest.approx(4 * 2 * step, rel=1e-3)
    fluid = simulate("gather_scatter", 3, wl, CL2, make_profile(cores=2, alpha_s=1e-9,
                                                               beta_s_per_byte=1e-15))
    assert fluid.time_s == pytest.approx(4 * 1.5 * step, rel=1e-3)


def test_long_stretches_of_work_come_out_fluid():
    """HogWild: 3 processes that never wait for each other; the balancer turns them
    round, so the epoch takes the fluid time (1.5 steps of work per step)."""
    wl = Workload(model="toy", iterations=300, batch_per_worker=32)
    fluid = simulate("hogwild", 3, wl, CL2, make_profile(cores=2))
    cores = simulate("hogwild", 3, wl, CL2, make_profile(cores=2, balance_delay_s=0.02))
    assert cores.time_s == pytest.approx(fluid.time_s, rel=0.03)


def test_multi_thread_workers_share_cores_as_a_fluid():
    wl = Workload(model="toy", iterations=5, threads_per_worker=2)
    fluid = simulate("allreduce", 3, wl, CL2, make_profile(cores=2))
    cores = simulate("allreduce", 3, wl, CL2, make_profile(cores=2, balance_delay_s=1.0))
    assert cores.time_s == pytest.approx(fluid.time_s, rel=1e-9)


def test_balance_delay_round_trips_and_bad_values_are_refused():
    prof = make_profile(balance_delay_s=0.025)
    raw = json.loads(json.dumps(to_dict(prof)))
    assert from_dict(raw) == prof
    del raw["balance_delay_s"]
    assert from_dict(raw).balance_delay_s == 0.0          # older profiles: fluid cores
    raw["balance_delay_s"] = -1
    with pytest.raises(ProfileError, match="balance_delay_s"):
        from_dict(raw)


def test_balance_delay_is_the_median_try_and_a_miss_counts_as_its_window():
    rows = pd.DataFrame({"try": range(5), "moved_s": [0.02, None, 0.012, 0.028, None],
                         "window_s": 0.15}).to_dict("records")
    assert balance_delay_s(rows) == pytest.approx(0.028)
    assert balance_delay_s([]) == 0.0


def _dedicated_run(jobs, cores, pollers, dedicated):
    """Processes that each sleep, compute, sleep, ... ((gap_s, work_s) pairs per process)
    on a CoreHost: when each job ended, with the run queues or dedicated."""
    env = simpy.Environment()
    host = CoreHost(env, 0, cores, lambda k: 1.0, 0.02)
    assert host.dedicate(len(jobs)) is True
    host.dedicated = dedicated
    ends = []

    def proc(p, steps):
        if p in pollers:
            host.start_polling(p)
        for gap_s, work_s in steps:
            yield env.timeout(gap_s)
            yield host.compute(work_s, 1, p in pollers, p)
            ends.append((p, env.now))
    for p, steps in enumerate(jobs):
        env.process(proc(p, steps))
    env.run()
    return sorted(ends)


@settings(max_examples=40, deadline=None)
@given(cores=st.integers(1, 4), data=st.data())
def test_a_dedicated_host_ends_every_job_as_its_run_queues_do(cores, data):
    """Every process with a core of its own and no sharing loss: a job is a timeout of its
    work, and every job ends when the run queues end it, to rounding."""
    step = st.tuples(st.sampled_from([0.0, 1e-3, 0.0123]), st.floats(1e-4, 0.05))
    jobs = data.draw(st.lists(st.lists(step, min_size=1, max_size=6), min_size=1,
                              max_size=cores))
    pollers = data.draw(st.sets(st.integers(0, len(jobs) - 1)))
    queues = _dedicated_run(jobs, cores, pollers, False)
    dedicated = _dedicated_run(jobs, cores, pollers, True)
    assert [p for p, _ in dedicated] == [p for p, _ in queues]
    assert [t for _, t in dedicated] == pytest.approx([t for _, t in queues], rel=1e-15)


def test_a_host_is_dedicated_only_with_a_core_a_process_and_no_loss():
    env = simpy.Environment()
    assert CoreHost(env, 0, 2, lambda k: 1.0, 0.02).dedicate(2)
    assert not CoreHost(env, 0, 2, lambda k: 1.0, 0.02).dedicate(3)
    assert not CoreHost(env, 0, 2, lambda k: 1.0 if k < 2 else 0.9, 0.02).dedicate(2)
