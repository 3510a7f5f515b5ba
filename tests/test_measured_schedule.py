"""A real ps_async run's push order as a schedule (``simulator.measured_schedule``).

Records are built here as the real server writes them; the replay of a real run's
order is checked in ``test_schemes.py`` (it needs the run).
"""
from __future__ import annotations

import json
from collections import Counter

import pytest

from contracts import schedule as schedules
from contracts.cluster import calibrated_cluster
from contracts.profile import load_default
from contracts.workload import Workload
from simulator.engine.schedule import simulate_schedule
from simulator.measured_schedule import MeasuredError, measured
from tests.conftest import py

SAMPLES, BATCH, EPOCHS = 256, 32, 2


def like(p=2, scheme="ps_async", every=2):
    wl = Workload(model="linear", batch_per_worker=BATCH, dataset_samples=SAMPLES, epochs=EPOCHS)
    return simulate_schedule(scheme, p, wl, "synthetic", cluster=calibrated_cluster(load_default().cores), train_size=SAMPLES,
                             eval_every=every)[1]


def record(workers, reads, algorithm="ps_async", model="linear"):
    """A record as the server writes it: pushes applied in this order."""
    return {"run_id": "ps_async-P2-r0",
            "config": {"algorithm": algorithm, "model": model, "dataset": "synthetic",
                       "batch_size": BATCH, "seed": 3},
            "extra": {"push_order": {"worker": workers, "read": reads,
                                     "t_s": [0.01 * (i + 1) for i in range(len(workers))]}}}


def alternating(p=2, per_worker=8):
    """Worker order 0, 1, 0, 1 ...; each reads the version after its previous push."""
    workers, reads, last = [], [], {}
    for applied in range(p * per_worker):
        w = applied % p
        workers.append(w)
        reads.append(last.get(w, 0))
        last[w] = applied + 1
    return workers, reads


def test_each_push_becomes_the_workers_next_batch_in_the_order_applied():
    sim = like()
    per_epoch = sim.header.iterations_per_epoch
    workers, reads = alternating(per_worker=sim.header.iterations_per_worker)
    sched = measured(record(workers, reads), sim, "runs/x")
    ups = sched.updates()
    assert [e["worker"] for e in ups] == workers and [e["read"] for e in ups] == reads
    assert [e["applied"] for e in ups] == list(range(len(workers)))
    for w in (0, 1):
        mine = [(e["epoch"], e["batch"], e["shard"]) for e in ups if e["worker"] == w]
        assert mine == [(k // per_epoch, k % per_epoch, w) for k in range(len(mine))]
    assert Counter(e["applied"] - e["read"] for e in ups) == Counter(
        a - r for a, r in enumerate(reads))
    assert sched.header.source["measured"] == "runs/x" and sched.header.time_s == ups[-1]["t"]


def test_evaluation_points_keep_their_update_counts_at_the_measured_times(tmp_path):
    sim = like()
    workers, reads = alternating(per_worker=sim.header.iterations_per_worker)
    sched = measured(record(workers, reads), sim, "runs/x")
    steps = [e["step"] for e in sim.events if e["kind"] == "eval"]
    got = [e for e in sched.events if e["kind"] == "eval"]
    assert [e["step"] for e in got] == steps
    times = [e["t"] for e in sched.updates()]
    assert all(e["t"] == times[e["step"] - 1] for e in got)
    # each point right after the update that completes its count
    for n, e in enumerate(sched.events):
        if e["kind"] == "eval":
            assert sched.events[n - 1]["kind"] == "eval" or \
                sched.events[n - 1]["applied"] == e["step"] - 1
    path = schedules.write(tmp_path / "m.jsonl", sched)          # a valid schedule file
    assert schedules.read(path).updates() == sched.updates()


def test_a_run_stopped_early_keeps_the_points_it_reached():
    sim = like()
    workers, reads = alternating(per_worker=3)
    sched = measured(record(workers, reads), sim, "runs/x")
    assert len(sched.updates()) == 6
    assert all(e["step"] <= 6 for e in sched.events if e["kind"] == "eval")


@pytest.mark.parametrize("rec,sim,says", [
    (record([0, 1], [0, 0], algorithm="ps_sync"), "ps_async", "ps_sync run"),
    (record([0, 1], [0, 0]), "hogwild", "schedule of hogwild"),
    (record([0, 2], [0, 0]), "ps_async", "3 workers"),
    (record([0, 1], [0, 0], model="cnn"), "ps_async", "model 'cnn'"),
    ({"run_id": "x", "config": {"algorithm": "ps_async"}, "extra": {}}, "ps_async",
     "no push_order"),
    (record([0, 1], [0, 0]) | {"environment": {"workers": 4}}, "ps_async", "4 workers"),
])
def test_what_cannot_give_a_measured_schedule_is_named(rec, sim, says):
    with pytest.raises(MeasuredError, match=says):
        measured(rec, like(scheme=sim), "runs/x")


def test_cli_refuses_a_run_without_push_order_in_one_line(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "record.json").write_text(json.dumps({"nothing": 1}))
    sim = schedules.write(tmp_path / "like.jsonl", like())
    r = py("simulator.measured_schedule", str(run), "--like", str(sim), "--out",
           str(tmp_path / "m.jsonl"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "record" in r.stderr and not (tmp_path / "m.jsonl").exists()
