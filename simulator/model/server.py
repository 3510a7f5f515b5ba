"""A parameter server: one update at a time, each a service time.

Applying one update costs ``update_s``, as a compute job on the server's host (so it
shares that host's cores): the model's ``server_update_s`` where the calibration
measured the real server's update of it (``real.schemes.ps.server_update``: the
gradient into the model's tensors, torch's SGD step, the weights out), else the
profile's line ``update_intercept_s + update_s_per_param * params``
(``contracts.profile.ModelCost.server_s``).

Updates queue first come, first served (a ``simpy.Resource`` of capacity 1).
``version`` counts the updates applied so far; staleness of a gradient is the
number of updates applied between the read of w and its own application.

Imports: SimPy, model.hardware.host.
"""
from __future__ import annotations

import simpy

from simulator.model.hardware.host import Host


class ParameterServer:
    def __init__(self, env: simpy.Environment, rank: int, host: Host, update_s: float,
                 polls: bool = False):
        self.env = env
        self.rank = rank
        self.host = host
        self.polls = polls                 # a process of its own that busy-waits for requests
        if polls:
            host.start_polling(rank)
        self.update_s = update_s
        self.version = 0
        self._queue = simpy.Resource(env, capacity=1)

    def apply(self, recorder=None, queued: bool = True):
        """Generator: queue, then apply one update; returns the version it was applied on.
        ``queued`` False: the caller holds the server's loop already (``ps_async``), so the
        queue is empty and the update starts at once."""
        if not queued:
            return (yield from self._update(recorder))
        with self._queue.request() as turn:
            yield turn
            return (yield from self._update(recorder))

    def _update(self, recorder):
        t0 = self.env.now
        applied_on = self.version
        yield self.host.compute(self.update_s, 1, self.polls, self.rank)
        self.version += 1
        if recorder is not None:
            recorder.add(self.rank, "compute", t0, self.env.now, "update")
        return applied_on
