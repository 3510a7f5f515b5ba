"""What ``real.launch.runner`` does differently in a phantom run: no data, a stand-in, no accuracy.

* ``placeholder_data``: a dataset of the real run's size with no pixels (the
  batches' indices and lengths are the real run's; nothing is loaded);
* ``phantom_compute``: the plan of ``--workload`` and ``--time-scale``;
* ``compute_record``: the record's ``compute`` section: the mode, S, the
  workload's file, digest and provenance.

Imports: numpy, real.training.data, real.phantom (compute, plan).
"""
from __future__ import annotations

import numpy as np

from .compute import PhantomCompute
from .plan import load_plan

SLEEP_POLICY = ("timer slack 1 ns; each sleep's lateness taken off the next sleep "
                "(real.phantom.sleep)")


def placeholder_data(name: str, train_size: int | None):
    """``real.training.data.Dataset`` with ``train_size`` (default: the set's) samples of no
    features."""
    from real.training.data import Dataset, sample_shape
    _, default_train, _ = sample_shape(name)
    n = train_size or default_train
    return Dataset(name=name, train_x=np.empty((n, 0), dtype=np.float32),
                   train_y=np.zeros(n, dtype=np.int64), test_x=np.empty((0, 0), np.float32),
                   test_y=np.zeros(0, dtype=np.int64), source="phantom: no data loaded")


def phantom_compute(args) -> PhantomCompute:
    """The compute of ``--workload`` at ``--time-scale`` (PhantomError if it cannot be)."""
    return PhantomCompute(load_plan(args.workload, args.time_scale))


def compute_record(compute, batch: int) -> dict:
    """The ``compute`` section of a run record (how late each rank's sleeps woke goes to
    the record's ``testbed`` section, ``real.records.testbed``)."""
    if compute.mode != "phantom":
        return {"mode": "real"}
    return {**compute.plan.record(batch), "sleep_policy": SLEEP_POLICY}
