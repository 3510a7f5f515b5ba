"""The update schedule the simulator emits: contract, and exactly the updates each scheme makes.

No torch here: the replay of these schedules is ``test_replay.py``.
"""
from __future__ import annotations

import json
from collections import Counter
from itertools import pairwise

import pytest

from contracts import schedule as schedules
from contracts.curve import describe_time, time_to_target
from contracts.cluster import calibrated_cluster
from contracts.profile import load_default
from contracts.workload import Workload
from simulator.engine.run import simulate
from simulator.engine.schedule import simulate_schedule
from simulator.model.config import SchemeConfig
from simulator.model.schemes import SCHEMES

P = 3
SAMPLES, BATCH, EPOCHS, EVERY = 960, 32, 2, 4     # 10 iterations per epoch at P = 3
WORKLOAD = Workload(model="linear", batch_per_worker=BATCH, dataset_samples=SAMPLES,
                    epochs=EPOCHS)

MACHINE = calibrated_cluster(load_default().cores)      # the default profile's host


def make(scheme, p=P, every=EVERY, avg_every=0):
    return simulate_schedule(SchemeConfig(scheme, avg_every=avg_every), p, WORKLOAD,
                             "synthetic", MACHINE, train_size=SAMPLES, eval_every=every)


def kinds(sched, kind):
    return [e for e in sched.events if e["kind"] == kind]


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_every_worker_makes_each_of_its_updates_once(scheme):
    p = 1 if scheme == "serial" else P
    result, sched = make(scheme, p)
    per_worker = Counter(e["worker"] for e in sched.updates())
    assert per_worker == {w: result.iterations_per_worker for w in range(p)}
    for w in range(p):        # each batch of each epoch once, in order
        mine = [(e["epoch"], e["batch"]) for e in sched.updates() if e["worker"] == w]
        assert mine == [divmod(i, result.iterations_per_epoch)
                        for i in range(result.iterations_per_worker)]
    times = [e["t"] for e in sched.events]
    assert times == sorted(times) and 0 < times[-1] <= sched.header.time_s


@pytest.mark.parametrize("scheme", ["gather_scatter", "allreduce", "ddp", "mpi_allreduce",
                                    "ps_sync"])
def test_synchronous_schemes_give_the_serial_schedule_at_the_global_batch(scheme):
    result, sched = make(scheme)
    steps = Counter(e["applied"] for e in sched.updates())
    # one step per iteration, each the P slices of one global batch, none stale
    assert steps == {i: P for i in range(result.iterations_per_worker)}
    assert all(e["read"] == e["applied"] and e["shard"] == e["worker"] for e in sched.updates())
    assert sched.header.weights == "shared" and sched.header.evaluate == "weights"


def test_ps_async_schedule_holds_the_staleness_of_every_push():
    result, sched = make("ps_async")
    stale = Counter(e["applied"] - e["read"] for e in sched.updates())
    assert stale == Counter(result.staleness) and max(stale) > 0
    assert [e["applied"] for e in sched.updates()] == list(range(P * result.iterations_per_worker))
    # a worker reads the version its previous push produced
    for w in range(P):
        mine = [e for e in sched.updates() if e["worker"] == w]
        assert mine[0]["read"] == 0
        assert all(b["read"] == a["applied"] + 1 for a, b in pairwise(mine))


def test_hogwild_schedule_reads_at_the_start_and_writes_at_the_end_of_each_step():
    _, sched = make("hogwild")
    ups = sched.updates()
    assert [e["applied"] for e in ups] == list(range(len(ups)))
    assert any(e["read"] < e["applied"] for e in ups)        # 3 processes on shared weights
    for w in range(P):
        reads = [e["read"] for e in ups if e["worker"] == w]
        assert reads == sorted(reads)


def test_psgd_averages_every_k_and_at_the_end():
    result, sched = make("psgd", avg_every=4)
    n = result.iterations_per_worker
    assert len(kinds(sched, "average")) == (n - 1) // 4 + 1
    assert all(e["read"] == e["applied"] for e in sched.updates())
    one_shot = make("psgd")[1]
    assert len(kinds(one_shot, "average")) == 1 and one_shot.events[-1]["kind"] == "average"


def test_async_avg_mixes_as_real_train_does():
    result, sched = make("async_avg", avg_every=3)
    n = result.iterations_per_worker
    mixes = kinds(sched, "mix")
    # every worker every K steps, and once more with its last weights (real.train's count)
    assert Counter(m["worker"] for m in mixes) == {w: n // 3 + 1 for w in range(P)}
    assert sum(not m["reply"] for m in mixes) == P - 1        # last pushes get no reply
    assert all(m["weight"] == pytest.approx(1 / P) for m in mixes)


@pytest.mark.parametrize("scheme,evaluators", [("serial", 1), ("psgd", P), ("ps_async", 1),
                                               ("allreduce", 1), ("hogwild", 1)])
def test_evaluation_points_every_n_iterations_and_each_epoch_end(scheme, evaluators):
    p = 1 if scheme == "serial" else P
    result, sched = make(scheme, p)
    per_epoch, n = result.iterations_per_epoch, result.iterations_per_worker
    expected = sorted({s for s in range(1, n + 1) if s % EVERY == 0 or s % per_epoch == 0})
    steps = [e["step"] for e in kinds(sched, "eval")]
    scale = p if scheme == "ps_async" else 1      # a server counts single pushes
    assert sorted(set(steps)) == [s * scale for s in expected]
    assert len(steps) == evaluators * len(expected)


def test_schedule_file_round_trip(tmp_path):
    _, sched = make("ps_async")
    path = schedules.write(tmp_path / "s.jsonl", sched)
    back = schedules.read(path)
    assert back.header == sched.header and back.events == sched.events


def test_schedule_of_an_edited_workload_is_refused(tmp_path):
    _, sched = make("psgd")
    path = schedules.write(tmp_path / "s.jsonl", sched)
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    header["workload"]["model"] = "cnn"
    path.write_text("\n".join([json.dumps(header)] + lines[1:]))
    with pytest.raises(schedules.ScheduleError, match="fingerprint"):
        schedules.read(path)


@pytest.mark.parametrize("edit,message", [
    (lambda e: e.pop("read"), "field 'read'"),
    (lambda e: e.update(worker=7), "worker"),
    (lambda e: e.update(kind="jump"), "kind 'jump'"),
    (lambda e: e.update(batch=99), "batch 99"),
])
def test_a_bad_event_is_named_with_its_line(tmp_path, edit, message):
    _, sched = make("ps_async")
    event = dict(sched.updates()[3])
    edit(event)
    path = tmp_path / "s.jsonl"
    lines = schedules.write(path, sched).read_text().splitlines()
    n = sched.events.index(sched.updates()[3]) + 1
    lines[n] = json.dumps(event)
    path.write_text("\n".join(lines))
    with pytest.raises(schedules.ScheduleError, match=message) as info:
        schedules.read(path)
    assert f"line {n + 1}" in str(info.value) and "\n" not in str(info.value)


def test_not_a_schedule_is_refused(tmp_path):
    (tmp_path / "x.jsonl").write_text('{"hello": 1}\n')
    with pytest.raises(schedules.ScheduleError, match="not a schedule"):
        schedules.read(tmp_path / "x.jsonl")


def test_the_schedule_does_not_change_the_prediction():
    for scheme in ("ps_async", "hogwild", "psgd"):
        plain = simulate(SchemeConfig(scheme, engine="des"), P, WORKLOAD, MACHINE)
        with_schedule, _ = make(scheme)
        assert plain.schedule is None
        assert with_schedule.time_s == plain.time_s


def test_time_to_target_interpolates_and_says_not_reached():
    pts = [{"train_s": 0.0, "test_accuracy": 0.1}, {"train_s": 10.0, "test_accuracy": 0.7},
           {"train_s": 20.0, "test_accuracy": 0.9}]
    assert time_to_target(pts, 0.8) == pytest.approx(15.0)
    assert time_to_target(pts, 0.05) == 0.0
    assert time_to_target(pts, 0.95) is None
    assert describe_time(None, 3) == "not reached in 3 epochs"
    assert describe_time(None, 1) == "not reached in 1 epoch"
    assert describe_time(12.345, 3) == "12.3 s"
