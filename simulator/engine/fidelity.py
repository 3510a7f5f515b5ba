"""Which fidelity of communication a run gets when the user leaves it to ``auto``.

``analytic`` (a barrier, then the collective's closed form on the placement,
``model.comm.costs``) is the message model wherever every rank meets each
collective together and leaves it together, and no two transfers of
different calls share a link. It is chosen unless:

* a collective of the scheme does not run in lock step on this placement
  (recursive doubling or Rabenseifner with a fold, or hops of different
  speeds): its ranks leave one by one and the next call starts staggered;
* transfers of different workers overlap on a shared port: the parameter
  server's pushes and replies (``ps_async``), ``ps_sync``'s incast of
  gradients from workers that got their weights one after the other, and the pushes
  that cross into ``async_avg``'s holder while it computes (``model.schemes.holder``);
* gloo's gather and scatter between hosts (``gather_scatter``): the root's
  scatter returns before its port drains, its ranks get their pieces one after
  another, and the gather's notices queue behind that drain (``comm.gloo.gather``),
  which no barrier holds.

Then ``message`` runs every message. (On an oversubscribed host with ranks
that sleep in their calls, the two fidelities also differ in the order ranks
leave a call and queue for the cores; that is a scheduling effect, and the
analytic model is the one validated there, so it stays.)

Imports: model.comm.costs, model.network.
"""
from __future__ import annotations

from simulator.model.comm.costs import in_lock_step
from simulator.model.network import Routes


def auto_fidelity(spec, plan, routes: Routes) -> str:
    """``analytic`` or ``message`` for a run of scheme ``spec`` with ``plan`` on ``routes``."""
    if spec.server or spec.exchange == "holder":
        return "message"
    if spec.exchange == "gather_scatter" and not routes.one_host(plan.worker_ranks):
        return "message"
    ranks, n = plan.worker_ranks, plan.param_bytes
    calls = {"average": [("allreduce", n, plan.algorithm)],
             "flat": [("allreduce", plan.grad_bytes, plan.algorithm)]}.get(spec.exchange, [])
    if all(in_lock_step(kind, ranks, size, routes, algorithm) for kind, size, algorithm in calls):
        return "analytic"
    return "message"

