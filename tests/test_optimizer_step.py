"""The per-tensor optimizer step and its share of the iterations
(simulator.model.hardware.optimizer_step) against their closed forms and torch's own SGD."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.model.hardware.optimizer_step import (chain_s, mean_rate_step_s, queued_s,
                                                     sgd_ops_bytes, sgd_step_s,
                                                     step_without_update_s, update_share,
                                                     zero_ops_bytes)


def recurrence_s(ops_bytes, call_s, bandwidth):
    """Call i issued at (i + 1) call_s; a kernel starts once issued and its predecessor ends."""
    end = 0.0
    for i, b in enumerate(ops_bytes):
        end = max((i + 1) * call_s, end) + b / bandwidth
    return end


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 10**8), max_size=30), st.floats(0, 1e-4),
       st.floats(1e9, 3e12))
def test_the_chain_is_the_recurrence_unrolled(ops, call_s, bandwidth):
    assert chain_s(ops, call_s, bandwidth) == pytest.approx(
        recurrence_s(ops, call_s, bandwidth), rel=1e-9, abs=1e-15)


def test_the_chain_is_the_host_or_the_gpu_where_one_dominates():
    """Tiny kernels: n calls of the host; no host time: the GPU's bytes alone, queued."""
    assert chain_s([8] * 700, 7.74e-6, 2e12) == pytest.approx(700 * 7.74e-6, rel=1e-6)
    ops = [10**7, 3 * 10**7, 5]
    assert chain_s(ops, 0.0, 1e12) == pytest.approx(queued_s(ops, 1e12))
    assert queued_s(ops, 1e12) == sum(ops) / 1e12


def test_sgd_and_zero_grad_calls_and_bytes():
    """Momentum SGD: 4 calls a weight-decayed tensor (3 + 2 + 3 + 3 words an element), 3
    without decay (2 + 3 + 3); zero_grad one call a tensor writing it once."""
    assert sgd_ops_bytes([10], [100]) == [800, 1200, 1200, 120, 80, 120, 120]
    assert zero_ops_bytes([10, 100]) == [40, 400]


def test_torchs_own_per_tensor_sgd_makes_those_calls():
    """torch.optim.SGD without foreach (the per-tensor loop of torch/optim, the same ops as
    1.9's ``_functional.sgd``), momentum on, after its first step: add, mul_, add_, add_ with
    weight decay; mul_, add_, add_ without (each ATen call seen by a dispatch mode)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Calls(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    def calls(weight_decay):
        p = torch.nn.Parameter(torch.ones(4))
        opt = torch.optim.SGD([p], lr=0.1, momentum=0.875, weight_decay=weight_decay,
                              foreach=False)
        p.grad = torch.ones(4)
        opt.step()                                    # the momentum buffer made
        with Calls() as seen:
            opt.step()
        return sorted(n for n in seen.names if n in ("add", "add_", "mul", "mul_"))
    assert calls(5e-5) == sorted(["add", "mul_", "add_", "add_"])
    assert calls(0.0) == sorted(["mul_", "add_", "add_"])


def test_the_update_share_and_the_mean_of_rates():
    assert update_share(100, 8) == 0.12 and update_share(100, 1) == 1.0
    assert update_share(100, 4) == 0.25
    with pytest.raises(ValueError):
        update_share(100, 0)
    assert mean_rate_step_s(0.1, 0.005, 0.0) == 0.1
    assert mean_rate_step_s(0.1, 0.005, 1.0) == pytest.approx(0.105)
    assert 0.1 < mean_rate_step_s(0.1, 0.005, 0.12) < 0.1 + 0.12 * 0.005   # rates average


@settings(max_examples=30, deadline=None)
@given(st.floats(1e-3, 1.0), st.floats(0, 0.05), st.floats(0, 1))
def test_the_step_without_the_update_inverts_the_reported_one(step, update, share):
    reported = mean_rate_step_s(step, update, share)
    assert step_without_update_s(reported, update, share) == pytest.approx(step, rel=1e-9)


def test_one_step_by_precision_is_the_queue_or_the_chain():
    """sgd_step_s: without amp every call queued (bytes at the bandwidth); under amp the
    unscale's pass queued, then the SGD calls (no-decay group first), the scale's update
    and zero_grad, in the model's order, chained from an idle GPU."""
    tensors = [(10, True), (100, False), (7, True)]
    sgd, zero = sgd_ops_bytes([10, 7], [100]), zero_ops_bytes([10, 100, 7])
    assert sgd_step_s(tensors, "fp32", 1e9, 1e-5) == queued_s(sgd + zero, 1e9)
    assert sgd_step_s(tensors, "tf32", 1e9, 1e-5) == queued_s(sgd + zero, 1e9)
    assert sgd_step_s(tensors, "amp", 1e9, 1e-5) == pytest.approx(
        2 * 4 * 117 / 1e9 + chain_s(sgd + [0] + zero, 1e-5, 1e9))
    assert sgd_step_s(tensors, "amp", 1e15, 1e-5) == pytest.approx(
        (len(sgd) + 1 + len(zero)) * 1e-5, rel=1e-6)
