"""The replay: one process trains along a simulated schedule exactly as the P workers would.

Small synthetic data and the linear model (no dropout, so trajectories are
deterministic and comparable); references are written with ``real.training.step``'s
own pieces, the ones ``real.train`` runs.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from real.training.batches import BatchOrder
from real.training.data import load_dataset, shard
from real.training.models import build_model, flat_params, load_flat_params
from real.training.replay import replay
from real.training.replay_state import ReplayState
from real.training.step import Shard, flat_grads, forward_backward, sgd_step
from contracts import schedule as schedules
from contracts.cluster import calibrated_cluster
from contracts.profile import load_default
from contracts.workload import Workload
from simulator.engine.schedule import simulate_schedule
from simulator.model.config import SchemeConfig
from tests.conftest import py

SAMPLES, EPOCHS, SEED, LR = 768, 2, 1, 0.1


@pytest.fixture(scope="module")
def data():
    return load_dataset("synthetic", train_size=SAMPLES, test_size=200, seed=SEED)


def settings(**kw):
    return argparse.Namespace(**({"seed": SEED, "lr": LR, "momentum": 0.0, "lr_decay": 0.0}
                                 | kw))


def schedule_of(scheme, p, batch, avg_every=0, every=4):
    wl = Workload(model="linear", batch_per_worker=batch, dataset_samples=SAMPLES, epochs=EPOCHS)
    return simulate_schedule(SchemeConfig(scheme, avg_every=avg_every), p, wl, "synthetic",
                             cluster=calibrated_cluster(load_default().cores), train_size=SAMPLES, eval_every=every)[1]


def serial_losses(data, batch, momentum=0.0):
    """real.train --algorithm serial at ``batch``: its loss at every step."""
    torch.manual_seed(SEED)
    model = build_model("linear", data.input_shape, 10)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=momentum)
    train = Shard(torch.from_numpy(data.train_x), torch.from_numpy(data.train_y))
    return [sgd_step(model, opt, x, y) for e in range(EPOCHS)
            for x, y in train.batches(batch, SEED + 1000 * e)], flat_params(model)


@pytest.mark.parametrize("scheme,p", [("allreduce", 4), ("ps_sync", 3), ("ddp", 2),
                                      ("serial", 1)])
def test_synchronous_replay_equals_serial_sgd_at_the_global_batch(data, scheme, p):
    expected, _ = serial_losses(data, 96)
    got = replay(schedule_of(scheme, p, 96 // p), data, settings())
    assert len(got["update_losses"]) == len(expected)
    np.testing.assert_allclose(got["update_losses"], expected, atol=1e-5)


def test_momentum_replays_as_torch_sgd(data):
    expected, _ = serial_losses(data, 64, momentum=0.9)
    got = replay(schedule_of("mpi_allreduce", 2, 32), data, settings(momentum=0.9))
    np.testing.assert_allclose(got["update_losses"], expected, atol=1e-5)


def test_one_shot_psgd_replay_equals_averaging_independent_shard_models(data):
    p, batch = 3, 32
    models = []
    for w in range(p):                       # real.train's psgd rank w, alone
        torch.manual_seed(SEED)
        model = build_model("linear", data.input_shape, 10)
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        part = shard(SAMPLES, w, p)
        mine = Shard(torch.from_numpy(data.train_x[part]), torch.from_numpy(data.train_y[part]))
        for e in range(EPOCHS):
            for x, y in mine.batches(batch, SEED + 1000 * e + w):
                sgd_step(model, opt, x, y)
        models.append(flat_params(model))
    sched = schedule_of("psgd", p, batch)
    state = _state(sched, data)
    state.run(sched.events)
    np.testing.assert_allclose(state.replicas[0].numpy(), torch.stack(models).mean(0).numpy(),
                               atol=1e-6)
    assert all(torch.equal(r, state.replicas[0]) for r in state.replicas)


def test_ps_async_without_staleness_equals_ps_sync(data):
    """One worker cannot be stale; on the same batches its pushes are ps_sync's steps."""
    runs = []
    for scheme in ("ps_async", "ps_sync"):
        sched = schedule_of(scheme, 1, 32)
        assert all(e["read"] == e["applied"] for e in sched.updates())
        state = _state(sched, data, order_of="ps_sync")
        state.run(sched.events)
        runs.append((state.losses, state.w))
    np.testing.assert_allclose(runs[0][0], runs[1][0], atol=1e-6)
    assert torch.equal(runs[0][1], runs[1][1])


def test_a_stale_update_uses_the_weights_it_read(data):
    """Two workers read version 0; the second push is applied to version 1 with the gradient
    computed on version 0 (kept only until it is used)."""
    sched = schedule_of("ps_async", 2, 32)
    ups = [dict(e) for e in sched.updates()[:2]]
    ups[0].update(read=0, applied=0, t=1.0)
    ups[1].update(read=0, applied=1, t=2.0)
    stale = schedules.Schedule(sched.header, ups)
    state = _state(stale, data)
    state.run(stale.events)
    assert state.peak_versions == 2 and not state.snapshots
    # by hand: both gradients at w0
    torch.manual_seed(SEED)
    model = build_model("linear", data.input_shape, 10)
    w0 = flat_params(model)
    grads = []
    for e in ups:
        load_flat_params(state.model, w0)
        idx = state.order.indices(e["shard"], e["epoch"], e["batch"])
        forward_backward(state.model, state.train_x[idx], state.train_y[idx])
        grads.append(flat_grads(state.model))
    np.testing.assert_allclose(state.w.numpy(), (w0 - LR * grads[0] - LR * grads[1]).numpy(),
                               atol=1e-6)


def test_replay_memory_is_bounded_by_the_workers_in_flight(data):
    p = 8
    sched = simulate_schedule("ps_async", p, Workload(model="linear", batch_per_worker=8,
                                                      dataset_samples=SAMPLES, epochs=1),
                              "synthetic", cluster=calibrated_cluster(load_default().cores), train_size=SAMPLES)[1]
    assert max(e["applied"] - e["read"] for e in sched.updates()) >= p - 1
    state = _state(sched, data, batch=8)
    state.run(sched.events)
    assert 2 <= state.peak_versions <= p + 1
    assert not state.snapshots and not +state.stale_reads


@pytest.mark.parametrize("scheme", ["async_avg", "hogwild", "psgd", "ps_async"])
def test_every_scheme_replays_and_evaluates_at_the_schedules_points(data, scheme):
    sched = schedule_of(scheme, 3, 32, avg_every=2)
    got = replay(sched, data, settings())
    evals = [e for e in sched.events if e["kind"] == "eval"]
    expected = len({e["step"] for e in evals}) + 2          # initial and final points
    assert len(got["points"]) == expected
    assert got["points"][0]["train_s"] == 0.0 and got["points"][-1]["train_s"] == \
        sched.header.time_s
    assert got["points"][-1]["test_accuracy"] > 0.5          # it learned
    assert got["cost"]["updates"] == len(sched.updates())


def _state(sched, data, order_of=None, batch=None):
    h = sched.header
    order = BatchOrder(order_of or h.scheme, h.workers, batch or h.workload["batch_per_worker"],
                       data.train_size, SEED)
    torch.manual_seed(SEED)
    model = build_model("linear", data.input_shape, 10)
    return ReplayState(h, model, data, order, settings())


def _write(tmp_path, sched):
    return str(schedules.write(tmp_path / "s.jsonl", sched))


def test_replay_cli_refuses_a_schedule_of_another_workload(tmp_path):
    path = _write(tmp_path, schedule_of("psgd", 2, 32))
    r = py("real.replay", "--schedule", path, "--out", str(tmp_path / "o"), "--model", "cnn")
    assert r.returncode == 2 and "another workload" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    lines = Path(path).read_text().splitlines()
    header = json.loads(lines[0])
    header["workload"]["train_samples"] = 999
    (tmp_path / "t.jsonl").write_text("\n".join([json.dumps(header)] + lines[1:]))
    r = py("real.replay", "--schedule", str(tmp_path / "t.jsonl"), "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "fingerprint" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()


def test_replay_cli_refuses_data_that_do_not_fit_the_schedule(tmp_path):
    wl = Workload(model="linear", batch_per_worker=32, dataset_samples=500, epochs=1)
    sched = simulate_schedule("psgd", 2, wl, "synthetic", cluster=calibrated_cluster(load_default().cores), train_size=600)[1]  # 500 != 600
    r = py("real.replay", "--schedule", _write(tmp_path, sched), "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "training samples" in r.stderr and "Traceback" not in r.stderr
