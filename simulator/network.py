"""Links and messages between ranks.

Between hosts: each host has one full-duplex NIC (an egress and an ingress
resource of ``bandwidth_bytes_per_s`` each) on a non-blocking switch; a message
from host a to host b is a flow over ``a.out`` and ``b.in``, followed by the
link latency (propagation, like SimPy's ``Cable``)::

    t_msg(n) = latency_s + n / bandwidth_bytes_per_s          (alone on the link)

Inside a host: shared memory with the profile's transport of the backend; each
process has its own copy endpoint (``out`` and ``in`` of ``1 / beta_s_per_byte``
bytes/s), so a ring is contention free while a root receiving from many is not::

    t_msg(n) = alpha_s + beta_s_per_byte * n                  (alone on the endpoint)

Messages that share a resource share its capacity max-min fairly (``fluid``):
an incast at a server and a congested NIC slow down by themselves. A message
to a rank on an oversubscribed host also waits for the receiver's turn on a
core (``handoff_s`` per rank, from ``timeslice``), added to its latency.
"""
from __future__ import annotations

import simpy

from .config import Link
from .fluid import FluidShare, Resource
from .profile import Transport


class Routes:
    """Who is where and what a message between two ranks costs when nothing contends."""

    def __init__(self, placement: tuple[int, ...], link: Link | None, shm: Transport,
                 handoff_s: tuple[float, ...] | None = None):
        self.placement = placement
        self.link = link
        self.shm = shm
        self.handoff_s = handoff_s or (0.0,) * len(placement)    # per receiving rank

    def params(self, src: int, dst: int) -> tuple[float, float]:
        """(alpha_s, beta_s_per_byte) of the path src -> dst."""
        if self.placement[src] == self.placement[dst] or self.link is None:
            return self.shm.alpha_s + self.handoff_s[dst], self.shm.beta_s_per_byte
        return self.link.latency_s + self.handoff_s[dst], 1.0 / self.link.bandwidth_bytes_per_s

    def one_host(self, ranks: tuple[int, ...]) -> bool:
        """Whether ``ranks`` all live on one host (MPI then reduces in shared memory)."""
        return len({self.placement[r] for r in ranks}) <= 1

    def group_params(self, ranks: tuple[int, ...]) -> tuple[float, float]:
        """The slowest path's (alpha, beta) when ``ranks`` talk among themselves."""
        wait_s = max(self.handoff_s[r] for r in ranks)
        if self.one_host(ranks) or self.link is None:
            return self.shm.alpha_s + wait_s, self.shm.beta_s_per_byte
        a, b = self.link.latency_s, 1.0 / self.link.bandwidth_bytes_per_s
        return max(a, self.shm.alpha_s) + wait_s, max(b, self.shm.beta_s_per_byte)


class Network:
    """Point-to-point messages as flows over NICs and shared-memory endpoints."""

    def __init__(self, env: simpy.Environment, routes: Routes):
        self.env = env
        self.routes = routes
        self._fluid = FluidShare(env)
        n_hosts = max(routes.placement) + 1
        n_ranks = len(routes.placement)
        bw = routes.link.bandwidth_bytes_per_s if routes.link else None
        self._nic_out = [Resource(f"host{h}.nic.out", bw) for h in range(n_hosts)] if bw else []
        self._nic_in = [Resource(f"host{h}.nic.in", bw) for h in range(n_hosts)] if bw else []
        shm_bw = 1.0 / routes.shm.beta_s_per_byte if routes.shm.beta_s_per_byte > 0 else None
        self._shm_out = [Resource(f"rank{r}.shm.out", shm_bw) for r in range(n_ranks)] if shm_bw else []
        self._shm_in = [Resource(f"rank{r}.shm.in", shm_bw) for r in range(n_ranks)] if shm_bw else []
        self.bytes_sent = [0.0] * n_ranks

    def _path(self, src: int, dst: int) -> tuple[float, tuple[Resource, ...]]:
        hs, hd = self.routes.placement[src], self.routes.placement[dst]
        wait_s = self.routes.handoff_s[dst]
        if hs != hd and self._nic_out:
            return self.routes.link.latency_s + wait_s, (self._nic_out[hs], self._nic_in[hd])
        res = (self._shm_out[src], self._shm_in[dst]) if self._shm_out else ()
        return self.routes.shm.alpha_s + wait_s, res

    def transfer(self, src: int, dst: int, n_bytes: float):
        """Event that fires when ``n_bytes`` from ``src`` have arrived at ``dst``."""
        env = self.env
        delivered = env.event()
        if src == dst:
            return delivered.succeed()
        self.bytes_sent[src] += n_bytes
        latency_s, resources = self._path(src, dst)
        if resources and n_bytes > 0:
            sent = self._fluid.transfer(n_bytes, resources)
        else:
            sent = env.timeout(0)

        def propagate(_ev):
            env.timeout(latency_s).callbacks.append(lambda _e: delivered.succeed())
        sent.callbacks.append(propagate)
        return delivered
