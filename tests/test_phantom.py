"""Phantom compute: the sleeps follow the workload, the stand-in holds its tensors, DDP's
buckets launch while backward still sleeps, and bad input is refused in one line.

The sleeps are checked on a fake clock (each nap moves it by its length plus a fixed
lateness): order and lengths are then exact, whatever the machine's speed.
"""
from __future__ import annotations

import pytest
import torch

from real.launch import train
from real.phantom.compute import PhantomCompute
from real.phantom.model import PhantomModel
from real.phantom.plan import PhantomError, load_plan
from real.phantom.sleep import LatenessLog, Sleeper
from tests.refusal import refused

pytestmark = pytest.mark.timeout(120)

WORKLOAD = """
schema_version = 1
[model]
name = "three"
[measured]
device = "cpu"
batch_size = 32
step = "{step}"
update = "1ms"
[[layers]]
name = "out"
forward = "1ms"
backward = "2ms"
tensors = [{{ name = "out.bias", params = 10, param_index = 5 }},
           {{ name = "out.weight", params = {big}, param_index = 4 }}]
[[layers]]
name = "mid"
forward = "3ms"
backward = "5ms"
tensors = [{{ name = "mid.weight", params = {big}, param_index = 2 }},
           {{ name = "mid.bias", params = 20, dtype = "float64", param_index = 3 }}]
[[layers]]
name = "in"
forward = "7ms"
backward = "11ms"
tensors = [{{ name = "in.weight", params = {big}, param_index = 0 }},
           {{ name = "in.bias", params = 30, param_index = 1 }}]
"""


def workload_file(tmp_path, big: int = 1000, step: str = "30ms", text: str | None = None):
    path = tmp_path / "w.toml"
    path.write_text(text if text is not None else WORKLOAD.format(big=big, step=step))
    return path


class FakeClock:
    """A clock that only a nap moves: by its length plus ``late_s``."""

    def __init__(self, late_s: float = 0.0):
        self.t, self.late_s, self.naps = 100.0, late_s, []

    def now(self) -> float:
        return self.t

    def nap(self, s: float) -> None:
        self.naps.append(s)
        self.t += s + self.late_s


def test_a_step_sleeps_each_layer_in_order_for_its_time(tmp_path):
    clock = FakeClock()
    sleeper = Sleeper(clock=clock.now, nap=clock.nap, slack=False)
    compute = PhantomCompute(load_plan(str(workload_file(tmp_path))), sleeper)
    model = compute.model()
    clock.naps.clear()                                # the stand-in tares itself: its naps
    compute.step(model, None, torch.empty(32, 0), torch.zeros(32))
    ms = [round(s * 1e3, 9) for s in clock.naps]
    # forward in forward order (in, mid, out), backward in gradient-ready order, the update
    assert ms == [7, 3, 1, 2, 5, 11, 1]


def test_a_smaller_batch_and_the_time_scale_scale_every_sleep(tmp_path):
    clock = FakeClock()
    sleeper = Sleeper(clock=clock.now, nap=clock.nap, slack=False)
    compute = PhantomCompute(load_plan(str(workload_file(tmp_path)), time_scale=1000), sleeper)
    model = compute.model()
    clock.naps.clear()
    compute.step(model, None, torch.empty(16, 0), torch.zeros(16))
    # no step line in the file: a step is proportional to the batch (16 of 32)
    assert [round(s, 9) for s in clock.naps] == [3.5, 1.5, 0.5, 1.0, 2.5, 5.5, 0.5]


def test_lateness_is_taken_off_the_next_sleep_so_the_chain_keeps_its_length():
    clock = FakeClock(late_s=70e-6)
    sleeper = Sleeper(clock=clock.now, nap=clock.nap, slack=False)
    asked = [1e-3, 20e-6, 20e-6, 2e-3, 50e-6, 3e-3]
    t0 = clock.now()
    for s in asked:
        sleeper.sleep(s)
    # the chain ends one lateness after its length; each sleep paid the previous one's
    assert clock.now() - t0 == pytest.approx(sum(asked) + 70e-6, abs=1e-12)
    assert sleeper.skipped == 3                     # the debt covered the short ones
    summary = sleeper.summary()
    assert summary["sleeps"] == 3 and summary["compute_s"] == pytest.approx(sum(asked))
    assert summary["p50_s"] == pytest.approx(70e-6, rel=0.05)
    assert summary["late_total_s"] == pytest.approx(3 * 70e-6)


def test_the_sleepers_own_work_is_carried_like_lateness(monkeypatch):
    """The sleeper's own work around its nap (setting the timer slack and back: 5-50 us a
    sleep, hundreds of sleeps a step) is paid back by the next sleep, not added to the
    chain."""
    import real.phantom.sleep as sleep_mod
    clock = FakeClock()

    def costly_slack(ns=1):
        clock.t += 50e-6
        return True
    monkeypatch.setattr(sleep_mod, "set_timer_slack", costly_slack)
    monkeypatch.setattr(sleep_mod, "timer_slack_ns", lambda: 50_000)
    sleeper = Sleeper(clock=clock.now, nap=clock.nap)
    t0 = clock.t
    for _ in range(50):
        sleeper.sleep(1e-3)
    assert clock.t - t0 == pytest.approx(50e-3 + sleeper.debt_s, abs=1e-12)
    assert sleeper.debt_s == pytest.approx(50e-6)          # the last one's slack set back


def test_without_the_carry_lateness_adds_up():
    clock = FakeClock(late_s=70e-6)
    sleeper = Sleeper(carry=False, clock=clock.now, nap=clock.nap, slack=False)
    t0 = clock.now()
    for _ in range(10):
        sleeper.sleep(1e-3)
    assert clock.now() - t0 == pytest.approx(10 * (1e-3 + 70e-6))


def test_lateness_histogram_quantiles_within_one_bin():
    log = LatenessLog()
    for us in range(1, 1001):
        log.add(us * 1e-6)
    assert log.quantile(0.5) == pytest.approx(500e-6, rel=0.05)
    assert log.quantile(0.99) == pytest.approx(990e-6, rel=0.05)
    assert log.max_s == pytest.approx(1e-3) and log.n == 1000


def test_a_real_sleep_sets_the_timer_slack_and_wakes_after_its_deadline():
    """The 1 ns slack holds for the sleep only: after it the thread has its own back
    (MPICH's heavy yield sleeps it between polls)."""
    from real.phantom.sleep import timer_slack_ns
    before = timer_slack_ns()
    sleeper = Sleeper()
    sleeper.sleep(2e-3)
    summary = sleeper.summary()
    assert summary["timer_slack_ns"] == 1 and timer_slack_ns() == before
    assert summary["max_s"] >= 0 and summary["sleeps"] == 1


def test_the_stand_in_holds_the_workloads_tensors_in_parameters_order(tmp_path):
    model = PhantomModel(load_plan(str(workload_file(tmp_path))))
    got = [(p.numel(), p.dtype) for p in model.parameters()]
    f32, f64 = torch.float32, torch.float64
    assert got == [(1000, f32), (30, f32), (1000, f32), (20, f64), (1000, f32), (10, f32)]
    model(torch.empty(32, 0)).backward()
    assert all(p.grad is not None and p.grad.shape == p.shape and not p.grad.any()
               for p in model.parameters())


def test_without_param_index_the_order_is_the_ready_order_reversed(tmp_path):
    text = WORKLOAD.format(big=100, step="30ms")
    for i in range(6):
        text = text.replace(f", param_index = {i} ", " ")
    model = PhantomModel(load_plan(str(workload_file(tmp_path, text=text))))
    assert [p.numel() for p in model.parameters()] == [30, 100, 20, 100, 100, 10]


def test_ddp_launches_the_first_bucket_while_backward_still_sleeps(tmp_path):
    """World size 1, gloo: DDP's reducer is the real one. Layers of 1.6 MB each: after the
    first iteration's rebuild, the first bucket (1 MiB cap) holds the first-ready layer
    alone and is launched from its gradient's hook, before the next layer's backward."""
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel
    events = []
    sleeper = Sleeper()
    real_sleep = sleeper.sleep
    sleeper.sleep = lambda s: (events.append(("sleep", s)), real_sleep(s))
    compute = PhantomCompute(load_plan(str(workload_file(tmp_path, big=400_000))), sleeper)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        model = compute.model()
        ddp = DistributedDataParallel(model)

        def hook(state, bucket):
            events.append(("bucket", bucket.buffer().numel()))
            return allreduce_hook(state, bucket)
        ddp.register_comm_hook(None, hook)
        for _ in range(3):
            events.clear()
            compute.forward_backward(ddp, torch.empty(32, 0), None)
    finally:
        dist.destroy_process_group()
    backward = [i for i, e in enumerate(events) if e[0] == "sleep"][3:]    # after 3 forwards
    first_bucket = next(i for i, e in enumerate(events) if e[0] == "bucket")
    assert first_bucket < backward[-1], events
    assert events[first_bucket][1] == 400_010          # the "out" layer, ready first
    assert sum(e[1] for e in events if e[0] == "bucket") == 3 * 400_000 + 60


def test_a_workload_set_measured_beside_other_load_is_measured_again(tmp_path, monkeypatch):
    """Other processes took half a core while the first set was measured: it is measured
    again, and measurements.csv keeps both tries with the cores the others used."""
    import shutil

    import pandas as pd

    from real.phantom import check
    source, others = workload_file(tmp_path), iter([0.5, 0.0, 0.1])

    def fake_set(args, files):
        for f in files:
            shutil.copy(source, f)
        return next(others)
    monkeypatch.setattr(check, "measure_set", fake_set)
    args = check.build_parser().parse_args(["--out", str(tmp_path), "--measurements", "2"])
    sets = check.WorkloadSets(args, tmp_path)
    first, second = sets.files(2, 0), sets.files(2, 1)
    assert sets.files(2, 2) == first and first != second and len(sets.steps()) == 4
    log = pd.read_csv(tmp_path / "workload" / "measurements.csv")
    assert log["attempt"].tolist() == [1, 2, 1]
    assert log["disturbed"].tolist() == [True, False, False]


def test_ddp_broadcasts_the_same_buffers_for_the_phantom_as_for_the_real_model(tmp_path):
    """A model with BatchNorm: DDP broadcasts its buffers before every forward in training;
    the stand-in of its workload file (buffers written by calibrate.workload's
    ``buffer_tensors``, read back from TOML) hands DDP the same tensors: sizes, dtypes, order."""
    import dataclasses

    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    from calibrate.probes.workload import buffer_tensors
    from contracts.workload import load_workload, save_workload
    real = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 6 * 6, 8), nn.BatchNorm1d(8))
    path = tmp_path / "bn.toml"
    save_workload(dataclasses.replace(load_workload(workload_file(tmp_path)),
                                      buffers=buffer_tensors(real)), path)
    compute = PhantomCompute(load_plan(str(path)), Sleeper())
    sent = {}

    def spied(name, ddp):
        def broadcast(tensors, size, rank=0):
            sent.setdefault(name, []).append([(t.numel(), t.dtype) for t in tensors])
            return original(tensors, size, rank)
        original = ddp._distributed_broadcast_coalesced
        ddp._distributed_broadcast_coalesced = broadcast
        return ddp

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        spied("real", DistributedDataParallel(real))(torch.randn(2, 1, 8, 8)).sum().backward()
        compute.forward_backward(spied("phantom", DistributedDataParallel(compute.model())),
                                 torch.empty(32, 0), None)
    finally:
        dist.destroy_process_group()
    assert sent["real"] == sent["phantom"] == [[(4, torch.float32), (4, torch.float32),
                                                (1, torch.int64), (8, torch.float32),
                                                (8, torch.float32), (1, torch.int64)]]


# ------------------------------------------------------------------ bad input

def test_a_workload_without_per_layer_times_is_refused(tmp_path):
    few = tmp_path / "few.toml"
    few.write_text('[model]\nname = "m"\nparams = 1000\n[measured]\ndevice = "cpu"\n'
                   'batch_size = 32\nstep = "10ms"\n')
    with pytest.raises(PhantomError, match="no per-layer times"):
        load_plan(str(few))
    text = WORKLOAD.format(big=10, step="30ms").replace('backward = "5ms"\n', "")
    with pytest.raises(PhantomError, match=r"layers\[1\]\.backward"):
        load_plan(str(workload_file(tmp_path, text=text)))


def phantom_argv(tmp_path, *extra):
    return ["--dataset", "synthetic", "--train-size", "128", "--out", str(tmp_path / "runs"),
            *extra]


@pytest.mark.parametrize("extra,named", [
    (["--time-scale", "0"], "--time-scale"),
    (["--time-scale", "-2"], "--time-scale"),
    (["--time-scale", "nan"], "--time-scale"),
    (["--time-scale", "inf"], "--time-scale"),
    (["--time-scale", "fast"], "--time-scale"),
    (["--schemes", "serial", "--compute", "phantom"], "serial"),
    (["--schemes", "hogwild", "--workers", "2", "--compute", "phantom"], "hogwild"),
    (["--schemes", "ddp", "--compute", "phantom"], "--workload"),
    (["--schemes", "ddp", "--time-scale", "10"], "--time-scale"),
    (["--schemes", "ddp", "--compute", "phantom", "--target-accuracy", "0.5"],
     "--target-accuracy"),
    (["--schemes", "ddp", "--compute", "phantom", "--model", "vgg11"], "--model"),
    (["--schemes", "ddp", "--compute", "gpu"], "--compute"),
])
def test_bad_phantom_flags(tmp_path, capsys, extra, named):
    w = workload_file(tmp_path)
    if "--compute" in extra and "phantom" in extra and "--workload" not in named:
        extra = [*extra, "--workload", str(w)]
    refused(train.main, phantom_argv(tmp_path, *extra), named, capsys)
    assert not (tmp_path / "runs").exists()


def test_a_workload_without_times_is_one_line_naming_the_field(tmp_path, capsys):
    text = WORKLOAD.format(big=10, step="30ms").replace('forward = "7ms"\n', "")
    w = workload_file(tmp_path, text=text)
    line = refused(train.main, phantom_argv(tmp_path, "--schemes", "ddp", "--compute",
                                            "phantom", "--workload", str(w)),
                   "layers[2].forward", capsys)
    assert "calibrate.workload" in line
    from real.phantom import check as phantom_check  # refused before any run, real or phantom
    refused(phantom_check.main, ["--workload", str(w), "--out", str(tmp_path / "pc")],
            "layers[2].forward", capsys)


def test_the_sweep_refuses_phantom_serial(tmp_path, capsys):
    from real.launch import sweep
    w = workload_file(tmp_path)
    refused(sweep.main, ["--schemes", "serial,ddp", "--workers", "1,2", "--compute", "phantom",
                         "--workload", str(w), "--dataset", "synthetic", "--out",
                         str(tmp_path / "s")], "serial", capsys)


def test_the_sweep_passes_the_compute_to_every_point(tmp_path, capsys):
    from real.launch import sweep
    w = workload_file(tmp_path)
    code = sweep.main(["--schemes", "ddp,ps_sync", "--workers", "2", "--compute", "phantom",
                       "--workload", str(w), "--time-scale", "10", "--dataset", "synthetic",
                       "--batch-size", "32", "--out", str(tmp_path / "s"), "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0
    lines = [ln for ln in out.splitlines() if "real.train" in ln]
    assert len(lines) == 4                      # P = 1 and 2 of each
    for ln in lines:
        assert f"--compute phantom --workload {w.resolve()} --time-scale 10.0" in ln
        assert "--model" not in ln


def test_the_check_judges_against_5_percent_beyond_the_spread():
    from real.phantom.check import table, verdicts, worker_counts
    assert worker_counts("2") == [2] and worker_counts("4,8,15") == [4, 8, 15]
    times = {("ddp", 2, "real"): [(0.010, False), (0.010, False), (0.010, True)],
             ("ddp", 2, "phantom"): [(0.0104, False), (0.0104, False)],
             ("psgd", 2, "real"): [(0.010, False), (0.010, False)],
             ("psgd", 2, "phantom"): [(0.012, False), (0.012, False)],
             ("ps_sync", 2, "real"): [(0.010, True), (0.010, False)],
             ("ps_sync", 2, "phantom"): [(0.010, False), (0.010, False)],
             ("ps_async", 2, "real"): [(0.020, False, True), (0.020, False, True)],
             ("ps_async", 2, "phantom"): [(0.010, False), (0.010, False)],
             ("ddp", 4, "real"): [(0.010, False), (0.010, False)]}
    rows = {r["scheme"]: r for r in verdicts(times, ["ddp", "psgd", "ps_sync", "ps_async"], [2])}
    assert rows["ddp"]["agrees"] and rows["ddp"]["disturbed_left_out"] == 1
    assert rows["ddp"]["allowed"] == pytest.approx(0.05)      # no spread in either mode
    assert not rows["psgd"]["agrees"] and rows["psgd"]["difference"] == pytest.approx(0.2)
    assert not rows["ps_sync"]["judged"]
    assert rows["ps_async"]["testbed_bound"] and not rows["ps_async"]["judged"]
    text = table(list(rows.values()))
    assert "MISSES" in text and "not judged" in text and "testbed-bound" in text


def test_each_phantom_rank_takes_its_own_measured_workload(tmp_path):
    """MPMD: one mpirun section per rank; worker i sleeps file i, the server file 0."""
    from real.phantom.check import build_parser, run_command
    args = build_parser().parse_args(["--out", str(tmp_path)])
    files = [tmp_path / "w0.toml", tmp_path / "w1.toml"]
    cmd = run_command(args, "ps_sync", 2, "phantom", "r", files)
    sections = " ".join(cmd).split(" : ")
    assert len(sections) == 3 and all("-n 1 " in s for s in sections)
    assert [s.split("--workload ")[1].split()[0] for s in sections] == \
        [str(files[0]), str(files[0]), str(files[1])]
    real = run_command(args, "ps_sync", 2, "real", "r", files)
    assert ":" not in real and real[real.index("-n") + 1] == "3" and "--workload" not in real


def test_the_stand_in_charges_its_own_work_not_the_schemes(tmp_path):
    """Autograd's steps between backward layers are measured once (the tare) and taken off
    the sleeps; work outside the stand-in (here: a hook that takes 20 ms) stays on top."""
    clock = FakeClock()
    sleeper = Sleeper(clock=clock.now, nap=clock.nap, slack=False)
    compute = PhantomCompute(load_plan(str(workload_file(tmp_path))), sleeper)
    model = compute.model()
    assert len(model.tare_gaps_s) == 2 and model.tare_tail_s == 0.0   # the fake clock
    model.tare_gaps_s = [1e-3, 1e-3]
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(lambda p: setattr(clock, "t", clock.t + 0.02))
    clock.naps.clear()
    t0 = clock.now()
    compute.forward_backward(model, torch.empty(32, 0), None)
    # 29 ms asked, two gaps of 1 ms charged, six hooks of 20 ms on top
    assert clock.now() - t0 == pytest.approx(29e-3 - 2e-3 + 6 * 0.02)
