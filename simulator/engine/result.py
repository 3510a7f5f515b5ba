"""A prediction for one scheme and P (``Result``), built the same way by every engine.

Imports: numpy.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Result:
    """A prediction for one scheme and P. Times in seconds; per-worker figures are means."""
    scheme: str
    workers: int
    engine: str                      # des | fast
    fidelity: str                    # analytic | message
    seed: int
    time_s: float                    # simulated wall time of all iterations
    iterations_per_worker: int
    iterations_per_epoch: int
    epoch_s: float                   # time_s scaled to one epoch
    compute_s: float                 # mean per worker over the run
    comm_s: float
    wait_s: float
    compute_s_per_worker: tuple[float, ...] = ()
    comm_s_per_worker: tuple[float, ...] = ()
    wait_s_per_worker: tuple[float, ...] = ()
    staleness: dict[int, int] = field(default_factory=dict)   # updates in between -> count
    events: int = 0                  # SimPy events scheduled (0 on the fast path)
    bytes_sent: float = 0.0          # message fidelity only
    trace: dict | None = field(default=None, compare=False, repr=False)
    simulated_iterations: int = 0    # of iterations_per_worker; fewer: steady state extrapolated
    schedule: list[dict] | None = field(default=None, compare=False, repr=False)

    @property
    def mean_staleness(self) -> float:
        n = sum(self.staleness.values())
        return sum(k * v for k, v in self.staleness.items()) / n if n else 0.0


def build_result(spec, cfg, plan, workload, seed, engine, time_s, compute, comm, wait,
            staleness, events, bytes_sent, trace, schedule=None) -> Result:
    per_epoch = workload.iterations_per_epoch(plan.workers)
    return Result(
        scheme=spec.name, workers=plan.workers, engine=engine, fidelity=cfg.fidelity,
        seed=seed, time_s=float(time_s), iterations_per_worker=plan.iterations,
        iterations_per_epoch=per_epoch, epoch_s=float(time_s) * per_epoch / plan.iterations,
        compute_s=float(np.mean(compute)), comm_s=float(np.mean(comm)),
        wait_s=float(np.mean(wait)),
        compute_s_per_worker=tuple(map(float, compute)),
        comm_s_per_worker=tuple(map(float, comm)), wait_s_per_worker=tuple(map(float, wait)),
        staleness=staleness, events=events, bytes_sent=float(bytes_sent), trace=trace,
        simulated_iterations=plan.iterations, schedule=schedule)
