"""What DistributedDataParallel's own calls add to a step on a GPU, apart from communication.

Two parts, each a call count that torch's sources fix and a cost a call measured on a GPU
(default arguments, a NCCL group; ``benchmarks.gpu.step_probe --parts ddp`` splits them):

* **each buffer, before each forward** (``broadcast_buffers=True``, on the main thread):
  ``DistributedDataParallel._pre_forward`` -> ``_sync_buffers``, which walks the module tree
  again (``_assign_modules_buffers``: ``self.module.named_buffers()``, every forward) and
  calls ``_distributed_broadcast_coalesced`` -> ``broadcast_coalesced``
  (``torch/csrc/distributed/c10d/comm.cpp``). That buckets the buffers by dtype and device
  (ResNet-50: the float running statistics and the int64 ``num_batches_tracked``, two
  buckets), and for each bucket flattens it (``torch/csrc/utils/tensor_flatten.h``: a
  ``view`` a buffer, one ``cat``), broadcasts it, unflattens it (a ``narrow`` and a ``view``
  a buffer) and copies each buffer back (``BroadcastWork::finish``: one ``copy_`` a buffer,
  one kernel). Six ATen calls a buffer, one of them a kernel, plus a ``cat`` and a broadcast a
  bucket (torch's profiler, ``tests/test_ddp_calls.py``). The examples' loop synchronizes
  every step (DeepLearningExamples' ConvNets ``image_classification/training.py``: the train
  step ends in ``torch.cuda.synchronize()``), so these run on an idle GPU, all on the step.
* **each parameter tensor, in backward and after it** (C++, the autograd thread): its hook
  copies the gradient into its bucket divided by the world size
  (``Reducer::mark_variable_ready_dense`` -> ``copy_grad_to_bucket``: ``at::mul_out``,
  ``torch/csrc/distributed/c10d/reducer.cpp``), and once the bucket is reduced copies it
  back (``finalize_bucket_dense`` -> ``copy_bucket_to_grad``): two ATen calls a tensor, each
  a kernel, issued while backward's kernels still run ahead of them on the GPU.

Measured (``benchmarks/gpu/results/h200-2026-11-27-ddp-split.json``, one H200 on a 16-core
Xeon, torch 2.11.0; ResNet-50 b256, 159 buffers, 161 parameter tensors, a one-rank group that
moves nothing): the buffers' broadcast adds 2.47 / 3.17 / 3.15 ms a step in fp32 / tf32 / amp
(15.5 / 19.9 / 19.8 us a buffer, mean 18.4 us), the gradients' copies 1.36 / 1.09 / 0.75 ms
(8.45 / 6.79 / 4.68 us a tensor, mean 6.64 us): a buffer costs 2.3-4.2 times a tensor's two
calls, 4.7-8.5 times one call. The model::

    t_ddp = n_buffers * c_buffer + n_tensors * c_gradient

with ``c_buffer`` and ``c_gradient`` the device's ``ddp_buffer_s`` and ``ddp_gradient_s``
(``contracts.cluster.Device``; 0: not modelled), added to every step of a DDP rank. A model
with few buffers (a Transformer: LayerNorm has none) pays the gradients' part only.
Imports: nothing.
"""
from __future__ import annotations

# ATen calls a buffer's broadcast makes (flatten's view, unflatten's narrow -> slice ->
# as_strided and view, the copy back) and a parameter tensor's gradient (mul_out, copy_):
# what torch's profiler counts, tests/test_ddp_calls.py
ATEN_CALLS_PER_BUFFER = 6
ATEN_CALLS_PER_TENSOR = 2


def ddp_buffers_s(n_buffers: int, buffer_s: float) -> float:
    """What the buffers' broadcast before each forward adds to a step."""
    return n_buffers * buffer_s


def ddp_gradients_s(n_tensors: int, gradient_s: float) -> float:
    """What each gradient's copy into its bucket and back adds to a step."""
    return n_tensors * gradient_s


def ddp_step_s(n_tensors: int, n_buffers: int, buffer_s: float, gradient_s: float) -> float:
    """What DDP's calls add to one step: ``n_buffers * buffer_s + n_tensors * gradient_s``."""
    return ddp_buffers_s(n_buffers, buffer_s) + ddp_gradients_s(n_tensors, gradient_s)
