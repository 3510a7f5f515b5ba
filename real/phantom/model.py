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

The stand-in's own work (its autograd functions' dispatch between forward
layers, writing a layer's zero gradients) is charged to the next sleep
(``Sleeper.charge``): a real layer's measured time already holds that work.
Autograd's own steps in backward (from one of the stand-in's layers to the
next: ``AccumulateGrad`` and the call into the next layer; from the last layer
to ``backward()``'s return; a real layer's measured time holds these for its
several operators) are measured once, when the stand-in is built, as in a run
but with no hook (``_tare``), and charged; DDP's hooks and their copies into
buckets, which run in those same intervals, are not: a real run does that on
top of its layers' times too.

The workload's buffers (BatchNorm's running statistics) are buffers of the stand-in, in
the real model's ``named_buffers()`` order and dtypes: DDP broadcasts a module's buffers
from rank 0 before each forward in training (torch/nn/parallel/distributed.py:
``_pre_forward`` -> ``_sync_buffers`` -> ``_default_broadcast_coalesced``, which hands
``modules_buffers`` to ``dist._broadcast_coalesced``: one flat message per dtype and
bucket), so a phantom DDP run sends those messages too. They stay zeros.

No arithmetic of the model runs: the activations are one-element tensors, the
gradients zeros (written once, as a real backward writes its gradients). The
parameters start at zero on every rank, so the weights every scheme averages
stay numbers a reduction handles at full speed (no denormals, no NaN).

Imports: torch, real.phantom (plan, sleep).
"""
from __future__ import annotations

import statistics

import torch
from torch import nn

from .plan import PhantomPlan
from .sleep import Sleeper

TARE_PASSES = 5                  # backward passes that measure autograd's steps (_tare)
TARE_SLEEP_MAX_S = 5e-3          # a layer sleeps its backward time in them, at most this
TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16,
                "bfloat16": torch.bfloat16, "float64": torch.float64, "int64": torch.int64}


class _Layer(torch.autograd.Function):
    """One layer: forward sleeps its forward time; backward its backward time, then hands
    each of its tensors a zero gradient."""

    @staticmethod
    def forward(ctx, x, layer, factor, *params):
        model = layer.model
        clock = model.sleeper.clock
        if not model.taring:
            model.sleeper.charge(clock() - model.mark)  # dispatch since the last layer
            model.sleeper.sleep(layer.forward_s * factor)
        ctx.layer, ctx.factor = layer, factor
        ctx.specs = [(p.shape, p.dtype, p.device) for p in params]
        out = x.clone()
        model.mark = clock()
        return out

    @staticmethod
    def backward(ctx, grad_out):
        layer = ctx.layer
        model = layer.model
        clock, sleeper = model.sleeper.clock, model.sleeper
        entered = clock()
        if model.taring:                      # as in a run: the layer sleeps, briefly
            model.tare_marks.append(entered)
            sleeper.nap(min(TARE_SLEEP_MAX_S, layer.backward_s * ctx.factor))
        else:                                 # autograd's step to here: the stand-in's own
            sleeper.charge(entered - model.mark if layer.backward_index == 0
                           else model.tare_gaps_s[layer.backward_index - 1])
            sleeper.sleep(layer.backward_s * ctx.factor)
        woke = clock()
        if layer.first_in_forward:            # the last gradient of the step is ready now
            model.backward_end_t = woke
        grads = [torch.zeros(shape, dtype=dtype, device=device)
                 for shape, dtype, device in ctx.specs]
        if model.taring:
            model.tare_marks.append(clock())
        else:
            sleeper.charge(clock() - woke)    # the gradients: the layer's work
        return (grad_out, None, None, *grads)


class _LayerTimes:
    """A layer's times and where its tensors sit among the module's parameters."""

    def __init__(self, model, layer, indices: list[int], backward_index: int,
                 first_in_forward: bool):
        self.model, self.name = model, layer.name
        self.forward_s, self.backward_s = layer.forward_s, layer.backward_s
        self.indices, self.backward_index = indices, backward_index
        self.first_in_forward = first_in_forward


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
        self.mark = 0.0                            # when the stand-in last handed back control
        order = plan.workload.parameter_order()
        self.weights = nn.ParameterList(
            nn.Parameter(torch.zeros(t.params, dtype=TORCH_DTYPES[t.dtype])) for t in order)
        for i, t in enumerate(plan.workload.buffers):     # DDP broadcasts them every forward
            self.register_buffer(f"buffer{i}", torch.zeros(t.params, dtype=TORCH_DTYPES[t.dtype]))
        position = {id(t): i for i, t in enumerate(order)}
        forward = list(reversed(plan.workload.layers))
        n = len(forward)
        self._layers = [_LayerTimes(self, lay, [position[id(t)] for t in lay.tensors],
                                    n - 1 - i, i == 0) for i, lay in enumerate(forward)]
        self.taring, self.tare_marks = False, []
        self.tare_gaps_s, self.tare_tail_s = self._tare()

    def _tare(self, passes: int = TARE_PASSES) -> tuple[list[float], float]:
        """Autograd's own time between the stand-in's backward layers, and from the last
        one to ``backward()``'s return, measured as in a run (each layer sleeping first, at
        most ``TARE_SLEEP_MAX_S``: code that runs after a sleep finds its caches cold, and
        the longer the sleep the colder) but with no hook: the median over ``passes``
        passes, per place. Each backward layer after the first is charged its gap; the
        first is charged its live wait from the end of forward, and ``PhantomCompute``
        charges the tail after ``backward()``: a real layer's measured time holds these."""
        self.taring, gaps, tails = True, [], []
        try:
            for _ in range(passes):
                self.tare_marks = []
                self.zero_grad(set_to_none=True)
                self(torch.empty(self.plan.workload.batch_size, 0)).backward()
                ended = self.sleeper.clock()
                marks = self.tare_marks        # (in, out) of each layer, in backward order
                gaps.append([b - a for a, b in zip(marks[1:-1:2], marks[2::2])])
                tails.append(ended - marks[-1])
        finally:
            self.taring = False
            self.zero_grad(set_to_none=True)
        return ([statistics.median(g[k] for g in gaps) for k in range(len(gaps[0]))],
                statistics.median(tails))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.mark = self.sleeper.clock()      # the stand-in's own work from here is charged
        factor = self.plan.factor(len(x))
        params = list(self.weights)
        y = torch.zeros((), device=params[0].device if params else None)
        for layer in self._layers:
            y = _Layer.apply(y, layer, factor, *(params[i] for i in layer.indices))
        return y
