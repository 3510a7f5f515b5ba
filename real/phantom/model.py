"""The stand-in model of a phantom run: the workload's tensors, and sleeps for its layers.

``PhantomModel`` is an ``nn.Module`` whose parameters are the workload's
tensors (element counts and dtypes; in the model's ``parameters()`` order, see
``ModelWorkload.parameter_order``), so every scheme's communication moves
exactly the real model's tensors: the flat buffers of mpi_allreduce,
gather_scatter and the parameter server, the per-tensor all_reduce, DDP's
buckets, psgd's and async_avg's weights.

Its forward is a chain of one autograd function per layer, in forward order
(the gradient-ready order reversed), each taking that layer's parameters as
inputs: the function's forward sleeps the layer's forward time; its backward
sleeps the layer's backward time and then returns a zero gradient for each of
the layer's tensors. Autograd runs the chain backwards on the thread that
called ``backward()`` (on a CPU it has no thread of its own), so the layers'
gradients become ready one layer at a time, in the workload's order and at
its times. Each gradient passes through its parameter's ``AccumulateGrad``,
whose post-hooks are what DDP's reducer listens to
(torch/csrc/distributed/c10d/reducer.cpp: ``Reducer::autograd_hook`` ->
``mark_variable_ready``, which counts down the bucket's pending gradients, and
``mark_bucket_ready``, which launches every bucket whose turn has come, in
order): a bucket's all_reduce starts while the backward of the layers before it
still sleeps. After the first iteration DDP rebuilds its buckets in the order
the hooks fired (``Reducer::rebuild_buckets``), which is the workload's order.

No arithmetic of the model runs: the activations are one-element tensors, the
gradients zeros (written once, as a real backward writes its gradients). The
parameters start at zero on every rank, so the weights every scheme averages
stay numbers a reduction handles at full speed (no denormals, no NaN).

Imports: torch, real.phantom (plan, sleep).
"""
from __future__ import annotations

import time

import torch
from torch import nn

from .plan import PhantomPlan
from .sleep import Sleeper

TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16,
                "bfloat16": torch.bfloat16, "float64": torch.float64}


class _Layer(torch.autograd.Function):
    """One layer: forward sleeps its forward time; backward its backward time, then hands
    each of its tensors a zero gradient."""

    @staticmethod
    def forward(ctx, x, layer, factor, *params):
        layer.model.sleeper.sleep(layer.forward_s * factor)
        ctx.layer, ctx.factor = layer, factor
        ctx.specs = [(p.shape, p.dtype, p.device) for p in params]
        return x.clone()

    @staticmethod
    def backward(ctx, grad_out):
        layer = ctx.layer
        layer.model.sleeper.sleep(layer.backward_s * ctx.factor)
        if layer.first_in_forward:            # the last gradient of the step is ready now
            layer.model.backward_end_t = time.monotonic()
        grads = [torch.zeros(shape, dtype=dtype, device=device)
                 for shape, dtype, device in ctx.specs]
        return (grad_out, None, None, *grads)


class _LayerTimes:
    """A layer's times and where its tensors sit among the module's parameters."""

    def __init__(self, model, layer, indices: list[int], first_in_forward: bool):
        self.model, self.name = model, layer.name
        self.forward_s, self.backward_s = layer.forward_s, layer.backward_s
        self.indices, self.first_in_forward = indices, first_in_forward


class PhantomModel(nn.Module):
    """The workload's parameter tensors; forward and backward sleep its layers' times.

    ``forward(x)`` takes the placeholder batch (its length is the batch size: a
    smaller batch sleeps less, ``PhantomPlan.factor``) and returns a 0-d tensor
    to call ``backward()`` on.
    """

    def __init__(self, plan: PhantomPlan, sleeper: Sleeper | None = None):
        super().__init__()
        self.plan = plan
        self.sleeper = sleeper or Sleeper()
        self.backward_end_t: float | None = None   # when the last backward sleep ended
        order = plan.workload.parameter_order()
        self.weights = nn.ParameterList(
            nn.Parameter(torch.zeros(t.params, dtype=TORCH_DTYPES[t.dtype])) for t in order)
        position = {id(t): i for i, t in enumerate(order)}
        forward = list(reversed(plan.workload.layers))
        self._layers = [_LayerTimes(self, lay, [position[id(t)] for t in lay.tensors],
                                    first_in_forward=i == 0)
                        for i, lay in enumerate(forward)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        factor = self.plan.factor(len(x))
        params = list(self.weights)
        y = torch.zeros((), device=params[0].device if params else None)
        for layer in self._layers:
            y = _Layer.apply(y, layer, factor, *(params[i] for i in layer.indices))
        return y
