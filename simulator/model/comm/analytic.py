"""The analytic fidelity: a collective is a barrier followed by its closed form.

The closed form counts how the messages of each step share NICs and endpoints
on this placement (``comm.costs``); a point-to-point message costs ``alpha +
beta * n`` (plus a rendezvous' extra hand-offs), whatever else is in flight.
Cheap: a handful of events per collective whatever P is.

Imports: model.comm.base, model.comm.costs.
"""
from __future__ import annotations

from simulator.model.comm.base import Comm
from simulator.model.comm.costs import collective_time_s


class AnalyticComm(Comm):
    """Closed forms behind a barrier; messages cost alpha + beta * n."""

    together = True

    def __init__(self, *args):
        super().__init__(*args)
        self._costs: dict[tuple, float] = {}

    def _cost(self, kind, ranks, n_bytes, algorithm, root) -> float:
        """The collective's closed form on this placement (the same call costs the same)."""
        key = (kind, id(ranks), n_bytes, algorithm, root)
        t = self._costs.get(key)
        if t is None:
            t = self._costs[key] = collective_time_s(kind, ranks, n_bytes, self.routes,
                                                     self.gamma_s_per_byte, algorithm, root)
        return t

    def transfer(self, src, dst, n_bytes):
        if src == dst:
            return self.env.timeout(0)
        alpha_s, beta_s_per_byte = self.routes.params(src, dst)
        return self.env.timeout(alpha_s + beta_s_per_byte * n_bytes
                                + self._rendezvous_s(dst, n_bytes))

    def leg(self, src, dst, n_bytes):
        if src == dst:
            return self.env.timeout(0)
        alpha_s, beta_s_per_byte = self.routes.params(src, dst)
        return self.env.timeout(alpha_s + beta_s_per_byte * n_bytes)

    def _meet(self, call, kind, ranks, n_bytes, algorithm, root, is_last) -> None:
        """The barrier: once the last rank is in, the closed form elapses, then all leave."""
        if is_last:
            over = self.env.event()
            over.callbacks.append(lambda ev: self._leave_together(call, kind, ranks, root, ev))
            t = self._cost(kind, ranks, n_bytes, algorithm, root)
            self.env.timeout(t).callbacks.append(lambda _ev: over.succeed())
