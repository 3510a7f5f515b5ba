"""DDP's buckets as torch builds them: one bucket in the first iteration, then the
gradients in ready order, 1 MiB for the first bucket and 25 MiB after, tensor by tensor.

The model's buckets (``simulator.model.workload.ddp_buckets``) are checked against the
ones torch 2.13 itself rebuilds (``DistributedDataParallel._get_ddp_logging_data``), on
a world of one process.
"""
from __future__ import annotations

import pytest

from contracts.cluster import calibrated_cluster
from contracts.profile import ModelCost, StepFit
from contracts.workload import Workload
from simulator.engine import simulate
from simulator.model.config import SchemeConfig
from simulator.model.workload import ddp_buckets, ddp_first_buckets, ready_tensors
from simulator.testing import make_profile

SIZES = ((100, 300), (300, 1000), (1000, 400), (400, 10))     # nn.Linear(in, out) layers


def linear_cost() -> ModelCost:
    tensors = tuple(c for i, o in SIZES for c in (i * o, o))
    layers = tuple(i * o + o for i, o in SIZES)
    return ModelCost("mlp", sum(tensors), layers, (StepFit(1, 0.0, 1e-3),),
                     tensor_param_counts=tensors)


def test_tensors_become_ready_last_layer_first_bias_before_weight():
    got = [b for b, _ in ready_tensors(linear_cost(), 4.0)]
    assert got == [40, 16000, 1600, 1_600_000, 4000, 1_200_000, 1200, 120_000]


def test_the_first_bucket_closes_past_1_mib_and_the_rest_past_25():
    assert [b for b, _ in ddp_buckets(linear_cost())] == [1_617_640, 1_325_200]
    # a bucket_cap_mb of the user's is every bucket's limit, the first's too
    assert [b for b, _ in ddp_buckets(linear_cost(), 2 * 2**20)] == [2_821_640, 121_200]
    assert ddp_first_buckets(linear_cost()) == ((2_942_840, 1.0),)


def test_the_buckets_are_the_ones_torch_rebuilds(tmp_path):
    torch = pytest.importorskip("torch")
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        net = torch.nn.Sequential(*(torch.nn.Linear(i, o) for i, o in SIZES))
        ddp = torch.nn.parallel.DistributedDataParallel(net)
        sizes = []
        for _ in range(3):
            ddp(torch.randn(4, SIZES[0][0])).sum().backward()
            data = ddp._get_ddp_logging_data()
            sizes.append((data["bucket_sizes"], data.get("rebuilt_bucket_sizes")))
    finally:
        dist.destroy_process_group()
    first, rebuilt = sizes[0][0], sizes[-1][1]
    assert [int(x) for x in first.split(",")] == [b for b, _ in ddp_first_buckets(linear_cost())]
    assert [int(x) for x in rebuilt.split(",")] == [b for b, _ in ddp_buckets(linear_cost())]


def test_ddp_reduces_one_bucket_in_its_first_iteration():
    """With every message a fixed 10 ms (latency only), the first iteration pays one
    call after its backward, the others one per bucket; building DDP broadcasts the
    weights first (one message at P = 2)."""
    layers = tuple(i * o + o for i, o in SIZES)
    prof = make_profile(alpha_s=1e-2, beta_s_per_byte=0.0, layer_param_counts=layers,
                        step_intercept_s=0.0, step_s_per_sample=0.0)
    one = simulate(SchemeConfig("ddp", engine="des"), 2, Workload("toy", iterations=1),
                   calibrated_cluster(prof.cores), prof)
    two = simulate(SchemeConfig("ddp", engine="des"), 2, Workload("toy", iterations=2),
                   calibrated_cluster(prof.cores), prof)
    steps = 2 * (2 - 1)                   # gloo's ring at P = 2: two steps of a latency each
    assert one.time_s == pytest.approx(1e-2 + steps * 1e-2)
    assert two.time_s - one.time_s == pytest.approx(len(ddp_buckets(prof.models[0])) * steps
                                                    * 1e-2)
