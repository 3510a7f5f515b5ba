"""The parameter server's update after an idle wait: the probe's curve, the profile's field,
the simulated server's charge (``simulator.model.server.cold_update_s``)."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from calibrate.fits.fit_compute import with_server_probe, with_server_updates
from calibrate.probes import compute_probe
from calibrate.probes.plan import quick_plan
from contracts import profile as profiles
from simulator.model.hardware.cores import CoreHost
from simulator.model.hardware.host import Host
from simulator.model.server import ParameterServer, cold_update_s
from simulator.testing import make_profile

CURVE = ((0.0, 3e-4), (0.002, 5e-4), (0.03, 9e-4))


def test_the_probe_waits_in_the_servers_sleeping_polls_before_each_update(monkeypatch):
    from real.launch import dist
    waits = []
    monkeypatch.setattr(dist, "wait", lambda req, timeout_s, what, poll_s=None:
                        waits.append((round(req.end - compute_probe.time.perf_counter(), 3),
                                      poll_s)))
    plan = replace(quick_plan(2), warmup_steps=0, server_repeats=2, server_idle_s=(0.0, 5.0))
    rows = compute_probe.server_update_rows(plan, "linear")
    assert [(r["rep"], r["idle_s"]) for r in rows] == [(0, 0.0), (0, 5.0), (1, 0.0), (1, 5.0)]
    # only the 5 s waits, each as real.launch.dist.wait with the phantom runs' 1 ms polls
    assert [(round(t), p) for t, p in waits] == [(5, 0.001), (5, 0.001)]


def approx_curve(curve=CURVE):
    return tuple(pytest.approx(point) for point in curve)


def rows(model="toy", curve=CURVE, extra=()):
    return [{"model": model, "params": 10, "rep": r, "idle_s": i, "update_s": u + d}
            for i, u in curve for r, d in enumerate((-1e-5, 0.0, 1e-5))] + list(extra)


def test_the_fit_keeps_the_back_to_back_median_and_the_curve():
    cost = make_profile().model("toy")
    (fitted,) = with_server_updates((cost,), rows())
    assert fitted.server_update_s == pytest.approx(3e-4)
    assert fitted.server_idle_curve == approx_curve()
    # a table from before the idle waits: every row back to back, no curve
    old = [{k: v for k, v in r.items() if k != "idle_s"} for r in rows(curve=CURVE[:1])]
    (plain,) = with_server_updates((cost,), old)
    assert plain.server_update_s == pytest.approx(3e-4) and plain.server_idle_curve == ()


def test_a_profile_keeps_the_curve_and_refuses_a_broken_one(tmp_path):
    prof = with_server_probe(make_profile(), rows())
    profiles.save(prof, tmp_path / "p.json")
    assert profiles.load(tmp_path / "p.json").model("toy").server_idle_curve == approx_curve()
    model = replace(prof.model("toy"), server_update_after_idle_s=(3e-4,))
    with pytest.raises(profiles.ProfileError, match="server_idle_s must rise"):
        profiles.from_dict(as_json(replace(prof, models=(model,))))
    old = as_json(make_profile())               # a profile without the fields loads as before
    assert profiles.from_dict(old).model("toy").server_idle_curve == ()


def as_json(prof) -> dict:
    return json.loads(json.dumps(profiles.to_dict(prof)))


def test_the_curve_between_and_beyond_its_points():
    assert cold_update_s(CURVE, 0.0) == 3e-4
    assert cold_update_s(CURVE, 0.001) == pytest.approx(4e-4)           # half way to 2 ms
    assert cold_update_s(CURVE, 0.016) == pytest.approx(7e-4)           # half way to 30 ms
    assert cold_update_s(CURVE, 1.0) == 9e-4                           # flat beyond


@pytest.mark.parametrize("sleeps", [True, False])
def test_the_server_charges_the_update_at_the_idle_time_before_it(sleeps):
    """Updates at 0, then 10 ms after the first ended: charged at idle 0 and 10 ms of the
    curve where the server sleeps in polls, at idle 0 (its first point) where it spins."""
    env = simpy.Environment()
    server = ParameterServer(env, 0, Host(env, 0, 1, lambda k: 1.0), 1.0,
                             idle_curve=CURVE, sleeps=sleeps)
    ends = []

    def updates():
        for gap in (0.0, 0.010):
            yield env.timeout(gap)
            yield from server.apply()
            ends.append(env.now)
    env.process(updates())
    env.run()
    second = cold_update_s(CURVE, 0.010) if sleeps else 3e-4
    assert ends == pytest.approx([3e-4, 3e-4 + 0.010 + second])
    flat = ParameterServer(env, 0, Host(env, 0, 1, lambda k: 1.0), 2e-4, sleeps=True)
    assert flat.cost_s(5.0) == 2e-4                     # no curve: the one figure


def test_a_phantom_workload_takes_the_update_of_the_model_it_sleeps(tmp_path):
    """A phantom's slept workload goes by another name; its server updates the real model,
    so the prediction charges that model's measured update and curve."""
    from contracts.workload import load_workload, slept
    from simulator.engine.machine import machine
    from tests.test_phantom_compare import WORKLOAD
    f = tmp_path / "w.toml"
    f.write_text(WORKLOAD)
    w = load_workload(f)
    prof = make_profile(model="tiny", layer_param_counts=(1000, 3000))
    prof = with_server_probe(prof, rows(model="tiny"))
    mach = machine(prof, "", None, [(slept(w, 10.0, "tiny-phantom-x10"), str(f))])
    phantom = mach.profile.model("tiny-phantom-x10")
    assert phantom.server_update_s == pytest.approx(3e-4)
    assert phantom.server_idle_curve == approx_curve()


@settings(max_examples=60, deadline=None)
@given(st.floats(0.0, 10.0), st.floats(0.0, 1e-3), st.floats(1e-7, 1e-3),
       st.floats(0.0, 0.02), st.booleans())
def test_the_copy_and_update_as_one_timeout_end_where_the_two_do(start_s, copy_s, update_s,
                                                                 gap_s, curve):
    """ps_async's copy of a push and its update (``copy_and_apply``) on a server whose host
    keeps it a core (one timeout where it lands on the same float) against the event path
    (a timeout of the copy, then ``apply``): the same versions, update rows and clock, to
    the bit, over two pushes with the idle curve's cost in between."""
    def run(fast: bool):
        env = simpy.Environment()
        host = CoreHost(env, 0, 2, lambda k: 1.0, 1e-3)
        assert host.dedicate(2)
        server = ParameterServer(env, 0, host, update_s, idle_curve=CURVE if curve else (),
                                 sleeps=True)
        rows = []

        class Rows:
            def add(self, *row):
                rows.append(row)
        seen = []

        def pushes():
            for gap in (start_s, gap_s):
                yield env.timeout(gap)
                if fast:
                    seen.append((yield from server.copy_and_apply(copy_s, Rows())))
                else:
                    yield env.timeout(copy_s)
                    t1 = env.now
                    seen.append(((yield from server.apply(Rows())), t1))
                seen.append(env.now)
        env.process(pushes())
        env.run()
        return seen, rows, server.version, server.free_since
    assert run(True) == run(False)


def test_a_probed_model_the_profile_lacks_reaches_the_phantom_that_sleeps_it(tmp_path):
    """The emulated cluster's profiles were calibrated on another model: the probe's model
    enters with its update alone, and the slept workload takes it."""
    from contracts.workload import load_workload, slept
    from simulator.engine.machine import machine
    from tests.test_phantom_compare import WORKLOAD
    f = tmp_path / "w.toml"
    f.write_text(WORKLOAD)
    w = load_workload(f)
    other = make_profile(model="mlp")
    params = w.params
    prof = with_server_probe(other, [dict(r, params=params) for r in rows(model=w.name)])
    assert [m.model for m in prof.models] == ["mlp", w.name]
    assert prof.model("mlp") == other.model("mlp")
    phantom = machine(prof, "", None, [(slept(w, 10.0, f"{w.name}-phantom-x10"), str(f))])
    cost = phantom.profile.model(f"{w.name}-phantom-x10")
    assert cost.server_update_s == pytest.approx(3e-4)
    assert cost.server_idle_curve == approx_curve()
    # a probe of another parameter count is another model: the line stays
    wrong = with_server_probe(other, [dict(r, params=params + 1) for r in rows(model=w.name)])
    stays = machine(wrong, "", None, [(slept(w, 10.0, "x"), str(f))]).profile.model("x")
    assert stays.server_update_s == 0.0
