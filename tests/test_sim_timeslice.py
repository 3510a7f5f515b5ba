"""Busy-polling ranks, time slicing and per-step collective latency: closed forms."""
import json

import pytest
import simpy

from calibrate.fits.fit_comm import collective_alphas
from calibrate.probes.sched_probe import main as sched_check
from calibrate.probes.sched_probe import off_core_rows, quantum_s, synced_step_w
from contracts.cluster import calibrated_cluster
from simulator.model.comm.closed_forms import ring_allreduce_s, steps
from contracts.cluster import Cluster
from contracts.profile import ProfileError, from_dict, to_dict
from contracts.workload import Workload
from simulator.engine import simulate
from simulator.model.config import SchemeConfig
from simulator.model.hardware.host import Host
from simulator.model.hardware.timeslice import handoff_s
from simulator.testing import make_profile

Q = 0.004


@pytest.mark.parametrize("n, cores, expected", [
    (1, 2, 0.0), (2, 2, 0.0),            # a core each: nobody waits
    (4, 2, Q / 4),                       # 2 a core: off half the time, for q: q/2 * 1/2
    (6, 2, 4 * Q / 6),                   # 3 a core: (3-1)^2 q / (2*3)
    (3, 2, (2 * Q / 4) / 3),             # 2 on one core, 1 alone: the mean over processes
])
def test_handoff_closed_form(n, cores, expected):
    assert handoff_s(n, cores, Q) == pytest.approx(expected)


def test_handoff_grows_with_oversubscription():
    waits = [handoff_s(n, 2, Q) for n in range(1, 12)]
    assert waits == sorted(waits)
    assert handoff_s(5, 2, 0.0) == 0.0


def test_a_poller_takes_its_share_of_the_core():
    env = simpy.Environment()
    host = Host(env, 0, cores=1, sharing_efficiency=lambda k: 1.0)
    host.start_polling()                       # someone else busy-waits on the one core
    done = host.compute(1.0)
    env.run(done)
    assert env.now == pytest.approx(2.0)


def test_a_pollers_own_job_replaces_its_polling():
    env = simpy.Environment()
    host = Host(env, 0, cores=1, sharing_efficiency=lambda k: 1.0)
    host.start_polling()                       # the process itself, between its jobs
    env.run(host.compute(1.0, polls=True))
    assert env.now == pytest.approx(1.0)
    assert host.runnable == 1                  # polling again afterwards


def test_polling_ranks_slow_the_others_and_the_fast_path_agrees():
    """mpi_allreduce ranks poll: on 2 cores with 3 ranks every step runs at 2/3 speed,
    also for the rank that is done first. gloo ranks sleep while they wait."""
    prof = make_profile(cores=2, spread_cv=0.3)
    cl = Cluster(hosts=1, cores_per_host=2)
    wl = Workload(model="toy", iterations=5)
    fast = simulate(SchemeConfig("mpi_allreduce", engine="fast"), 3, wl, cl, prof)
    des = simulate(SchemeConfig("mpi_allreduce", engine="des"), 3, wl, cl, prof)
    assert fast.time_s == pytest.approx(des.time_s, rel=1e-9)
    sleeping = simulate(SchemeConfig("gather_scatter", engine="des"), 3, wl, cl, prof)
    assert fast.compute_s > sleeping.compute_s


def test_time_slicing_costs_only_when_oversubscribed():
    wl = Workload(model="toy", iterations=4)
    cl = Cluster(hosts=1, cores_per_host=2)
    plain, sliced = make_profile(cores=2), make_profile(cores=2, quantum_s=Q)
    for p, slower in ((1, False), (2, True), (4, True)):     # ps: P workers + the server
        a = simulate("ps_sync", p, wl, cl, plain).time_s
        b = simulate("ps_sync", p, wl, cl, sliced).time_s
        assert (b > a) == slower, p
    assert simulate("mpi_allreduce", 2, wl, cl, sliced).time_s == pytest.approx(
        simulate("mpi_allreduce", 2, wl, cl, plain).time_s)


def test_ps_sync_pays_one_handoff_per_message_to_a_waiting_rank():
    """2 workers and the server on 2 cores: 3 processes, so every message waits h(3, 2).
    Per iteration: two sends of w, one after the other, and the gather of the gradients
    (one latency): 3 h; and after the last, the answers to the last pushes: 2 h."""
    wl = Workload(model="toy", iterations=3)
    cl = Cluster(hosts=1, cores_per_host=2)
    plain = simulate("ps_sync", 2, wl, cl, make_profile(cores=2)).time_s
    sliced = simulate("ps_sync", 2, wl, cl, make_profile(cores=2, quantum_s=Q)).time_s
    assert (sliced - plain - 2 * handoff_s(3, 2, Q)) / 3 == pytest.approx(3 * handoff_s(3, 2, Q),
                                                                        rel=1e-6)


def test_collective_alpha_multiplies_the_steps():
    extra = 5e-4
    prof = make_profile(cores=8, alpha_s=1e-5, collective_alpha_s={"allreduce": 1e-5 + extra})
    wl = Workload(model="toy", iterations=2)
    base = simulate("mpi_allreduce", 4, wl, calibrated_cluster(8), make_profile(cores=8))
    more = simulate("mpi_allreduce", 4, wl, calibrated_cluster(prof.cores), prof)
    n = 4 * sum(prof.models[0].layer_param_counts)
    assert (more.time_s - base.time_s) / 2 == pytest.approx(
        extra * steps("allreduce", 4, n, "reduce_scatter_allgather"), rel=1e-9)   # auto, one host


def test_collective_alphas_are_recovered_from_probe_means():
    import pandas as pd

    from contracts.profile import Transport
    t = Transport("gloo", 1e-4, 1e-9)
    a_step = 6e-4
    rows = [{"backend": "gloo", "op": "allreduce", "algorithm": "-", "workers": 2, "bytes": n,
             "time_s": ring_allreduce_s(2, n, a_step, 1e-9)} for n in (4, 1024, 65536)]
    rows.append({"backend": "gloo", "op": "allreduce", "algorithm": "-", "workers": 2,
                 "bytes": 2**24, "time_s": 1.0})          # large: not a latency point
    got = collective_alphas(pd.DataFrame(rows), t)
    assert got["allreduce"] == pytest.approx(a_step)


def test_profile_round_trip_and_bad_collective_alpha():
    prof = make_profile(quantum_s=Q, collective_alpha_s={"allreduce": 6e-4})
    d = json.loads(json.dumps(to_dict(prof)))
    assert from_dict(d) == prof
    d["transports"][0]["collective_alpha_s"]["allreduce"] = -1
    with pytest.raises(ProfileError, match="collective_alpha_s.allreduce"):
        from_dict(d)
    old = json.loads(json.dumps(to_dict(make_profile())))
    del old["scheduler_quantum_s"]
    for t in old["transports"]:
        del t["collective_alpha_s"]
    assert from_dict(old).scheduler_quantum_s == 0.0      # profiles from before still load


def test_scheduler_probe_sees_off_core_stretches():
    rows = off_core_rows(duration_s=0.3)
    assert rows and all(r["off_s"] > 2e-4 for r in rows)
    assert quantum_s(rows) > 0
    assert quantum_s([]) == 0.0


def test_synchronous_step_check_takes_at_least_the_work():
    # one process: a step spins its own CPU time, so its wall time is at least that; how
    # much longer depends on the machine's other load, which a test cannot bound
    assert synced_step_w(1, work_s=0.002, steps=20) >= 0.99


@pytest.mark.parametrize("argv", [["--check", "x"], ["--check", "0"], ["--steps", "0"]])
def test_synchronous_step_check_refuses_bad_flags(argv, capsys):
    assert sched_check(argv) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err


@pytest.mark.parametrize("fidelity", ["analytic", "message"])
def test_a_rendezvous_message_waits_three_times(fidelity):
    from contracts.profile import Transport
    from simulator.model.comm import make_comm
    from simulator.model.network import Routes
    from simulator.model.recorder import Recorder
    t = Transport("mpi", 1e-5, 1e-9, eager_max_bytes=4096)
    h = 1e-3
    times = {}
    for n in (4096, 4097):
        env = simpy.Environment()
        routes = Routes((0, 0), None, t, (h, h))
        comm = make_comm(fidelity, env, routes, t, Recorder((0, 0)))
        env.run(comm.transfer(0, 1, n))
        times[n] = env.now - (1e-5 + 1e-9 * n)
    assert times[4096] == pytest.approx(h)          # eager: one wait for the receiver
    assert times[4097] == pytest.approx(3 * h)      # request, clear to send, data
