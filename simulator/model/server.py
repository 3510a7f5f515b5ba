"""A parameter server: one update at a time, each a service time.

Applying one update costs ``update_s``, as a compute job on the server's host (so it
shares that host's cores): the model's ``server_update_s`` where the calibration
measured the real server's update of it (``real.schemes.ps.server_update``: the
gradient into the model's tensors, torch's SGD step, the weights out), else the
profile's line ``update_intercept_s + update_s_per_param * params``
(``contracts.profile.ModelCost.server_s``). Where the calibration also timed that update
after idle waits (``ModelCost.server_idle_curve``: after the server slept in polls that
long; the longer, the colder its caches and core), the update costs the curve at the
idle time the server had before it here: from the end of its previous update (the start
of the run for the first) to the start of this one, linearly between the measured
points and flat beyond them (``cold_update_s``). A server whose ranks spin while they
wait (``Transport.poll_s`` 0: one host) never leaves its core: idle 0, the curve's first
point, which is ``server_update_s`` (the same back-to-back rows).

Updates queue first come, first served (a ``simpy.Resource`` of capacity 1).
``version`` counts the updates applied so far; staleness of a gradient is the
number of updates applied between the read of w and its own application.

Imports: SimPy, model.hardware.host.
"""
from __future__ import annotations

import simpy

from simulator.model.hardware.host import Host


def cold_update_s(curve: tuple[tuple[float, float], ...], idle_s: float) -> float:
    """The update after ``idle_s`` seconds idle, on the measured ``(idle_s, update_s)``
    points (idle ascending): linear between two points, the end's value beyond either."""
    if idle_s <= curve[0][0]:
        return curve[0][1]
    for (x0, y0), (x1, y1) in zip(curve, curve[1:]):
        if idle_s <= x1:
            return y0 + (y1 - y0) * (idle_s - x0) / (x1 - x0)
    return curve[-1][1]


class ParameterServer:
    def __init__(self, env: simpy.Environment, rank: int, host: Host, update_s: float,
                 polls: bool = False, idle_curve: tuple[tuple[float, float], ...] = (),
                 sleeps: bool = False):
        self.env = env
        self.rank = rank
        self.host = host
        self.polls = polls                 # a process of its own that busy-waits for requests
        if polls:
            host.start_polling(rank)
        self.update_s = update_s
        self.idle_curve = idle_curve       # (idle s, update s); () = update_s at any idle
        self.sleeps = sleeps               # it waits in sleeping polls, off its core
        self.free_since = 0.0              # when its last update ended
        self.version = 0
        self._queue = simpy.Resource(env, capacity=1)

    def apply(self, recorder=None):
        """Generator: queue, then apply one update; returns the version it was applied on."""
        with self._queue.request() as turn:
            yield turn
            return (yield from self._update(recorder))

    def copy_and_apply(self, copy_s: float, recorder=None):
        """Generator: the server's copy of a push (``copy_s``), then one update, for a caller
        that holds the server's loop (``ps_async``); returns the version it was applied on
        and when the update began. On a host whose jobs each keep a core
        (``CoreHost.dedicate``: the update is a timeout of its cost) the two are one
        timeout wherever its end is the same float as the two's: an event less a push."""
        env = self.env
        if copy_s > 0 and getattr(self.host, "dedicated", False):
            t1 = env.now + copy_s
            t2 = t1 + self.cost_s(t1)
            wait_s = t2 - env.now
            if t2 > t1 and env.now + wait_s == t2:
                applied_on = self.version
                yield env.timeout(wait_s)
                self._updated(recorder, t1)
                return applied_on, t1
        yield env.timeout(copy_s)
        t1 = env.now
        return (yield from self._update(recorder)), t1

    def _update(self, recorder):
        t0 = self.env.now
        applied_on = self.version
        yield self.host.compute(self.cost_s(t0), 1, self.polls, self.rank)
        self._updated(recorder, t0)
        return applied_on

    def _updated(self, recorder, t0: float) -> None:
        """An update begun at ``t0`` ends now."""
        self.free_since = self.env.now
        self.version += 1
        if recorder is not None:
            recorder.add(self.rank, "compute", t0, self.env.now, "update")

    def cost_s(self, now: float) -> float:
        """One update starting at ``now``: at the idle time before it on the curve."""
        if not self.idle_curve:
            return self.update_s
        return cold_update_s(self.idle_curve, now - self.free_since if self.sleeps else 0.0)
