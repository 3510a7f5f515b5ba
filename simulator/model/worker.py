"""A worker: one training process on a host, with its pre-drawn step times.

It computes on its host's cores (``model.hardware``); a worker that *polls*
(MPICH busy-waits between steps) keeps a core busy while it waits. On a device whose
collectives slow its compute (``hardware.interference``), it computes there instead.

Imports: numpy, model.hardware.host.
"""
from __future__ import annotations

import numpy as np

from simulator.model.hardware.host import Host


class Worker:
    """One training process: its rank, host, threads and pre-drawn step times."""

    def __init__(self, rank: int, host: Host, threads: int, step_s: np.ndarray,
                 polls: bool = False):
        self.rank = rank
        self.host = host
        self.threads = threads
        self.step_s = step_s.tolist()      # plain floats: cheaper per access in the loop
        self.polls = polls                 # busy-waits between steps (see ``Host``)
        self.interference = None           # ``Interference`` of its device, where modelled
        if polls:
            host.start_polling(rank)

    def compute(self, work_s: float):
        """Event: ``work_s`` seconds of full-speed work done on the (shared) host."""
        if self.interference is not None:
            return self.interference.compute(self.rank, work_s)
        return self.host.compute(work_s, self.threads, self.polls, self.rank)
