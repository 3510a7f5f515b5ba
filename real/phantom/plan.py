"""What a phantom step sleeps: a workload file's per-layer times, dilated, at the run's batch.

``PhantomPlan`` holds, for one run, the workload's layers in gradient-ready
order with their forward and backward times, the update time, the time scale
S (every compute time is multiplied by it: time dilation) and how a batch of
another size than the measured one scales them:

    sleep(layer, b) = S * t_layer * f(b),   f(b) = line(b) / line(B)

where B is the batch the workload was measured at and ``line`` the file's step
time against the batch for its threads (``[[measured.lines]]``), else the
batch itself (a step proportional to the batch, as ``contracts.
workload.model_cost`` assumes). At the measured batch f = 1: each layer takes
exactly its measured time. A global batch that does not divide evenly, or a
shard's last batch, is smaller, and so is its step.

The update (the optimizer's step on a worker) sleeps ``measured.update``; a
hand-written file without it gets ``step - forward - backward`` (at least 0).

A file without per-layer forward and backward times is refused
(``PhantomError``, naming the file and the field): a phantom step cannot
invent where backward's gradients become ready.

Imports: hashlib, contracts.workload.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from contracts.workload import ModelWorkload, WorkloadError, load_workload

ACCURACY_NOTE = ("not measured: a phantom run's compute is a sleep, its weights never "
                 "train (its times are the measurement)")


class PhantomError(ValueError):
    """A workload or setting a phantom run cannot use; one line names the field and the fix."""


@dataclass(frozen=True)
class PhantomPlan:
    workload: ModelWorkload
    path: str
    sha256: str
    time_scale: float = 1.0

    @property
    def update_s(self) -> float:
        """The worker's optimizer step, undilated (see the module docstring)."""
        w = self.workload
        if w.update_s > 0:
            return w.update_s
        return max(0.0, w.step_s - sum(lay.forward_s + lay.backward_s for lay in w.layers))

    def factor(self, batch: int) -> float:
        """S * f(batch): what each measured time of a step of ``batch`` samples is multiplied by."""
        w = self.workload
        line = next((s for s in w.lines if s.threads == w.threads), None)
        if line is not None:
            at = line.intercept_s + line.s_per_sample * w.batch_size
            f = (line.intercept_s + line.s_per_sample * batch) / at if at > 0 else 1.0
        else:
            f = batch / w.batch_size
        return self.time_scale * f

    def step_s(self, batch: int) -> float:
        """Forward + backward + update of one step of ``batch``, as slept."""
        w = self.workload
        return self.factor(batch) * (sum(lay.forward_s + lay.backward_s for lay in w.layers)
                                     + self.update_s)

    def record(self, batch: int) -> dict:
        """The record's ``compute`` section (``real.launch.runner``) before the sleeps' lateness."""
        w = self.workload
        return {"mode": "phantom", "time_scale": self.time_scale,
                "workload": {"file": self.path, "sha256": self.sha256, "name": w.name,
                             "device": w.device, "batch_size": w.batch_size,
                             "threads": w.threads, "layers": len(w.layers),
                             "tensors": len(w.tensors), "params": w.params,
                             "grad_bytes": w.grad_bytes, "step_s": w.step_s,
                             "forward_s": sum(lay.forward_s for lay in w.layers),
                             "backward_s": sum(lay.backward_s for lay in w.layers),
                             "update_s": self.update_s, "provenance": dict(w.provenance)},
                "batch_size": batch, "batch_factor": self.factor(batch) / self.time_scale,
                "phantom_step_s": self.step_s(batch), "accuracy": ACCURACY_NOTE}


def load_plan(path: str, time_scale: float = 1.0) -> PhantomPlan:
    """The plan of workload file ``path``; PhantomError (one line) when it cannot drive one."""
    try:
        w = load_workload(path)
    except WorkloadError as e:
        raise PhantomError(f"--workload: {e}") from None
    problem = missing_times(w)
    if problem:
        raise PhantomError(f"--workload {path}: {problem}")
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return PhantomPlan(w, str(path), digest, time_scale)


def missing_times(w: ModelWorkload) -> str | None:
    """Why ``w`` has no per-layer times a phantom step can sleep, or None."""
    fix = ("a phantom run sleeps each layer's measured forward and backward time: measure "
           "them with python -m calibrate.workload, or give forward and backward (\"1.2ms\") "
           "in every [[layers]] table")
    if not any(lay.forward_s > 0 or lay.backward_s > 0 for lay in w.layers):
        return f"the file has no per-layer times (no [[layers]] with forward and backward); {fix}"
    for i, lay in enumerate(w.layers):
        for field, value in (("forward", lay.forward_s), ("backward", lay.backward_s)):
            if not value > 0:
                return f"field layers[{i}].{field} ({lay.name}) is missing or 0; {fix}"
    return None
