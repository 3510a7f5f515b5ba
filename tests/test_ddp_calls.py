"""DDP's own calls a step (``simulator.model.hardware.ddp_calls``): each part's calls against
what torch runs, the presets' cost a buffer and a gradient against the GPU measurement they
come from, and the engines' step longer by exactly ``n_buffers * ddp_buffer_s + n_tensors *
ddp_gradient_s``."""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from contracts.cluster import Cluster, Device, Hardware, Link, load_preset
from contracts.workload import Workload
from simulator.engine import simulate
from simulator.model.config import SchemeConfig
from simulator.model.hardware.ddp_calls import (
    ATEN_CALLS_PER_BUFFER,
    ATEN_CALLS_PER_TENSOR,
    ddp_step_s,
)
from simulator.testing import make_profile

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parent.parent
PROBE = ROOT / "benchmarks" / "gpu" / "results" / "h200-2026-11-27-ddp-split.json"
GPU_PRESETS = ("dgx-a100", "dgx1-v100", "dgx2", "dgx1-p100", "dgx-h100", "azure-nd-a100-v4",
               "azure-ndm-a100-v4", "azure-nd-h100-v5", "pascal-pcie-25gbe")
RESNET50_TENSORS, RESNET50_BUFFERS = 161, 159


def test_ddp_calls_a_buffer_and_a_gradient_as_torch_runs_them(tmp_path):
    """torch's profiler, one step of a conv-BatchNorm-linear net on a world of one. Without
    the buffers' broadcast DDP adds two calls a parameter tensor, each a kernel (the
    reducer's ``mul_out`` into the bucket, ``copy_bucket_to_grad``'s ``copy_`` back); the
    broadcast adds six ATen calls a buffer (``view`` twice, ``narrow`` -> ``slice`` ->
    ``as_strided``, one ``copy_`` back: one kernel) and a broadcast a bucket of one dtype
    (BatchNorm's float statistics and its int64 count: two, as in ResNet-50), with a ``cat``
    where the bucket holds more than one buffer."""
    torch = pytest.importorskip("torch")
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    def counts(net) -> Counter:
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        x = torch.randn(2, 3, 8, 8)

        def step():
            net(x).sum().backward()
            opt.step()
            opt.zero_grad()
        step()
        step()                               # the buckets are rebuilt after the first step
        with profile(activities=[ProfilerActivity.CPU]) as p:
            step()
        return Counter(e.name for e in p.events())

    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4),
                                   torch.nn.ReLU(), torch.nn.Flatten(),
                                   torch.nn.Linear(4 * 6 * 6, 3))
    ddp = torch.nn.parallel.DistributedDataParallel
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        plain = counts(make())
        no_buffers = counts(ddp(make(), forward_sync_buffers=False))
        wrapped = counts(ddp(make()))
    finally:
        dist.destroy_process_group()
    net = make()
    tensors, buffers = len(list(net.parameters())), len(list(net.buffers()))
    assert (tensors, buffers) == (6, 3)
    gradients = no_buffers - plain
    assert gradients["aten::copy_"] == ATEN_CALLS_PER_TENSOR * tensors
    assert no_buffers["torch::distributed::reducer::mul_out"] == tensors
    assert no_buffers["torch.distributed.ddp.reducer::copy_bucket_to_grad"] == tensors
    broadcast = {k: n for k, n in (wrapped - no_buffers).items() if n}
    per_buffer = ("aten::view", "aten::view", "aten::narrow", "aten::slice", "aten::as_strided",
                  "aten::copy_")
    assert len(per_buffer) == ATEN_CALLS_PER_BUFFER
    calls = Counter({name: n * buffers for name, n in Counter(per_buffer).items()})
    buckets = 2          # float: running_mean and running_var, concatenated; int64: one count
    calls.update({"aten::cat": 1, "aten::flatten_dense_tensors": buckets,
                  "aten::unflatten_dense_tensors": buckets, "c10d::broadcast_": buckets,
                  "gloo:broadcast": buckets})
    assert broadcast == calls


def test_every_gpu_preset_takes_the_h200s_cost_a_buffer_and_a_gradient():
    """The probe's DDP step minus DDP's without the buffers' broadcast, over ResNet-50's 159
    buffers, and that minus the bare step, over its 161 parameter tensors, in each
    precision; the presets take the means of the three (18.4 and 6.64 us), each from the
    JSON."""
    ddp = json.loads(PROBE.read_text())["ddp"]
    per_buffer = {p: v["buffers_s"] / RESNET50_BUFFERS for p, v in ddp.items()}
    per_tensor = {p: (v["ddp_no_buffers"]["step_s"] - v["plain"]["step_s"]) / RESNET50_TENSORS
                  for p, v in ddp.items()}
    assert per_buffer == pytest.approx({"fp32": 15.52e-6, "tf32": 19.93e-6, "amp": 19.80e-6},
                                       abs=0.005e-6)
    assert per_tensor == pytest.approx({"fp32": 8.45e-6, "tf32": 6.79e-6, "amp": 4.68e-6},
                                       abs=0.005e-6)
    for name in GPU_PRESETS:
        cluster = load_preset(name)
        assert cluster.device.ddp_buffer_s == pytest.approx(18.4e-6, abs=0.05e-6), name
        assert cluster.device.ddp_gradient_s == pytest.approx(6.64e-6, abs=0.005e-6), name
        for key in ("device.ddp_buffer", "device.ddp_gradient"):
            assert "h200-2026-11-27-ddp-split.json" in cluster.source_of(key), (name, key)
    mean_buffer = sum(per_buffer.values()) / 3
    mean_tensor = sum(per_tensor.values()) / 3
    assert (mean_buffer, mean_tensor) == pytest.approx((18.4e-6, 6.64e-6), abs=0.05e-6)
    resnet50 = ddp_step_s(RESNET50_TENSORS, RESNET50_BUFFERS, 18.4e-6, 6.64e-6)
    assert resnet50 == pytest.approx(4.0e-3, abs=0.01e-3)


PARAMS = (3_000_000, 8_000_000, 500_000, 2_000_000)


def _cluster(buffer_s: float, gradient_s: float) -> Cluster:
    hw = Hardware(device=Device("A100 SXM4", 19.5e12, ddp_buffer_s=buffer_s,
                                ddp_gradient_s=gradient_s),
                  intra=Link(100e9, 5e-6), call_latency_s=10e-6)
    return Cluster(hosts=1, cores_per_host=4, placement="packed", hardware=hw)


@pytest.mark.parametrize("engine", ["des", "fast"])
@pytest.mark.parametrize("scheme,grows", [("ddp", True), ("horovod", False), ("allreduce", False)])
def test_a_ddp_step_on_a_device_is_longer_by_its_calls(engine, scheme, grows):
    """Each DDP step longer by ``6 buffers x 20 us`` for the broadcast and ``4 tensors x 7
    us`` for the gradients, each part alone and both (148 us), with the buckets hidden
    behind a backward that grows with it; other schemes unchanged."""
    prof = make_profile(layer_param_counts=PARAMS, step_intercept_s=0.0,
                        step_s_per_sample=0.0005)
    prof = replace(prof, models=(replace(prof.models[0], buffer_count=6),))
    work = Workload(model="toy", batch_per_worker=32, iterations=6)
    cfg = SchemeConfig(scheme, engine=engine)
    bare = simulate(cfg, 4, work, _cluster(0.0, 0.0), prof).time_s
    parts = ((20e-6, 0.0), (0.0, 7e-6), (20e-6, 7e-6)) if grows else ((20e-6, 7e-6),)
    for buffer_s, gradient_s in parts:
        with_calls = simulate(cfg, 4, work, _cluster(buffer_s, gradient_s), prof).time_s
        extra = ddp_step_s(len(PARAMS), 6, buffer_s, gradient_s) if grows else 0.0
        assert extra == pytest.approx((6 * buffer_s + 4 * gradient_s) if grows else 0.0)
        assert with_calls - bare == pytest.approx(6 * extra, rel=1e-6, abs=1e-12)
