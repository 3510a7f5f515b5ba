"""Fluid sharing: flows that share capacities by max-min fairness.

A *flow* moves ``amount`` units (bytes through links, core-seconds through a
host's cores) across one or more *resources* of fixed ``capacity`` (units per
second), possibly limited by its own ``cap`` (a process of T threads can use
at most T cores). Rates are max-min fair: progressive filling raises every
unfrozen flow's rate together until a resource is full or a flow reaches its
cap, freezes those flows, and repeats. A resource may also slow all its flows
by ``efficiency(n_flows)`` (measured processor-sharing losses).

Whenever a flow starts or ends, every flow's remaining amount is advanced at
its old rate, the rates are recomputed and the next completion is scheduled.
Stale completion timers (any but the last one set) are ignored, so no process is
ever interrupted. Congestion, incast and core sharing are not
written anywhere as formulas; they follow from this one mechanism.

Imports: SimPy.
"""
from __future__ import annotations

import math
from typing import Callable

import simpy

_EPS = 1e-12


class Resource:
    """A capacity shared by the flows crossing it (bytes/s of a NIC direction, cores of a host)."""
    __slots__ = ("name", "capacity", "efficiency")

    def __init__(self, name: str, capacity: float,
                 efficiency: Callable[[int], float] | None = None):
        self.name = name
        self.capacity = capacity
        self.efficiency = efficiency

    def __repr__(self) -> str:
        return f"Resource({self.name!r}, {self.capacity:g})"


class Flow:
    __slots__ = ("amount", "remaining", "resources", "weights", "cap", "rate", "done")

    def __init__(self, amount: float, resources: tuple[Resource, ...], cap: float, done,
                 weights: tuple[float, ...] | None = None):
        self.amount = amount
        self.remaining = amount
        self.resources = resources
        self.weights = weights or (1.0,) * len(resources)   # capacity used per unit of rate
        self.cap = cap
        self.rate = 0.0
        self.done = done


def max_min_rates(flows: list[Flow]) -> None:
    """Set ``flow.rate`` for every flow by progressive filling (max-min fairness); a flow
    uses ``weight`` units of a resource per unit of its rate (its ACKs: a small share)."""
    first = flows[0].resources
    if len(first) == 1 and all(f.resources is first or f.resources == first for f in flows):
        _one_resource(flows, first[0])
        return
    if len(flows) == 1 and len(set(first)) == len(first):   # (most often: one message alone)
        _one_flow(flows[0])
        return
    _filling(flows)


def _filling(flows: list[Flow]) -> None:
    """Progressive filling, written to visit each flow a bounded number of times: every
    unfrozen flow's rate is the same running sum of the rounds' increments (``level``: the
    same floats as adding each round's to each flow), the tightest cap is the least cap of
    the unfrozen flows less that sum (subtraction keeps the order), and the flows to freeze
    are those of the resources just filled (found through each resource's flows) and those
    at their cap, their weights taken off in the flows' order as a pass over them all does."""
    count: dict[Resource, float] = {}         # sum of the unfrozen flows' weights
    on: dict[Resource, list[int]] = {}        # each flow (by index) crossing it, per crossing
    capped: list[int] = []                    # flows with a cap of their own
    for i, f in enumerate(flows):
        f.rate = 0.0
        for r, w in zip(f.resources, f.weights):
            if r in count:
                count[r] += w
                on[r].append(i)
            else:
                count[r] = 0 + w
                on[r] = [i]
        if f.cap < math.inf:
            capped.append(i)
    cap_left = {r: r.capacity for r in count}
    frozen = [False] * len(flows)
    live = list(count)                        # resources some unfrozen flow crosses
    left, level = len(flows), 0.0
    while left:
        inc = min((cap_left[r] / count[r] for r in live if count[r] > _EPS), default=math.inf)
        if capped:
            inc = min(inc, min(flows[i].cap for i in capped) - level)
        if math.isinf(inc):
            raise RuntimeError("a flow crosses no finite capacity")
        level += inc
        stop = set()
        for r in live:
            n = count[r]
            c = cap_left[r] = cap_left[r] - inc * n
            if n > _EPS and c <= _EPS * r.capacity:
                stop.update(on[r])
        stop.update(i for i in capped if flows[i].cap - level <= _EPS * flows[i].cap)
        stop = sorted(i for i in stop if not frozen[i])
        for i in stop:
            f = flows[i]
            frozen[i] = True
            f.rate = level
            for r, w in zip(f.resources, f.weights):
                count[r] -= w
        left -= len(stop)
        live = [r for r in live if count[r] != 0]
        if capped:
            capped = [i for i in capped if not frozen[i]]
    for r, crossing in on.items():            # (a flow crossing r twice counts twice in n)
        if r.efficiency is not None:
            e = r.efficiency(len(crossing))
            for i in dict.fromkeys(crossing):
                flows[i].rate *= e


def _one_flow(f: Flow) -> None:
    """One flow: the filling's first round, written out (the same floats), freezes it at
    its least capacity or its cap."""
    inc = math.inf                 # min(capacity / weight of each resource, cap - 0), in order
    for r, w in zip(f.resources, f.weights):
        if r.capacity / w < inc:
            inc = r.capacity / w
    if f.cap - 0.0 < inc:
        inc = f.cap - 0.0
    if math.isinf(inc):
        raise RuntimeError("a flow crosses no finite capacity")
    f.rate = 0.0 + inc
    for r in f.resources:
        if r.efficiency is not None:
            f.rate *= r.efficiency(1)


def _one_resource(flows: list[Flow], r: Resource) -> None:
    """Water-filling on one resource: the flows with the smallest caps are served first."""
    left, n = r.capacity, len(flows)
    e = r.efficiency(n) if r.efficiency is not None else 1.0
    for f in sorted(flows, key=lambda f: f.cap):
        share = left / n
        f.rate = min(f.cap, share)
        left -= f.rate
        n -= 1
        f.rate *= e


class FluidShare:
    """Flows over resources in one SimPy environment; ``transfer`` returns the completion event."""

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.flows: list[Flow] = []
        self._updated_at = env.now
        self._timer = None                  # the completion timer for the rates now
        self._pending = False

    def transfer(self, amount: float, resources: tuple[Resource, ...], cap: float = math.inf,
                 weights: tuple[float, ...] | None = None):
        done = self.env.event()
        if amount <= 0:
            done.succeed()
            return done
        self._advance()
        self.flows.append(Flow(amount, resources, cap, done, weights))
        self._recompute_soon()
        return done

    def _recompute_soon(self) -> None:
        """Recompute the rates once the flows starting at this instant are all in: many
        messages start together (every rank's step of a collective), and one max-min
        filling for all of them costs what one for each would cost, not P times it."""
        if self._pending:
            return
        self._pending = True
        self._timer = None                  # the timer set for the old rates is stale
        self.env.timeout(0).callbacks.append(self._recompute)

    def _recompute(self, _ev) -> None:
        self._pending = False
        self._advance()
        self._reschedule()

    def _advance(self) -> None:
        dt = self.env.now - self._updated_at
        if dt > 0:
            for f in self.flows:
                f.remaining -= f.rate * dt
        self._updated_at = self.env.now

    def _reschedule(self) -> None:
        self._timer = None
        if not self.flows:
            return
        max_min_rates(self.flows)
        dt = min(f.remaining / f.rate if f.rate > 0 else math.inf for f in self.flows)
        if math.isinf(dt):
            raise RuntimeError("flows with zero rate: a resource has no capacity")
        self._timer = self.env.timeout(max(dt, 0.0))
        self._timer.callbacks.append(self._on_timer)

    def _on_timer(self, timer) -> None:
        if timer is not self._timer:
            return                          # the rates changed since this timer was set
        self._advance()
        # the flow this timer was set for always ends now (rounding may leave a crumb);
        # so does every flow due within a relative rounding tolerance of now
        due = [f.remaining / f.rate for f in self.flows]
        tol = min(due) + 1e-12 * max(1.0, self.env.now)
        finished, self.flows, flows = [], [], self.flows
        for f, t in zip(flows, due):
            (finished if t <= tol or f.remaining <= 1e-9 * f.amount else self.flows).append(f)
        for f in finished:
            f.done.succeed()
        self._reschedule()
