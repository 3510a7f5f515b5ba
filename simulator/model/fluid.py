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
ever interrupted. With many flows (a server's incast at large P) the filling runs on
arrays kept in step with the flows (``Crossings``), and the flows advance and end on
them: the same floats, fewer Python steps. Congestion, incast and core sharing are not
written anywhere as formulas; they follow from this one mechanism.

Imports: numpy, SimPy.
"""
from __future__ import annotations

import itertools
import math
from typing import Callable

import numpy as np
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
    __slots__ = ("amount", "remaining", "resources", "weights", "cap", "rate", "done", "kind")

    def __init__(self, amount: float, resources: tuple[Resource, ...], cap: float, done,
                 weights: tuple[float, ...] | None = None, kind: int = -1):
        self.kind = kind            # flows of one kind cross the same resources alike
        self.amount = amount
        self.remaining = amount
        self.resources = resources
        self.weights = weights or (1.0,) * len(resources)   # capacity used per unit of rate
        self.cap = cap
        self.rate = 0.0
        self.done = done


def max_min_rates(flows: list[Flow], crossings: Crossings | None = None,
                  set_rates: bool = True) -> np.ndarray | None:
    """Set ``flow.rate`` for every flow by progressive filling (max-min fairness); a flow
    uses ``weight`` units of a resource per unit of its rate (its ACKs: a small share).
    ``crossings``: the flows as arrays, kept by the caller (else made here when there are
    ``ARRAYS_FROM`` flows or more). Filled on arrays, it returns the rates as one, and
    leaves them off the flows unless ``set_rates``."""
    first = flows[0].resources
    if len(first) == 1 and all(f.resources is first or f.resources == first for f in flows):
        _one_resource(flows, first[0])
        return
    if len(flows) == 1 and len(set(first)) == len(first):   # (most often: one message alone)
        _one_flow(flows[0])
        return
    if crossings is None and len(flows) >= ARRAYS_FROM:
        crossings = Crossings(flows)
    if crossings is not None and crossings.lossless:
        return _filling_arrays(flows, crossings, set_rates)
    _filling(flows)
    return None


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


ARRAYS_FROM = 32     # flows: from this many on, the filling runs on arrays (the same floats)
RATES_KEPT = 4096    # sets of flows whose rates a FluidShare remembers (0: none)


class Crossings:
    """The flows' crossings as arrays for ``_filling_arrays``, kept in step with the flows as
    they start (``add``) and end (``keep``): row i holds flow i's resources (by index, 0
    a padding that no flow crosses) and weights (0.0 on the padding), ``caps`` their caps.
    ``lossless``: no resource seen has sharing losses (``efficiency``). While they are kept,
    the flows' amounts left (``left``) and rates (``rate``) live here, as arrays, and
    ``FluidShare`` advances and ends the flows on them (the same floats as flow by flow);
    ``FluidShare`` writes them back to the flows when it stops keeping them."""

    def __init__(self, flows: list[Flow]):
        self._index: dict[Resource, int] = {}
        self._capacities = [1.0]              # (the padding's: never full, never crossed)
        self._capacity = None                 # as an array, once asked for
        self._ids: dict[tuple, tuple] = {}    # a resources tuple -> its indices
        self.lossless = True
        self.width = max(len(f.resources) for f in flows)
        (self.res, self.weight, self.caps, self.left, self.rate, self.amount,
         self.kind) = self._rows(flows)
        self._new: list[Flow] = []

    def _ids_of(self, resources: tuple[Resource, ...]) -> tuple[int, ...]:
        ids = self._ids.get(resources)
        if ids is None:
            out = []
            for r in resources:
                i = self._index.get(r)
                if i is None:
                    i = self._index[r] = len(self._capacities)
                    self._capacities.append(r.capacity)
                    self._capacity = None
                    self.lossless = self.lossless and r.efficiency is None
                out.append(i)
            ids = self._ids[resources] = tuple(out)
        return ids

    def _rows(self, flows: list[Flow]):
        res = np.zeros((len(flows), self.width), dtype=np.intp)
        weight = np.zeros((len(flows), self.width))
        for row, f in enumerate(flows):
            ids = self._ids_of(f.resources)
            res[row, :len(ids)] = ids
            weight[row, :len(ids)] = f.weights
        caps = np.fromiter((f.cap for f in flows), dtype=float, count=len(flows))
        left = np.fromiter((f.remaining for f in flows), dtype=float, count=len(flows))
        rate = np.fromiter((f.rate for f in flows), dtype=float, count=len(flows))
        amount = np.fromiter((f.amount for f in flows), dtype=float, count=len(flows))
        kind = np.fromiter((f.kind for f in flows), dtype=np.intp, count=len(flows))
        return res, weight, caps, left, rate, amount, kind

    def add(self, flow: Flow) -> None:
        self._new.append(flow)

    def keep(self, kept) -> None:
        """Only the flows marked True stay (the flows' order kept)."""
        self._flush()
        mask = np.asarray(kept, dtype=bool)
        self.res, self.weight, self.caps = self.res[mask], self.weight[mask], self.caps[mask]
        self.left, self.rate, self.amount = self.left[mask], self.rate[mask], self.amount[mask]
        self.kind = self.kind[mask]

    def write_back(self, flows: list[Flow]) -> None:
        """The amounts left and rates of ``flows`` (the flows kept) back on them."""
        self._flush()
        for f, left, rate in zip(flows, self.left.tolist(), self.rate.tolist()):
            f.remaining, f.rate = left, rate

    def arrays(self):
        """(resources (F, K), weights (F, K), caps (F), capacity of each resource index)."""
        self._flush()
        if self._capacity is None:
            self._capacity = np.array(self._capacities)
        return self.res, self.weight, self.caps, self._capacity

    def _flush(self) -> None:
        if not self._new:
            return
        wider = max(len(f.resources) for f in self._new)
        if wider > self.width:
            pad = ((0, 0), (0, wider - self.width))
            self.res, self.weight = np.pad(self.res, pad), np.pad(self.weight, pad)
            self.width = wider
        res, weight, caps, left, rate, amount, kind = self._rows(self._new)
        self._new = []
        self.res = np.concatenate((self.res, res))
        self.weight = np.concatenate((self.weight, weight))
        self.caps = np.concatenate((self.caps, caps))
        self.left = np.concatenate((self.left, left))
        self.rate = np.concatenate((self.rate, rate))
        self.amount = np.concatenate((self.amount, amount))
        self.kind = np.concatenate((self.kind, kind))


def _filling_arrays(flows: list[Flow], crossings: Crossings, set_rates: bool = True):
    """``_filling`` on arrays, for many flows (a server's incast at large P): the same
    elementary operations on the same floats, so the same rates to the last bit
    (``tests/test_fluid.py``). Each crossing (a flow through a resource, in the flows'
    order) is one element; a resource's weights are summed and taken off in that order
    (``np.add.at`` applies them one by one, in order); the cap left of every live resource
    is updated each round as one product and one difference, as in ``_filling``; the least
    ratio and the least cap are minima, whatever the order. Resources with sharing losses
    are left to ``_filling``. Returns the rates (an array); ``set_rates``: on the flows too."""
    res2d, weight2d, caps, capacity = crossings.arrays()
    res, weight = res2d.ravel(), weight2d.ravel()
    owner = np.arange(len(flows)).repeat(res2d.shape[1])        # the flow of each crossing
    count = np.zeros(len(capacity))
    np.add.at(count, res, weight)
    cap_left = capacity.copy()
    capped = caps < math.inf
    has_cap = bool(capped.any())
    frozen = np.zeros(len(flows), dtype=bool)
    rate = np.zeros(len(flows))
    live = count != 0                        # the resources some unfrozen flow crosses
    left, level = len(flows), 0.0
    while left:
        n = count[live]
        c = cap_left[live]
        positive = n > _EPS
        inc = float((c[positive] / n[positive]).min()) if positive.any() else math.inf
        if has_cap:
            inc = min(inc, float(caps[capped].min()) - level)
        if math.isinf(inc):
            raise RuntimeError("a flow crosses no finite capacity")
        level += inc
        c = c - inc * n
        cap_left[live] = c
        full = np.zeros(len(capacity), dtype=bool)
        full[live] = positive & (c <= _EPS * capacity[live])
        stop = np.zeros(len(flows), dtype=bool)
        stop[owner[full[res]]] = True
        if has_cap:
            stop |= capped & (caps - level <= _EPS * caps)
        stop &= ~frozen
        frozen |= stop
        rate[stop] = level
        taken = stop[owner]
        np.subtract.at(count, res[taken], weight[taken])
        left -= int(stop.sum())
        live &= count != 0
        if has_cap:
            capped &= ~frozen
            has_cap = bool(capped.any())
    if set_rates:
        for f, r in zip(flows, rate.tolist()):
            f.rate = r
    return rate


def _one_flow(f: Flow) -> None:
    """One flow: the filling's first round, written out (the same floats), freezes it at
    its least capacity or its cap."""
    inc = math.inf                 # min(capacity / weight of each resource, cap - 0), in order
    for r, w in zip(f.resources, f.weights):
        inc = min(inc, r.capacity / w)
    inc = min(inc, f.cap - 0.0)
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


def _end(done) -> None:
    """A flow is over: its event succeeds, or its callback is called."""
    if isinstance(done, simpy.Event):
        done.succeed()
    else:
        done(None)


class FluidShare:
    """Flows over resources in one SimPy environment; ``transfer`` returns the completion event."""

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.flows: list[Flow] = []
        self._updated_at = env.now
        self._timer = None                  # the completion timer for the rates now
        self._pending = False
        self._crossings: Crossings | None = None   # the flows as arrays, while they are many
        self._kinds: dict[tuple, int] = {}  # (resources, weights, cap) -> the flows' kind
        self._rates: dict[tuple, tuple] = {}   # the flows' kinds, in order -> their rates

    def transfer(self, amount: float, resources: tuple[Resource, ...], cap: float = math.inf,
                 weights: tuple[float, ...] | None = None, on_done=None):
        """The event of the flow's end; or, given ``on_done``, None, and ``on_done(None)`` is
        called as the flow ends (an event less per flow: a network's messages)."""
        if amount <= 0:
            if on_done is not None:
                return on_done(None)
            return self.env.event().succeed()
        done = self.env.event() if on_done is None else on_done
        self._advance()
        kind = self._kinds.setdefault((resources, weights, cap), len(self._kinds))
        flow = Flow(amount, resources, cap, done, weights, kind)
        self.flows.append(flow)
        if self._crossings is not None:
            self._crossings.add(flow)
        if len(self.flows) == 1 and not self._pending:
            self._reschedule()              # alone on an idle network: its rate at once
        else:
            self._recompute_soon()
        return done if on_done is None else None

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
            c = self._crossings
            if c is not None:
                c._flush()
                c.left -= c.rate * dt
            else:
                for f in self.flows:
                    f.remaining -= f.rate * dt
        self._updated_at = self.env.now

    def _reschedule(self) -> None:
        self._timer = None
        if not self.flows:
            return
        if len(self.flows) < ARRAYS_FROM // 2:
            if self._crossings is not None:
                self._crossings.write_back(self.flows)
            self._crossings = None
        elif self._crossings is None and len(self.flows) >= ARRAYS_FROM:
            self._crossings = Crossings(self.flows)
        self._rates_now()
        c = self._crossings
        if c is not None:
            positive = c.rate > 0
            dt = (float((c.left[positive] / c.rate[positive]).min()) if positive.any()
                  else math.inf)
        elif len(self.flows) == 1:          # (most often: one message on the network)
            f = self.flows[0]
            dt = f.remaining / f.rate if f.rate > 0 else math.inf
        else:
            dt = min(f.remaining / f.rate if f.rate > 0 else math.inf for f in self.flows)
        if math.isinf(dt):
            raise RuntimeError("flows with zero rate: a resource has no capacity")
        self._timer = self.env.timeout(max(dt, 0.0))
        self._timer.callbacks.append(self._on_timer)

    def _rates_now(self) -> None:
        """Max-min rates of the flows now. The rates are a function of the flows' kinds in
        their order alone (the same operations on the same floats): a collective's steps
        bring the same flows back again and again, and their rates are looked up (on the
        arrays, the kinds' bytes are the key and the rates an array, never changed in place)."""
        c = self._crossings
        if c is not None:
            c._flush()
            key = c.kind.tobytes()
        else:
            key = tuple([f.kind for f in self.flows])
        rates = self._rates.get(key)
        if rates is None:
            on_arrays = max_min_rates(self.flows, c, set_rates=c is None)
            if c is not None:
                rates = (on_arrays if on_arrays is not None
                         else np.array([f.rate for f in self.flows]))
            else:
                rates = tuple(on_arrays.tolist() if on_arrays is not None
                              else [f.rate for f in self.flows])
            if len(self._rates) >= RATES_KEPT:
                self._rates.clear()
            if RATES_KEPT:
                self._rates[key] = rates
        elif c is None:
            for f, rate in zip(self.flows, rates):
                f.rate = rate
        if c is not None:                   # (the flows' own rates go stale meanwhile)
            c.rate = rates

    def _on_timer(self, timer) -> None:
        if timer is not self._timer:
            return                          # the rates changed since this timer was set
        self._advance()
        # the flow this timer was set for always ends now (rounding may leave a crumb);
        # so does every flow due within a relative rounding tolerance of now
        c = self._crossings
        if c is not None:
            self._end_arrays(c)
            return
        if len(self.flows) == 1:            # it alone: the flow this timer was set for
            f, = self.flows
            self.flows = []
            _end(f.done)
            self._reschedule()
            return
        due = [f.remaining / f.rate for f in self.flows]
        tol = min(due) + 1e-12 * max(1.0, self.env.now)
        finished, self.flows, flows = [], [], self.flows
        for f, t in zip(flows, due):
            (finished if t <= tol or f.remaining <= 1e-9 * f.amount else self.flows).append(f)
        for f in finished:
            _end(f.done)
        self._reschedule()

    def _end_arrays(self, c: Crossings) -> None:
        """``_on_timer``'s ends on the arrays kept in ``c``: the same tests on the same floats."""
        c._flush()
        with np.errstate(divide="ignore", invalid="ignore"):
            due = c.left / c.rate
        tol = float(due.min()) + 1e-12 * max(1.0, self.env.now)
        ends = (due <= tol) | (c.left <= 1e-9 * c.amount)
        flows, kept = self.flows, ~ends
        finished = list(itertools.compress(flows, ends.tolist()))
        self.flows = list(itertools.compress(flows, kept.tolist()))
        c.keep(kept)
        for f in finished:
            _end(f.done)
        self._reschedule()
