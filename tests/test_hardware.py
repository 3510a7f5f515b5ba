"""Accelerator hosts, presets, NCCL backends and Horovod's fusion, and where numbers came from."""
from __future__ import annotations

from dataclasses import replace

import pytest
import tomllib
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import predict, question
from contracts.checks import ConfigError
from contracts.cluster import (
    PRESETS_DIR,
    Cluster,
    Device,
    Hardware,
    Link,
    load_cluster,
    load_preset,
    preset_names,
)
from contracts.workload import Workload, load_workload
from simulator.engine import simulate
from simulator.engine.machine import machine, scaled_cost
from simulator.model.config import SchemeConfig
from simulator.model.schemes.fusion import ahead, cycles, fuse, next_tick
from simulator.testing import make_profile

P100 = Device("Tesla P100 PCIe", 9.3e12)


def gpu_cluster(hosts=2, per_host=4, nics=1, gbit=25.0, latency_us=6.6, call_us=8.4,
                topology="switch", leaf=0) -> Cluster:
    hw = Hardware(device=P100, intra=Link(11.7e9, 5.7e-6), nics=nics, topology=topology,
                  hosts_per_leaf=leaf, oversubscription=2.0, call_latency_s=call_us * 1e-6)
    return Cluster(hosts=hosts, cores_per_host=per_host,
                   link=Link(gbit * 1e9 / 8, latency_us * 1e-6) if hosts > 1 else None,
                   placement="packed", hardware=hw)


def gpu_profile(params=(2_000_000, 500_000, 40_000)):
    return make_profile(layer_param_counts=params, step_intercept_s=0.0,
                        step_s_per_sample=0.002)


# ---------------------------------------------------------------- presets

def _numbers(table, path=""):
    """Every number (and value with a unit) of a preset, with its path."""
    for key, value in table.items():
        where = f"{path}.{key}" if path else key
        if isinstance(value, dict) and "value" not in value:
            yield from _numbers(value, where)
        else:
            yield where, value


@pytest.mark.parametrize("name", preset_names())
def test_presets_load_and_every_number_has_a_source(name):
    raw = tomllib.loads((PRESETS_DIR / f"{name}.toml").read_text())
    for where, value in _numbers(raw):
        plain = value["value"] if isinstance(value, dict) else value
        if where == "name" or isinstance(plain, str) and not any(c.isdigit() for c in plain):
            continue                              # the preset's name, a choice: no number
        assert isinstance(value, dict) and value.get("source", "").strip(), \
            f"{name}: {where} has no source"
    cluster = load_preset(name)
    assert cluster.sources and all(source.startswith(f"preset {name}")
                                   for _, source in cluster.sources)


def test_the_devices_table_has_a_source_for_every_rate():
    raw = tomllib.loads((PRESETS_DIR / "devices.toml").read_text())
    assert raw["device"] and all(d["flops"]["source"] for d in raw["device"])
    rates = [d[k] for d in raw["device"] for k in ("tf32_flops", "amp_flops") if k in d]
    assert rates and all(r["source"].strip() for r in rates)


GPU_HOSTS = '[cluster]\nhosts = 2\ndevices_per_host = 4\n'
CPU_HOSTS = '[cluster]\nhosts = 2\ncores_per_host = 4\n'
LINK = '[link]\nbandwidth = "25gbit"\nlatency = "5us"\n'
INTRA = '[intra]\nbandwidth = "10GB/s"\nlatency = "5us"\n'


@pytest.mark.parametrize("text,field", [
    (GPU_HOSTS + '[device]\nname = "x"\nflops = 9\n' + INTRA + LINK, "device.flops"),
    (GPU_HOSTS + LINK, "[device] is missing"),
    (CPU_HOSTS + '[link]\nbandwidth = 25\nlatency = "5us"\n', "link.bandwidth"),
    (CPU_HOSTS + '[link]\nbandwidth = "25gbit"\nlatency = "-5us"\n', "link.latency"),
    (CPU_HOSTS + LINK + 'nics = 0\n', "link.nics"),
    (CPU_HOSTS + LINK + '[topology]\nkind = "two_tier"\n', "topology.hosts_per_leaf is missing"),
])
def test_bad_cluster_files_name_file_and_field(tmp_path, text, field):
    f = tmp_path / "c.toml"
    f.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_cluster(f)
    assert str(f) in str(e.value) and field in str(e.value)


# ---------------------------------------------------------------- devices and backends

def test_a_workload_is_scaled_to_another_device_by_compute_rate(tmp_path):
    f = tmp_path / "w.toml"
    f.write_text('[model]\nname = "m"\nparams = 1000\n[measured]\ndevice = "Tesla P100 PCIe"\n'
                 'batch_size = 64\nstep = "300ms"\n')
    w = load_workload(f)
    same, how = scaled_cost(w, load_preset("pascal-pcie-25gbe"))
    assert same.steps[0].step_s(64) == pytest.approx(0.3) and "as measured" in how
    a100, how = scaled_cost(w, load_preset("dgx-a100"))
    assert a100.steps[0].step_s(64) == pytest.approx(0.3 * 9.3 / 19.5)
    assert "devices table" in how
    with pytest.raises(ConfigError, match="no accelerator"):
        scaled_cost(w, load_preset("cpu-25gbe"))


def test_backends_follow_the_hosts():
    prof, work = gpu_profile(), Workload(model="toy", iterations=3)
    with pytest.raises(ConfigError, match="needs accelerator hosts"):
        simulate(SchemeConfig("ddp", backend="nccl"), 2, work, Cluster(1, 2), prof)
    with pytest.raises(ConfigError, match="gloo on accelerator hosts"):
        simulate(SchemeConfig("ddp", backend="gloo"), 2, work, gpu_cluster(), prof)
    with pytest.raises(ConfigError, match="runs on mpi only"):
        simulate(SchemeConfig("mpi_allreduce", backend="nccl"), 2, work, gpu_cluster(), prof)
    with pytest.raises(ConfigError, match="has no allreduce algorithm"):
        simulate(SchemeConfig("ddp", algorithm="recursive_doubling"), 2, work, gpu_cluster(),
                 prof)
    r = simulate(SchemeConfig("ddp"), 8, work, gpu_cluster(), prof)     # nccl by default
    assert r.time_s > 0


def test_ring_allreduce_on_gpus_is_its_closed_form():
    """One allreduce per step, no overlap (allreduce scheme, one tensor): the step is the
    compute plus NCCL's call latency plus the ring across the slowest hop (the NIC)."""
    prof = gpu_profile(params=(1_000_000,))
    cluster = gpu_cluster(hosts=2, per_host=2)
    work = Workload(model="toy", batch_per_worker=10, iterations=4)
    r = simulate(SchemeConfig("allreduce", algorithm="ring"), 4, work, cluster, prof)
    n, p = 4e6, 4
    hop = 6.6e-6 + n / p / (25e9 / 8)
    assert r.time_s / 4 == pytest.approx(0.02 + 8.4e-6 + 2 * (p - 1) * hop, rel=1e-9)


def test_fp16_halves_what_the_gradients_move():
    prof = gpu_profile(params=(1_000_000,))
    cluster = gpu_cluster(hosts=2, per_host=1, call_us=0.0, latency_us=0.0)
    work = Workload(model="toy", batch_per_worker=10, iterations=2)
    full, half = (simulate(SchemeConfig("allreduce", algorithm="ring", compression=c), 2, work,
                           cluster, prof) for c in ("none", "fp16"))
    assert (full.time_s - 0.04) == pytest.approx(2 * (half.time_s - 0.04), rel=1e-9)


# ---------------------------------------------------------------- horovod

def test_fusion_is_horovods():
    """Fused in request order while under the threshold; a larger tensor goes alone."""
    assert fuse([10, 20, 30, 100, 5], 64) == [60, 100, 5]
    assert fuse([70], 64) == [70]
    assert cycles([0.001, 0.002, 0.007, 0.0101], [1, 2, 3, 4], 0.005, 64) == [
        (0.005, [3]), (0.01, [3]), (0.015, [4])]


def test_requests_ahead_fuse_by_request_and_wait_for_the_last_data():
    """All requests in before the data: the tensors in order fused up to the threshold,
    each buffer's earliest start its last tensor's readiness on all ranks."""
    assert ahead([1.0, 2.0, 3.0, 4.0], [10, 20, 30, 40], 35) == [
        (2.0, [30]), (3.0, [30]), (4.0, [40])]
    assert ahead([1.0, 2.0], [5, 5], 64) == [(2.0, [10])]


@pytest.mark.parametrize("p,hosts,ahead_", [(1, 1, False), (4, 1, False), (8, 2, False),
                                            (12, 3, False), (8, 2, True), (12, 3, True)])
def test_horovod_fast_path_is_the_simpy_model(p, hosts, ahead_):
    prof = gpu_profile()
    cluster = gpu_cluster(hosts=hosts)
    work = Workload(model="toy", batch_per_worker=16, iterations=5)
    runs = [simulate(SchemeConfig("horovod", algorithm="ring", engine=e, cycle_s=0.004,
                                  fusion_bytes=3_000_000, requests_ahead=ahead_),
                     p, work, cluster, prof)
            for e in ("fast", "des")]
    assert runs[0].engine == "fast" and runs[1].engine == "des"
    assert runs[0].time_s == pytest.approx(runs[1].time_s, rel=1e-9)
    assert runs[0].wait_s == pytest.approx(runs[1].wait_s, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("engine", ["fast", "des"])
def test_horovods_cycle_is_waiting(engine):
    """At P = 1 a step is its compute and then the wait for the background loop's next
    tick: ``next_tick(t_backward_end) - t_backward_end``, shown as wait (no column lost)."""
    prof = gpu_profile()
    work = Workload(model="toy", batch_per_worker=16, iterations=3)
    r = simulate(SchemeConfig("horovod", algorithm="ring", engine=engine, cycle_s=0.0035), 1,
                 work, gpu_cluster(hosts=1), prof)
    step = r.compute_s / 3
    t, wait = 0.0, 0.0
    for _ in range(3):
        t += step
        wait += next_tick(t, 0.0035) - t
        t = next_tick(t, 0.0035)
    assert wait > 0 and r.wait_s == pytest.approx(wait, rel=1e-9)
    assert r.time_s == pytest.approx(r.compute_s + r.wait_s, rel=1e-9)


def test_horovod_overlaps_the_backward():
    """With a cycle of 0 and the data ready layer by layer, all but the last layer's
    allreduce hide behind the backward: faster than allreduce after the step."""
    prof = gpu_profile(params=(3_000_000, 3_000_000, 3_000_000))
    cluster = gpu_cluster(hosts=4, per_host=1)
    work = Workload(model="toy", batch_per_worker=32, iterations=4)
    hvd = simulate(SchemeConfig("horovod", algorithm="ring", cycle_s=0.0,
                                fusion_bytes=10_000_000), 4, work, cluster, prof)
    after = simulate(SchemeConfig("mpi_allreduce"), 4, work, cluster, prof)
    assert hvd.time_s < after.time_s


@settings(max_examples=40, deadline=None)
@given(scheme=st.sampled_from(["ddp", "allreduce", "horovod"]),
       algorithm=st.sampled_from(["ring", "hierarchical", "tree", "auto"]),
       hosts=st.integers(1, 3), per_host=st.integers(1, 3), nics=st.integers(1, 2),
       gbit=st.sampled_from([10.0, 100.0]), params=st.sampled_from([20_000, 2_000_000]))
def test_where_auto_takes_analytic_on_gpus_it_is_the_message_model(scheme, algorithm, hosts,
                                                                   per_host, nics, gbit, params):
    cluster = gpu_cluster(hosts=hosts, per_host=per_host, nics=nics, gbit=gbit)
    prof = gpu_profile(params=(params // 2, params - params // 2))
    work = Workload(model="toy", iterations=4)
    auto, message = (simulate(SchemeConfig(scheme, fidelity=f, engine="des", algorithm=algorithm),
                              hosts * per_host, work, cluster, prof)
                     for f in ("auto", "message"))
    if auto.fidelity == "analytic":
        assert abs(auto.time_s / message.time_s - 1) <= 0.02, (auto.time_s, message.time_s)
    else:
        assert auto.time_s == message.time_s


def test_a_two_tier_tree_slows_what_crosses_leaves():
    prof = gpu_profile(params=(4_000_000,))
    work = Workload(model="toy", iterations=2)
    flat = simulate(SchemeConfig("allreduce", algorithm="ring"), 8, work,
                    gpu_cluster(hosts=8, per_host=1), prof)
    tree = simulate(SchemeConfig("allreduce", algorithm="ring"), 8, work,
                    gpu_cluster(hosts=8, per_host=1, topology="two_tier", leaf=1), prof)
    assert tree.time_s > flat.time_s      # leaves of one host at 2:1: every hop at half rate


# ---------------------------------------------------------------- provenance and the command

def test_provenance_names_measured_preset_and_user_numbers(tmp_path):
    f = tmp_path / "w.toml"
    f.write_text('[model]\nname = "m"\nparams = 1000\n[measured]\ndevice = "Tesla P100 PCIe"\n'
                 'batch_size = 64\nstep = "300ms"\n[provenance]\nsource = "numbers"\n')
    m = machine(make_profile(), "test.json", load_preset("pascal-pcie-25gbe"),
                [(load_workload(f), str(f))])
    origins = {r["origin"].split(":")[0] for r in m.provenance}
    assert f"workload file {f} (numbers)" in origins
    assert "preset pascal-pcie-25gbe" in origins
    assert any(o.startswith("profile test.json") for o in origins)
    assert all(r["origin"] for r in m.provenance)


def test_predict_with_a_preset_and_a_workload(tmp_path, capsys):
    f = tmp_path / "w.toml"
    f.write_text('[model]\nname = "m"\ntensor_params = [3000000, 1000000]\n[measured]\n'
                 'device = "Tesla P100 PCIe"\nbatch_size = 64\nstep = "300ms"\n')
    code = predict.main(["--workers", "1,8,64", "--schemes", "ddp,horovod",
                         "--workload", str(f), "--preset", "pascal-pcie-25gbe",
                         "--allreduce-algorithm", "ring", "--no-plot", "--out", str(tmp_path / "o"),
                         "--jobs", "1"])
    out = capsys.readouterr().out
    assert code == 0
    assert "Tesla P100 PCIe" in out and "horovod" in out
    assert "numbers: measured: m (workload file)" in out and "preset pascal-pcie-25gbe" in out
    import json
    meta = json.loads((tmp_path / "o" / "predictions.json").read_text())["meta"]
    assert meta["provenance"] and meta["workload"]["model"] == "m"


@pytest.mark.parametrize("flags,expect", [
    (["--preset", "nope"], "unknown preset"),
    (["--workload", "missing.toml"], "does not exist"),
    (["--schemes", "ddp", "--backend", "nccl"], "needs accelerator hosts"),
    (["--nccl-protocol", "ll"], "--nccl-protocol needs accelerator hosts"),
    (["--nccl-protocol", "nccl-2.3", "--cluster", "CPU"], "--nccl-protocol needs accelerator"),
    (["--nccl-protocol", "nccl-2.3", "--preset", "dgx-a100"], "needs ll_thread_threshold"),
])
def test_predict_bad_inputs_are_one_line(capsys, tmp_path, flags, expect):
    if "CPU" in flags:
        cpu = tmp_path / "cpu.toml"
        cpu.write_text('[cluster]\nhosts = 2\ncores_per_host = 4\n[link]\nbandwidth = "10gbit"\n'
                       'latency = "20us"\n')
        flags = [str(cpu) if f == "CPU" else f for f in flags]
    code = predict.main(["--workers", "2", "--no-plot", "--out", str(tmp_path), *flags])
    err = capsys.readouterr().err.strip()
    assert code == 2 and expect in err and len(err.splitlines()) == 1, err


def test_the_nccl_protocol_flag_sets_the_rule_and_says_so(tmp_path, capsys):
    code = predict.main(["--workers", "8", "--schemes", "horovod", "--allreduce-algorithm", "ring",
                         "--workload", "benchmarks/horovod/resnet101-p100.toml",
                         "--preset", "pascal-pcie-25gbe", "--nccl-protocol", "nccl-2.2",
                         "--iterations", "5", "--no-plot", "--out", str(tmp_path), "--jobs", "1"])
    out = capsys.readouterr().out
    assert code == 0 and "user: nccl" in out
    import json
    rows = json.loads((tmp_path / "predictions.json").read_text())["meta"]["provenance"]
    protocol = [r for r in rows if r["quantity"] == "cluster nccl.protocol"]
    assert protocol == [{"quantity": "cluster nccl.protocol", "value": "nccl-2.2",
                         "origin": "user (--nccl-protocol)"}]


def test_the_default_prediction_is_unchanged_by_new_flags():
    """Without --workload, --preset or --backend the default schemes are the exercise
    sheets' (horovod appears on accelerator hosts only)."""
    def schemes(*argv):
        q = question.resolve(predict.build_parser().parse_args([*argv, "--iterations", "4"]))
        return [cfg.name for cfg in q.schemes]
    assert "horovod" not in schemes()
    assert "horovod" in schemes("--preset", "dgx-a100")
    assert replace(SchemeConfig("ddp"), backend="") == SchemeConfig("ddp")


# ---------------------------------------------------------------- NCCL's rings over every NIC

@pytest.mark.parametrize("channels,nics,fidelity", [(4, 4, "analytic"), (8, 4, "analytic"),
                                                     (2, 4, "message"), (1, 4, "analytic")])
def test_nccls_rings_cross_hosts_over_min_channels_nics_nics(channels, nics, fidelity):
    """One ring per channel, each over a NIC of its own (NCCL's search.cc): a ring
    allreduce over 4 hosts of one GPU is ``call + 2 (P - 1) (alpha + n / P / (k bw))``
    with k = min(channels, nics), in both fidelities."""
    base = gpu_cluster(hosts=4, per_host=1, nics=nics, gbit=25.0, latency_us=6.6, call_us=8.4)
    cluster = replace(base, hardware=replace(base.hardware, channels=channels,
                                             protocol="simple"))
    prof = gpu_profile(params=(4_000_000,))
    work = Workload(model="toy", batch_per_worker=10, iterations=2)
    r = simulate(SchemeConfig("allreduce", algorithm="ring", fidelity=fidelity), 4, work,
                 cluster, prof)
    n, p, k = 16e6, 4, min(channels, nics)
    hop = 6.6e-6 + n / p / (k * 25e9 / 8)
    assert r.time_s / 2 == pytest.approx(0.02 + 8.4e-6 + 2 * (p - 1) * hop, rel=1e-6)
