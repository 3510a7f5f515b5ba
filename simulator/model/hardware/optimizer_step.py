"""What a per-tensor optimizer step costs a GPU step, and how often a run pays it.

PyTorch's ``torch.optim.SGD`` without ``foreach`` (torch 1.8-1.11, the NGC 2021 containers'
releases) updates one parameter tensor at a time from Python (``torch/optim/_functional.py``
``sgd``): with momentum and weight decay ``d_p.add(param, alpha=wd)``,
``buf.mul_(momentum).add_(d_p, alpha=1 - dampening)`` and ``param.add_(buf, alpha=-lr)``,
four ATen calls, each one elementwise kernel over the tensor (three without weight decay);
``Optimizer.zero_grad`` then zeroes each gradient (``p.grad.zero_()``, one kernel a tensor,
before the foreach form of later releases). Two ways the step lands on the GPU's time:

* **queued** (no synchronization between the backward and the update): the host issues
  the calls while the GPU still runs the backward, so only the kernels' GPU time shows:
  ``sum_i g_i``, with ``g_i = bytes_i / memory bandwidth`` (an elementwise kernel moves its
  operands once; the kernels' fixed cost is left out, so this is a floor).
* **issued after a synchronization** (``torch.cuda.amp.GradScaler.step``: ``unscale_``,
  then ``_maybe_opt_step`` reads ``found_inf.item()``, which waits for the GPU to drain,
  before it calls ``optimizer.step()``): the GPU is idle when the first call is made and
  each kernel starts once issued and once the one before it ends. Call ``i`` (from 0) is
  issued at ``(i + 1) h`` for ``h`` the host's time a call, so the last ends at ::

      T = max_j [ (j + 1) h + sum_{i >= j} g_i ]

  (``chain_s``; the recurrence ``end_i = max((i + 1) h, end_{i-1}) + g_i`` unrolled).

A run that accumulates gradients (DeepLearningExamples' ConvNets: ``batch_size_multiplier =
optimizer_batch_size / (world_size x batch_size)``, and the step only when ``(i + 1) %
batch_size_multiplier == 0``, ``image_classification/training.py``) pays the update in
``floor(n / k) / n`` of its ``n`` iterations (``update_share``). The examples report the mean
over the iterations of each one's images per second (``logger.py``: ``PERF_METER``, an
``AverageMeter`` a value an iteration), so a published rate with the update in a share ``f``
of the iterations is ``b (1 - f) / t + b f / (t + C)``; ``step_without_update_s`` inverts it.

``sgd_step_s`` is one optimizer step of a model on a device, the two cases above by
precision: what ``simulator.predict`` charges once every ``--accumulation-steps`` iterations
(``engine.run.with_optimizer_step``) and what ``benchmarks.dle.check`` charges its PyTorch
tables. Under amp the gradients' unscale (``GradScaler.unscale_``: each gradient read and
written once) queues behind the backward, then the SGD calls, the scale's update (one call,
no bytes counted) and ``zero_grad`` go out one by one from an idle GPU; without amp every
call queues.
Imports: nothing.
"""
from __future__ import annotations

import math

FP32_BYTES = 4
# fp32 words each call of an SGD step with momentum moves a parameter element, one entry a
# call: d_p = grad + wd * param reads two and writes one (3), buf.mul_ reads and writes buf
# (2), buf.add_(d_p) reads two and writes one (3), param.add_(buf) reads two, writes one (3)
SGD_OPS_DECAYED = (3, 2, 3, 3)
SGD_OPS_PLAIN = (2, 3, 3)                # weight decay 0: no d_p.add
ZERO_OPS = (1,)                           # zero_grad: p.grad.zero_() writes the gradient


def sgd_ops_bytes(decayed: list[int], plain: list[int]) -> list[int]:
    """Bytes each call of ``torch.optim.SGD.step`` (momentum, per tensor) moves, in issue
    order: the tensors without weight decay (``plain``, element counts), then those with it
    (``decayed``), as DeepLearningExamples' two parameter groups order them."""
    return ([FP32_BYTES * w * n for n in plain for w in SGD_OPS_PLAIN]
            + [FP32_BYTES * w * n for n in decayed for w in SGD_OPS_DECAYED])


def zero_ops_bytes(sizes: list[int]) -> list[int]:
    """Bytes each ``p.grad.zero_()`` of ``Optimizer.zero_grad`` moves, a call a tensor."""
    return [FP32_BYTES * w * n for n in sizes for w in ZERO_OPS]


def sgd_step_s(tensors: list[tuple[int, bool]], precision: str, bandwidth_bytes_s: float,
               call_s: float) -> float:
    """Seconds one optimizer step (``torch.optim.SGD`` with momentum, per tensor, then
    ``zero_grad``) adds to an iteration. ``tensors``: (elements, weight-decayed) of each
    parameter tensor in the model's order; the SGD goes over the group without weight decay
    first, then the decayed one (a single group: the model's order), ``zero_grad`` over the
    model's order. Under ``amp`` ``queued_s`` of the unscale, then ``chain_s`` of the calls
    at ``call_s`` the host's time a call; else ``queued_s`` of every call; each kernel at
    the device's memory bandwidth."""
    sgd = sgd_ops_bytes([n for n, d in tensors if d], [n for n, d in tensors if not d])
    zero = zero_ops_bytes([n for n, _ in tensors])
    if precision != "amp":
        return queued_s(sgd + zero, bandwidth_bytes_s)
    grads = sum(zero)                     # zero_ writes each gradient once: its bytes
    return (queued_s([2 * grads], bandwidth_bytes_s)
            + chain_s(sgd + [0] + zero, call_s, bandwidth_bytes_s))


def queued_s(ops_bytes: list[int], bandwidth_bytes_s: float) -> float:
    """The GPU time of kernels queued behind other work (the host ahead): each moves its
    bytes at the memory's bandwidth, one after the other."""
    return sum(ops_bytes) / bandwidth_bytes_s


def chain_s(ops_bytes: list[int], call_s: float, bandwidth_bytes_s: float) -> float:
    """From an idle GPU (after a synchronization) to the last kernel's end, when the host
    issues one call every ``call_s`` and each kernel runs ``bytes / bandwidth`` once issued
    and once the one before it is done: ``max_j [(j + 1) call_s + sum_{i >= j} g_i]``."""
    best, tail = 0.0, 0.0
    for j in range(len(ops_bytes) - 1, -1, -1):
        tail += ops_bytes[j] / bandwidth_bytes_s
        best = max(best, (j + 1) * call_s + tail)
    return best


def update_share(iterations: int, every: int) -> float:
    """The share of ``iterations`` that step the optimizer when it steps every ``every``-th
    (``(i + 1) % every == 0``)."""
    if iterations <= 0 or every <= 0:
        raise ValueError("iterations and every must be positive")
    return math.floor(iterations / every) / iterations


def mean_rate_step_s(step_s: float, update_s: float, share: float) -> float:
    """The time an iteration that a mean of per-iteration rates reports: the iterations
    take ``step_s`` and, a share ``share`` of them, ``step_s + update_s``;
    1 / ((1 - share) / step_s + share / (step_s + update_s))."""
    return 1.0 / ((1.0 - share) / step_s + share / (step_s + update_s))


def step_without_update_s(reported_s: float, update_s: float, share: float) -> float:
    """The step without the update that ``mean_rate_step_s`` reports as ``reported_s``: the
    positive root of r t^2 + (r C - 1) t - (1 - f) C = 0, r = 1 / reported_s."""
    r, c = 1.0 / reported_s, update_s
    b = r * c - 1.0
    return (-b + math.sqrt(b * b + 4.0 * r * (1.0 - share) * c)) / (2.0 * r)
