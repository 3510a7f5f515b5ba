"""Phantom runs: every message real, the compute a sleep of its measured time.

A phantom run is a real run of a rank-based scheme (``real.train --compute
phantom --workload FILE [--time-scale S]``) in which each layer's forward and
backward are sleeps of the workload file's per-layer times (times S), and
nothing else changes: the same library and backend, the same tensors (sizes,
dtypes, order), DDP's real reducer and buckets, the same server. Data loading
is skipped (the sample counts, batches and iterations are the real run's);
no accuracy is measured. It measures what a network does with a model's
gradients at a device's step time, where the device (or as many cores as the
ranks) is missing: many emulated hosts on two cores, or a user's own cluster.

* ``plan``: the workload file's times, the time scale, the batch's factor;
  the checks that refuse a file without per-layer times;
* ``sleep``: precise sleeps (timer slack, lateness carried to the next sleep)
  and the histogram of how late each woke;
* ``model``: the stand-in ``nn.Module``: the workload's tensors, an autograd
  chain whose backward makes gradients ready layer by layer;
* ``compute``: ``PhantomCompute``, what the schemes call instead of a step.

docs/phantom.md has the commands, the substitution check and its limits.

Imports: nothing at load; the modules import torch and contracts.workload.
"""
