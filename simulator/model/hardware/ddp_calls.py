"""What DistributedDataParallel's own calls add to a step on a GPU, apart from communication.

Every step DDP makes one call per parameter tensor and buffer, whatever the tensor's size
(torch's sources; default arguments, a NCCL group):

* before each forward it broadcasts the model's buffers (``broadcast_buffers=True``:
  ``DistributedDataParallel._pre_forward`` -> ``_sync_buffers`` -> ``_broadcast_coalesced``;
  ``broadcast_coalesced`` in ``torch/csrc/distributed/c10d/comm.cpp`` flattens each bucket
  of buffers into one tensor, broadcasts it and copies it back, one ``copy_`` a buffer);
* as each gradient is ready its hook copies it into its bucket, divided by the world size
  (``Reducer::mark_variable_ready_dense``: ``at::mul_out(bucket_view, grad, 1 / P)``,
  ``torch/csrc/distributed/c10d/reducer.cpp``);
* once the buckets are reduced it copies each back into its gradient
  (``Reducer::finalize_bucket_dense`` -> ``copy_bucket_to_grad``).

So ``2 n_tensors + n_buffers`` calls a step (ResNet-50: 2 x 161 + 159 = 481; torch's
profiler counts 481 ``aten::copy_`` more a step under DDP than without, on a one-rank
group). Each is a small kernel whose launch costs its host tens of microseconds of
dispatch and the GPU a few; the loops that publish GPU throughputs synchronize every step
(DeepLearningExamples' ConvNets ``image_classification/training.py``: the train step ends in
``torch.cuda.synchronize()``, in ``get_train_step`` of 2020 as in ``Trainer.train_step`` after), so
the broadcast's calls before the first forward kernel run on an idle GPU. Measured
(``benchmarks/gpu/results/h200-2026-11-27-ddp.json``, ``benchmarks.gpu.step_probe --parts
ddp``, one H200): DDP adds 4.30 / 4.25 / 3.90 ms to ResNet-50's step in fp32 / tf32 / amp
(241.6 / 81.5 / 44.4 ms plain): a time a step, not a share of it. The model::

    t_ddp = (2 n_tensors + n_buffers) * c

with ``c`` the device's ``ddp_call_s`` (``contracts.cluster.Device``; 0: not modelled),
added to every step of a DDP rank. Imports: nothing.
"""
from __future__ import annotations


def ddp_calls(n_tensors: int, n_buffers: int) -> int:
    """DDP's calls a step: each gradient into its bucket and back, each buffer broadcast."""
    return 2 * n_tensors + n_buffers


def ddp_step_s(n_tensors: int, n_buffers: int, call_s: float) -> float:
    """What DDP's calls add to one step: ``(2 n_tensors + n_buffers) * call_s``."""
    return ddp_calls(n_tensors, n_buffers) * call_s
