"""The calibration's server probe times the function the real parameter server runs."""
from __future__ import annotations

import time
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import torch

from calibrate.probes import compute_probe
from calibrate.probes.plan import quick_plan
from real.schemes import ps


def counting(monkeypatch) -> list:
    """Replace ``real.schemes.ps.server_update`` by a wrapper that notes each model it updates."""
    calls, real = [], ps.server_update

    def wrapped(model, optimizer, grad, w):
        calls.append(model)
        real(model, optimizer, grad, w)
    monkeypatch.setattr(ps, "server_update", wrapped)
    return calls


def test_the_probe_and_the_server_call_one_function(monkeypatch):
    calls = counting(monkeypatch)
    plan = replace(quick_plan(2), warmup_steps=1, server_repeats=3, server_idle_s=(0.0,))
    rows = compute_probe.server_update_rows(plan, "cnn")
    assert len(calls) == 4 and [r["rep"] for r in rows] == [0, 1, 2]
    assert {r["params"] for r in rows} == {sum(p.numel() for p in calls[0].parameters())}

    model = compute_probe.make_model("cnn")
    server = object.__new__(ps.Server)        # the server's state without MPI
    w = ps.flat_params(model).numpy()
    server.ctx = SimpleNamespace(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=1.0),
                                 log=SimpleNamespace(now=time.perf_counter))
    server.w, server.version, server.update_s = w, 0, []
    before = w.copy()
    server.apply(np.full(w.size, 0.5, dtype=np.float32))
    assert calls[-1] is model and server.version == 1 and len(server.update_s) == 1
    np.testing.assert_allclose(server.w, before - 0.5, rtol=1e-6)


def test_a_prediction_keeps_the_measured_update_through_the_models_workload():
    """Every prediction goes through the model's workload (``simulator.engine.machine``):
    the profile's measured server update stays with the model of its name and size."""
    from simulator.compare import model_workloads
    from simulator.engine.machine import machine
    from simulator.testing import make_profile
    prof = make_profile(server_update_s=3e-4)
    mach = machine(prof, "", None, model_workloads(prof, {}, ["toy"]))
    assert mach.profile.model("toy").server_update_s == 3e-4
