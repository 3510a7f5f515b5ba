"""The optimizer's step on accelerator hosts, once every ``--accumulation-steps`` iterations
(``engine.run.with_optimizer_step``, ``hardware.optimizer_step.sgd_step_s``), what
``simulator.predict`` says each mechanism costs and where its number came from
(``engine.mechanisms``), and the flag's bad values."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from contracts.checks import ConfigError
from contracts.cluster import Cluster, Device, Hardware, Link, load_preset, preset_names
from contracts.workload import Workload
from simulator import predict
from simulator.engine import simulate
from simulator.model.config import SchemeConfig
from simulator.model.hardware.optimizer_step import sgd_step_s
from simulator.testing import make_profile

PARAMS = (3_000_000, 8_000_000, 500_000, 2_000_000)
BANDWIDTH, CALL = 1e12, 8e-6
ITERATIONS = 6
A100_FILE = Path(__file__).resolve().parent.parent / "benchmarks" / "dle" / "resnet50-a100.toml"


def _cluster(bandwidth: float = BANDWIDTH) -> Cluster:
    hw = Hardware(device=Device("A100 SXM4", 19.5e12, memory_bytes_per_s=bandwidth,
                                host_call_s=CALL),
                  intra=Link(100e9, 5e-6), call_latency_s=10e-6)
    return Cluster(hosts=1, cores_per_host=4, placement="packed", hardware=hw)


def _profile(precision: str = "fp32", update_fraction: float = 0.0):
    prof = make_profile(layer_param_counts=PARAMS, step_intercept_s=0.0,
                        step_s_per_sample=0.0005)
    return replace(prof, models=(replace(prof.models[0], precision=precision,
                                         update_fraction=update_fraction),))


def _time(scheme, every, cluster=None, profile=None, engine="auto") -> float:
    work = Workload(model="toy", batch_per_worker=32, iterations=ITERATIONS,
                    accumulation_steps=every)
    return simulate(SchemeConfig(scheme, engine=engine), 4, work, cluster or _cluster(),
                    profile or _profile()).time_s


@pytest.mark.parametrize("scheme,engine", [("ddp", "des"), ("ddp", "fast"),
                                           ("allreduce", "auto"), ("psgd", "auto")])
@pytest.mark.parametrize("precision", ["fp32", "amp"])
def test_k_iterations_pay_one_update(scheme, engine, precision):
    """A measured step holds one update u (here the model's: the SGD step of every tensor,
    weight-decayed, by precision); stepping the optimizer once every K iterations makes each
    exactly u (1 - 1/K) shorter on identical ranks; the backward keeps its length, so DDP's
    overlap does not move; K = 1: the step as measured."""
    prof = _profile(precision)
    u = sgd_step_s([(n, True) for n in PARAMS], precision, BANDWIDTH, CALL)
    once = _time(scheme, 1, profile=prof, engine=engine)
    for every in (2, 4):
        saved = once - _time(scheme, every, profile=prof, engine=engine)
        assert saved == pytest.approx(ITERATIONS * u * (1 - 1 / every), rel=1e-9, abs=1e-12)


def test_a_measured_update_is_the_one_kept_and_a_server_or_cpu_pays_as_measured():
    """A step measured with its update (a share f of it) keeps f / K of that; the parameter
    server's schemes, a device without a memory bandwidth and CPU hosts run the step as
    measured whatever K; a modelled update longer than the step is refused."""
    prof = _profile(update_fraction=0.1)
    step = 0.0005 * 32
    saved = _time("ddp", 1, profile=prof) - _time("ddp", 4, profile=prof)
    assert saved == pytest.approx(ITERATIONS * step * 0.1 * 0.75, rel=1e-9)
    assert _time("ps_sync", 4) == _time("ps_sync", 1)
    assert _time("ddp", 4, cluster=_cluster(bandwidth=0.0)) == _time("ddp", 1)
    cpu = Cluster(hosts=1, cores_per_host=4, placement="packed")
    assert _time("allreduce", 4, cluster=cpu) == _time("allreduce", 1, cluster=cpu)
    tiny = replace(_profile(), models=(replace(_profile().models[0], steps=(
        replace(_profile().models[0].steps[0], step_s_per_sample=1e-8),)),))
    with pytest.raises(ConfigError, match="longer than the step that holds it"):
        _time("ddp", 2, profile=tiny)


def test_every_gpu_preset_gives_the_steps_costs_with_their_sources():
    for name in preset_names():
        cluster = load_preset(name)
        if cluster.device is None:
            continue
        d = cluster.device
        assert d.memory_bytes_per_s >= 700e9 and d.host_call_s == pytest.approx(7.74e-6,
                                                                               abs=5e-9)
        assert "datasheet" in cluster.source_of("device.memory_bandwidth"), name
        assert "h200-2026-11-27-step.json" in cluster.source_of("device.host_call"), name


def test_predict_says_each_mechanism_its_cost_and_source(tmp_path, capsys):
    """The shipped DLE workload on dgx-a100 in amp, K = 4: the optimizer's step once in 4,
    each row's source the preset's own field, the json's the same rows."""
    rc = predict.main(["--preset", "dgx-a100", "--workload", str(A100_FILE), "--precision", "amp",
                       "--workers", "1,8", "--schemes", "ddp", "--accumulation-steps", "4",
                       "--full", "--no-plot", "--jobs", "1", "--out", str(tmp_path)])
    assert rc == 0
    shown = capsys.readouterr().out
    rows = {r["mechanism"]: r for r in
            json.loads((tmp_path / "predictions.json").read_text())["meta"]["mechanisms"]}
    preset = load_preset("dgx-a100")
    assert set(rows) == {"compute beside NCCL", "the step in amp", "DDP's exposed last bucket",
                         "DDP's own calls", "input pipeline", "optimizer step"}
    assert rows["compute beside NCCL"]["source"] == preset.source_of("nccl.compute_slowdown")
    assert "18.9%" in rows["compute beside NCCL"]["cost"]
    assert preset.source_of("device.host_call") in rows["optimizer step"]["source"]
    assert "805 calls" in rows["optimizer step"]["cost"]
    assert "6.34 ms modelled" in rows["optimizer step"]["cost"]
    assert "once every 4 iterations: each step 4.75 ms shorter" in rows["optimizer step"]["cost"]
    assert "3.99 ms a step" in rows["DDP's own calls"]["cost"]
    assert "under the step" in rows["input pipeline"]["cost"]
    assert "2470 images/s" in rows["the step in amp"]["source"]
    for name in rows:
        assert f"  {name}:" in shown


@pytest.mark.parametrize("argv,words", [
    (["--accumulation-steps", "0"], "argument --accumulation-steps: 0 is below 1"),
    (["--accumulation-steps", "two"], "argument --accumulation-steps"),
    (["--accumulation-steps", "4"], "--accumulation-steps 4 needs accelerator hosts"),
])
def test_bad_accumulation_steps_are_one_line_and_exit_2(argv, words, tmp_path, capsys):
    assert predict.main(["--workers", "2", "--no-plot", "--out", str(tmp_path)] + argv) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("precision", ["tf32", "amp"])
def test_predict_on_the_dle_file_is_the_checks_iteration(precision):
    """The shipped file (``benchmarks.dle.workload_file``, regenerated here) read as predict
    reads it, at 8 GPUs of a DGX A100 with K = 1 (the eight-GPU runs update every
    iteration): the check's iteration, the same step, update, interference, buckets, DDP
    calls and input pipeline; exactly in the file's own precision, within 0.5% in amp, whose
    layers the file scales from tf32's (``at_precision``: the backward's share kept)."""
    from benchmarks.dle import check, workload_file
    from contracts.profile import load_default
    from contracts.workload import at_precision, load_workload, workload_to_dict
    from simulator.describe import growing
    from simulator.engine import steady_iteration_s
    from simulator.engine.machine import machine

    shipped = load_workload(A100_FILE)
    if precision == "tf32":
        assert workload_to_dict(workload_file.file_workload("DGX A100 80GB")) == \
            workload_to_dict(shipped)
    t = next(t for t in check.TABLES if (t.framework, t.system, t.precision)
             == ("PyTorch", "DGX A100 80GB", precision))
    cluster = growing(load_preset("dgx-a100"))
    profile = machine(load_default(), "embedded", cluster.at(1),
                      [(at_precision(shipped, precision), "file")]).profile
    got = steady_iteration_s(check.scheme(t), 8, check.work(t), cluster.at(8), profile)
    assert check.share_of_updates(t, 8) == 1.0
    assert got == pytest.approx(check.iteration_s(t, 8),
                                rel=1e-9 if precision == "tf32" else 5e-3)


def test_a_measured_update_counts_on_its_own_device_only():
    """A workload's measured update is its device's: kept where the cluster runs that
    device, left to the model where the step is scaled from another."""
    from contracts.workload import load_workload
    from simulator.engine.machine import scaled_cost
    w = replace(load_workload(A100_FILE), update_s=0.01)
    assert scaled_cost(w, load_preset("dgx-a100"))[0].update_fraction == pytest.approx(
        0.01 / w.step_s)
    assert scaled_cost(w, load_preset("dgx-h100"))[0].update_fraction == 0.0
