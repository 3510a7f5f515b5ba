"""What every scheme's rank loop receives, and the training step they share.

``Setup`` bundles the simulated collaborators (workers, comm, recorder,
server) handed to the scheme's rank processes; ``train_step`` is one forward
+ backward + update on the worker's host, accounted as compute.

Imports: model (comm, recorder, server, worker, workload).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from simulator.model.comm import Comm
from simulator.model.recorder import Recorder
from simulator.model.server import ParameterServer
from simulator.model.worker import Worker
from simulator.model.workload import Plan


@dataclass
class Setup:
    plan: Plan
    workers: list[Worker]
    comm: Comm
    recorder: Recorder
    server: ParameterServer | None = None
    extra: dict = field(default_factory=dict)


def host_copy(worker: Worker, copy_s: float):
    """A scheme's own copy of its flat vector on the rank's core (``Plan.new_copy_s``,
    ``kept_copy_s``); nothing where the host's copies are not measured."""
    if copy_s > 0:
        yield worker.compute(copy_s)


def train_step(env, worker: Worker, recorder: Recorder, i: int, extra_s: float = 0.0):
    """One forward + backward + update on the worker's host, accounted as compute."""
    t0 = env.now
    yield worker.compute(worker.step_s[i] + extra_s)
    recorder.add(worker.rank, "compute", t0, env.now, "step")
    recorder.step_done(worker.rank, env.now)
