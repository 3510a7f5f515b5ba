"""DDP's own calls a step (``simulator.model.hardware.ddp_calls``): the count against what
torch runs, the presets' cost a call against the GPU measurement it comes from, and the
engines' step longer by exactly ``(2 n_tensors + n_buffers) * ddp_call_s``."""
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
from simulator.model.hardware.ddp_calls import ddp_calls, ddp_step_s
from simulator.testing import make_profile

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parent.parent
PROBE = ROOT / "benchmarks" / "gpu" / "results" / "h200-2026-11-27-ddp.json"
GPU_PRESETS = ("dgx-a100", "dgx1-v100", "dgx2", "dgx1-p100", "dgx-h100", "azure-nd-a100-v4",
               "azure-nd-h100-v5", "pascal-pcie-25gbe")
RESNET50_TENSORS, RESNET50_BUFFERS = 161, 159


def test_ddp_copies_each_gradient_into_its_bucket_and_back_and_each_buffer(tmp_path):
    """torch's profiler, one step of a conv-BatchNorm-linear net on a world of one: DDP
    runs ``2 n_tensors + n_buffers`` more ``aten::copy_`` than the bare net (the reducer's
    ``mul_out`` into the bucket, ``copy_bucket_to_grad`` back, the broadcast's copy of each
    buffer), one ``mul_out`` and one copy back a tensor (ResNet-50: 481, 161 and 161)."""
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
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        plain = counts(make())
        wrapped = counts(torch.nn.parallel.DistributedDataParallel(make()))
    finally:
        dist.destroy_process_group()
    net = make()
    tensors, buffers = len(list(net.parameters())), len(list(net.buffers()))
    assert (tensors, buffers) == (6, 3)
    assert wrapped["aten::copy_"] - plain["aten::copy_"] == ddp_calls(tensors, buffers) == 15
    assert wrapped["torch::distributed::reducer::mul_out"] == tensors
    assert wrapped["torch.distributed.ddp.reducer::copy_bucket_to_grad"] == tensors


def test_every_gpu_preset_takes_the_h200s_cost_a_call():
    """The probe's DDP step minus the plain step, over ResNet-50's 481 calls, in each
    precision; the presets take the mean of the three (8.63 us), each from the JSON."""
    ddp = json.loads(PROBE.read_text())["ddp"]
    calls = ddp_calls(RESNET50_TENSORS, RESNET50_BUFFERS)
    per_call = {p: (v["ddp"]["step_s"] - v["plain"]["step_s"]) / calls for p, v in ddp.items()}
    assert calls == 481
    assert per_call == pytest.approx({"fp32": 8.93e-6, "tf32": 8.84e-6, "amp": 8.12e-6},
                                     abs=0.005e-6)
    mean = sum(per_call.values()) / len(per_call)
    for name in GPU_PRESETS:
        cluster = load_preset(name)
        assert cluster.device.ddp_call_s == pytest.approx(mean, abs=0.005e-6), name
        assert "h200-2026-11-27-ddp.json" in cluster.source_of("device.ddp_call"), name


PARAMS = (3_000_000, 8_000_000, 500_000, 2_000_000)


def _cluster(call_s: float) -> Cluster:
    hw = Hardware(device=Device("A100 SXM4", 19.5e12, ddp_call_s=call_s),
                  intra=Link(100e9, 5e-6), call_latency_s=10e-6)
    return Cluster(hosts=1, cores_per_host=4, placement="packed", hardware=hw)


@pytest.mark.parametrize("engine", ["des", "fast"])
@pytest.mark.parametrize("scheme,grows", [("ddp", True), ("horovod", False), ("allreduce", False)])
def test_a_ddp_step_on_a_device_is_longer_by_its_calls(engine, scheme, grows):
    """Each DDP step longer by ``(2 x 4 tensors + 6 buffers) x 10 us`` = 140 us, with the
    buckets hidden behind a backward that grows with it; other schemes unchanged."""
    prof = make_profile(layer_param_counts=PARAMS, step_intercept_s=0.0,
                        step_s_per_sample=0.0005)
    prof = replace(prof, models=(replace(prof.models[0], buffer_count=6),))
    work = Workload(model="toy", batch_per_worker=32, iterations=6)
    cfg = SchemeConfig(scheme, engine=engine)
    bare = simulate(cfg, 4, work, _cluster(0.0), prof).time_s
    with_calls = simulate(cfg, 4, work, _cluster(10e-6), prof).time_s
    extra = ddp_step_s(len(PARAMS), 6, 10e-6) if grows else 0.0
    assert extra == pytest.approx(140e-6 if grows else 0.0)
    assert with_calls - bare == pytest.approx(6 * extra, rel=1e-6, abs=1e-12)
