"""In-server mechanisms: compute slowed beside NCCL, DDP's first and last buckets.

Each is checked against its closed form (``model.hardware.interference``,
``model.workload.ddp_buckets``); the SimPy model must reproduce them.
"""
from dataclasses import replace

import pytest

from contracts.checks import ConfigError
from contracts.cluster import Cluster, Device, Hardware, Link
from contracts.workload import Workload
from simulator.engine import simulate
from simulator.engine.placement import on_hardware
from simulator.model.comm.choice import call_latency_s, resolve_algorithm
from simulator.model.comm.costs import collective_time_s
from simulator.model.config import SchemeConfig
from simulator.model.fabric import make_routes
from simulator.model.hardware.interference import ddp_iteration_s, progress_end_s
from simulator.model.workload import ddp_buckets, ddp_first_buckets
from simulator.testing import make_profile

pytestmark = pytest.mark.timeout(120)


def test_progress_slows_inside_the_intervals_only():
    assert progress_end_s(0.0, 1.0, [], 0.5) == 1.0
    assert progress_end_s(0.0, 1.0, [(0.0, 10.0)], 0.5) == pytest.approx(1.5)
    # 0.2 alone, then 0.5 s at 2/3 speed (1/3 of work), then the rest alone
    assert progress_end_s(0.0, 1.0, [(0.2, 0.7)], 0.5) == pytest.approx(
        0.2 + 0.5 + (1.0 - 0.2 - 0.5 / 1.5))
    assert progress_end_s(1.0, 1.0, [(0.0, 0.5)], 9.0) == 2.0          # before the start


def test_the_ddp_closed_form_exposes_the_last_bucket():
    # no slowdown: three buckets hide behind the backward but the last
    t = ddp_iteration_s(1.0, 3.0, [0.25, 0.25, 0.5], [0.1, 0.1, 0.2])
    assert t == pytest.approx(1.0 + 3.0 + 0.2)
    slowed = ddp_iteration_s(1.0, 3.0, [0.25, 0.25, 0.5], [0.1, 0.1, 0.2], slowdown=0.5)
    # two allreduces of 0.1 s inside the backward: each gets 0.1 / 1.5 s of it done
    assert slowed == pytest.approx(4.2 + 0.2 * 0.5 / 1.5)


def _cluster(slowdown):
    hw = Hardware(device=Device("A100 SXM4", 19.5e12), intra=Link(100e9, 5e-6),
                  call_latency_s=10e-6, compute_slowdown=slowdown)
    return Cluster(hosts=1, cores_per_host=4, placement="packed", hardware=hw)


PARAMS = (3_000_000, 8_000_000, 500_000, 2_000_000)


@pytest.mark.parametrize("slowdown", [0.0, 0.189, 1.0])
def test_simpy_ddp_is_the_closed_form(slowdown):
    prof = make_profile(layer_param_counts=PARAMS, step_intercept_s=0.0,
                        step_s_per_sample=0.0005)
    cluster, work = _cluster(slowdown), Workload(model="toy", batch_per_worker=32, iterations=6)
    cfg = SchemeConfig("ddp", algorithm="ring", bucket_bytes=12_000_000, engine="des")
    r = simulate(cfg, 4, work, cluster, prof)
    model = prof.model("toy")
    buckets = ddp_buckets(model, cfg.bucket_bytes, 4.0)
    hw_prof = on_hardware(prof, cluster)
    transport = hw_prof.transport("nccl")
    routes = make_routes((0, 0, 0, 0), cluster, transport)
    ranks = (0, 1, 2, 3)

    def cost(nb):
        alg = resolve_algorithm("nccl", "ring", ranks, nb, routes)
        return (collective_time_s("allreduce", ranks, nb, routes, 0.0, alg)
                + call_latency_s(transport, routes, alg))
    comm = [cost(nb) for nb, _ in buckets]
    step = 0.0005 * 32
    bf = model.backward_fraction
    expect = ddp_iteration_s(step * (1 - bf), step * bf, [s for _, s in buckets], comm, slowdown)
    first = ddp_first_buckets(model, 4.0)       # the first iteration: layer order
    comm0 = [cost(nb) for nb, _ in first]
    expect0 = ddp_iteration_s(step * (1 - bf), step * bf, [s for _, s in first], comm0,
                              slowdown)
    n = 4.0 * sum(PARAMS)                       # building DDP broadcasts the weights first
    start = (collective_time_s("bcast", ranks, n, routes, 0.0, "binomial")
             + call_latency_s(transport, routes, "binomial"))
    assert r.time_s == pytest.approx(start + expect0 + 5 * expect, rel=1e-9)


@pytest.mark.parametrize("scheme,p,spread,ahead,groups", [
    ("ddp", 4, 0.0, False, 0), ("ddp", 3, 0.05, False, 0), ("horovod", 4, 0.0, False, 0),
    ("horovod", 4, 0.05, False, 0), ("horovod", 4, 0.0, True, 0), ("horovod", 4, 0.05, True, 0),
    ("horovod", 4, 0.05, False, 2), ("horovod", 4, 0.0, True, 2)])
def test_the_fast_path_is_the_simpy_model_when_compute_slows(scheme, p, spread, ahead, groups):
    prof = make_profile(layer_param_counts=PARAMS, step_intercept_s=0.0,
                        step_s_per_sample=0.0005, spread_cv=spread)
    work = Workload(model="toy", batch_per_worker=32, iterations=5)
    runs = [simulate(SchemeConfig(scheme, algorithm="ring", engine=e, bucket_bytes=12_000_000,
                                  cycle_s=0.002, fusion_bytes=20_000_000,
                                  requests_ahead=ahead, horovod_groups=groups), p, work,
                     _cluster(0.3), prof) for e in ("fast", "des")]
    assert runs[0].engine == "fast" and runs[1].engine == "des"
    assert runs[0].time_s == pytest.approx(runs[1].time_s, rel=1e-9)
    assert runs[0].compute_s == pytest.approx(runs[1].compute_s, rel=1e-9)


@pytest.mark.parametrize("cycle", [0.004, 0.0])
def test_horovods_slowed_cycles_are_its_cycles_when_nothing_slows(cycle):
    """The tick-by-tick negotiation (used when compute slows) gives the precomputed
    cycles' run when the slowdown is negligible."""
    prof = make_profile(layer_param_counts=PARAMS, step_intercept_s=0.0,
                        step_s_per_sample=0.0005)
    work = Workload(model="toy", batch_per_worker=32, iterations=4)
    cfg = SchemeConfig("horovod", algorithm="ring", engine="des", cycle_s=cycle,
                       fusion_bytes=20_000_000)
    base = simulate(cfg, 4, work, _cluster(0.0), prof).time_s
    tiny = simulate(cfg, 4, work, _cluster(1e-12), prof).time_s
    assert tiny == pytest.approx(base, abs=1e-4 if cycle == 0 else 1e-9)


def test_horovod_slowed_costs_at_most_the_slowdown_of_its_allreduces():
    prof = make_profile(layer_param_counts=PARAMS, step_intercept_s=0.0,
                        step_s_per_sample=0.0005)
    work = Workload(model="toy", batch_per_worker=32, iterations=4)
    cfg = SchemeConfig("horovod", algorithm="ring", engine="des", cycle_s=0.002,
                       fusion_bytes=20_000_000)
    base = simulate(cfg, 4, work, _cluster(0.0), prof)
    slow = simulate(cfg, 4, work, _cluster(0.5), prof)
    assert base.time_s < slow.time_s <= base.time_s + 0.5 * base.comm_s + 4 * 0.002


def _fed(cpu_cores, input_s, workers=0):
    cluster = replace(_cluster(0.0), cpu_cores=cpu_cores)
    prof = make_profile(layer_param_counts=(1000,), step_intercept_s=0.0,
                        step_s_per_sample=0.0005)
    model = replace(prof.model("toy"), input_s_per_sample=input_s, input_workers=workers)
    return cluster, replace(prof, models=(model,))


def test_the_input_pipeline_bounds_a_hosts_steps():
    """k ranks of a host need k * batch * input_per_sample of its cpu_cores each step:
    32 samples, 2 ms each, 4 ranks on 8 cores: 32 ms a step against 16 ms of compute."""
    work = Workload(model="toy", batch_per_worker=32, iterations=5)
    cluster, prof = _fed(8, 0.002)
    one = simulate(SchemeConfig("serial"), 1, work, cluster, prof)
    four = simulate(SchemeConfig("ddp"), 4, work, cluster, prof)
    assert one.time_s == pytest.approx(5 * max(0.016, 32 * 0.002 / 8))
    assert four.compute_s == pytest.approx(5 * 4 * 32 * 0.002 / 8)
    free = simulate(SchemeConfig("ddp"), 4, work, *_fed(0, 0.002))        # no cores named
    assert free.compute_s == pytest.approx(5 * 0.016)


def test_a_ranks_loader_workers_cap_the_cores_its_input_uses():
    """batch * input_per_sample / min(input_workers, cpu_cores / k): one rank with 2 loader
    workers on 8 cores decodes on 2 (32 ms), not 8; four such ranks share the 8 cores, 2 each,
    as without the cap; the DeepLearningExamples DGX-1 case, 8 workers a GPU on 40 cores:
    one core each at 1 GPU, 40 / 64 at 8."""
    work = Workload(model="toy", batch_per_worker=32, iterations=5)
    cluster, prof = _fed(8, 0.002, workers=2)
    one = simulate(SchemeConfig("serial"), 1, work, cluster, prof)
    four = simulate(SchemeConfig("ddp"), 4, work, cluster, prof)
    assert one.time_s == pytest.approx(5 * 32 * 0.002 / 2)
    assert four.compute_s == pytest.approx(5 * 4 * 32 * 0.002 / 8)
    cluster, prof = _fed(40, 0.005, workers=8)
    cluster = replace(cluster, cores_per_host=8)          # 8 GPUs on the one host
    one = simulate(SchemeConfig("serial"), 1, work, cluster, prof)
    eight = simulate(SchemeConfig("ddp"), 8, work, cluster, prof)
    assert one.time_s == pytest.approx(5 * 32 * 0.005 / 8)             # 20 ms over 16
    assert eight.compute_s == pytest.approx(5 * 32 * 0.005 / (40 / 8))  # 32 ms


def test_the_time_an_image_is_read_at_the_hosts_busy_loader_processes():
    """t_image(busy), busy = min(cpu_cores, k * workers): 2 ms alone, 3 ms with 3 at once,
    4 ms with 8, linear between, held past 8. One rank with 2 workers on 8 cores: 2 busy,
    2.5 ms, 32 x 2.5 / 2 = 40 ms a step; four ranks: 8 busy, 4 ms, 32 x 4 / 2 = 64 ms."""
    from simulator.model.hardware.input_pipeline import busy_processes, image_s, input_step_s
    curve = ((3.0, 8.0), (0.003, 0.004))
    assert image_s(0.002, *curve, 1) == 0.002 and image_s(0.002, *curve, 2) == 0.0025
    assert image_s(0.002, *curve, 6) == pytest.approx(0.0036)
    assert image_s(0.002, *curve, 64) == 0.004 and image_s(0.002, (), (), 64) == 0.002
    assert busy_processes(2, 4, 8) == 8 and busy_processes(8, 8, 40) == 40
    assert busy_processes(0, 1, 8) == 8
    assert input_step_s(32, 0.002, *curve, 2, 1, 8) == pytest.approx(0.040)
    assert input_step_s(32, 0.002, *curve, 0, 4, 8) == pytest.approx(32 * 0.004 / 2)
    work = Workload(model="toy", batch_per_worker=32, iterations=5)
    cluster, prof = _fed(8, 0.002, workers=2)
    model = replace(prof.model("toy"), input_busy=curve[0], input_s_per_sample_busy=curve[1])
    prof = replace(prof, models=(model,))
    one = simulate(SchemeConfig("serial"), 1, work, cluster, prof)
    four = simulate(SchemeConfig("ddp"), 4, work, cluster, prof)
    assert one.time_s == pytest.approx(5 * 0.040)
    assert four.compute_s == pytest.approx(5 * 0.064)


def test_the_input_cost_round_trips_through_a_workload_file(tmp_path):
    from contracts.workload import load_workload, model_cost, save_workload
    f = tmp_path / "w.toml"
    f.write_text('[model]\nname = "m"\nparams = 10\n[measured]\ndevice = "A100 SXM4"\n'
                 'batch_size = 8\nstep = "10ms"\ninput_per_sample = "2.5ms"\n')
    w = load_workload(f)
    assert w.input_s_per_sample == pytest.approx(0.0025)
    assert model_cost(load_workload(save_workload(w, tmp_path / "b.toml"))
                      ).input_s_per_sample == pytest.approx(0.0025)
    assert w.input_workers == 0
    f.write_text(f.read_text() + "input_workers = 8\n")
    again = load_workload(save_workload(load_workload(f), tmp_path / "c.toml"))
    assert again.input_workers == 8 and model_cost(again).input_workers == 8
    f.write_text(f.read_text() + 'input_per_sample_at = { 16 = "4ms", 4 = "3ms" }\n')
    again = load_workload(save_workload(load_workload(f), tmp_path / "d.toml"))
    assert again.input_at == ((4, 0.003), (16, 0.004))
    assert model_cost(again).input_busy == (4.0, 16.0)
    assert model_cost(again).input_s_per_sample_busy == (0.003, 0.004)
    for bad, says in (('{ 1 = "4ms" }', "above 1"), ('"4ms"', "must be a table")):
        f.write_text(f.read_text().replace('{ 16 = "4ms", 4 = "3ms" }', bad))
        with pytest.raises(ConfigError, match=says):
            load_workload(f)
        f.write_text(f.read_text().replace(bad, '{ 16 = "4ms", 4 = "3ms" }'))
    f.write_text(f.read_text().replace("input_workers = 8", "input_workers = -1"))
    with pytest.raises(ConfigError, match="input_workers"):
        load_workload(f)


def test_each_precision_slows_by_its_own_value():
    """``compute_slowdown_<precision>`` where given, else ``compute_slowdown``; a run of
    an amp model and one of an fp32 model are each their closed form at their value."""
    hw = replace(_cluster(0.189).hardware, precision_slowdowns=(("fp32", 0.081),
                                                                 ("amp", 0.176)))
    assert (hw.slowdown_at("fp32"), hw.slowdown_at("amp"), hw.slowdown_at("tf32")) == (
        0.081, 0.176, 0.189)
    prof = make_profile(layer_param_counts=PARAMS, step_intercept_s=0.0,
                        step_s_per_sample=0.0005)
    cluster = replace(_cluster(0.189), hardware=hw)
    work = Workload(model="toy", batch_per_worker=32, iterations=3)
    cfg = SchemeConfig("ddp", algorithm="ring", bucket_bytes=12_000_000)
    for precision, slowdown in (("fp32", 0.081), ("amp", 0.176), ("tf32", 0.189)):
        model = replace(prof.model("toy"), precision=precision)
        run = simulate(cfg, 4, work, cluster, replace(prof, models=(model,)))
        alone = simulate(cfg, 4, work, _cluster(slowdown), replace(prof, models=(model,)))
        assert run.time_s == pytest.approx(alone.time_s, rel=1e-12)


def test_the_presets_slowdowns_are_the_h200_measurement():
    """Every preset's per-precision slowdown is the probe's 32-program figure of that
    precision, and its source names the result file."""
    import json

    from contracts.cluster import PRESETS_DIR, load_preset, preset_names
    from simulator.engine.machine import _cluster_rows
    result = "benchmarks/gpu/results/h200-2026-11-27.json"
    probe = json.loads((PRESETS_DIR.parents[2] / result).read_text())["precisions"]
    checked = 0
    for name in preset_names():
        cluster = load_preset(name)
        sources = dict(cluster.sources)
        for precision, value in cluster.hardware.precision_slowdowns:
            measured = probe[precision]["beside"]["reduce-32"]["compute_slowdown"]
            assert value == pytest.approx(measured, abs=5e-4), (name, precision)
            assert result in sources[f"nccl.compute_slowdown_{precision}"]
            checked += 1
        rows = {r["quantity"]: r for r in _cluster_rows(cluster)}
        for precision, value in cluster.hardware.precision_slowdowns:
            row = rows[f"cluster nccl.compute_slowdown_{precision}"]
            assert float(row["value"]) == value and result in row["origin"]
    assert checked >= 8


def test_an_iteration_under_way_leaves_ddps_construction_out():
    """``steady_iteration_s``: (T(2I) - T(I)) / I, the same whatever I; ddp's run holds its
    constructor's broadcast of the weights once, so T(I) exceeds I such iterations."""
    from simulator.engine import steady_iteration_s
    prof = make_profile(layer_param_counts=PARAMS, step_intercept_s=0.0,
                        step_s_per_sample=0.0005)
    cfg = SchemeConfig("ddp", backend="nccl")
    short, long = (Workload(model="toy", batch_per_worker=32, iterations=i) for i in (5, 10))
    step = steady_iteration_s(cfg, 4, short, _cluster(0.0), prof)
    assert step == pytest.approx(steady_iteration_s(cfg, 4, long, _cluster(0.0), prof), rel=1e-9)
    assert simulate(cfg, 4, short, _cluster(0.0), prof).time_s > 5 * step * (1 + 1e-6)
