"""Routes of accelerator hosts and two-level networks (``FabricRoutes``).

``network.Routes`` knows one NIC per host on a non-blocking switch and shared
memory inside a host. A cluster with ``Hardware`` adds:

* inside a host, the link between devices (NVLink, PCIe): a message between two
  devices of a host crosses the sender's port out and the receiver's port in,
  each of the intra link's bandwidth, after its latency;
* several NICs per host: rank r (the k-th of its host) uses NIC ``k mod nics``
  of its host, both ways;
* a two-tier tree: hosts sit ``hosts_per_leaf`` to a leaf switch; a message
  between leaves also crosses its leaf's uplink and the other leaf's downlink,
  each of ``hosts_per_leaf * nics * bandwidth / oversubscription``;
* NCCL's rings over every NIC: NCCL builds one ring per channel, each entering and
  leaving a host by a NIC of its own (``src/graph/search.cc``: "Ring: NET n -> GPU a
  -> .. -> GPU x -> NET n (or m if crossNic)", ``ncclTopoSearchRecNet`` starts each
  channel at the next NET), and splits a call over the channels; so with the nccl
  backend a message between hosts crosses ``rings = min(channels, nics)`` NICs of
  each host at once: one resource per host and direction of ``rings`` NICs'
  bandwidth (``nic_out``/``nic_in`` of NIC "rings"), where one rank's NIC
  (``nic_of``) carries it otherwise (gloo, MPI: one socket, one NIC);
* NCCL's channels: a collective split over ``channels`` rings moves each part
  at most at ``channel_bytes_per_s``; the parts of one message cross the same
  resources, so together they are one flow of at most ``channels *
  channel_bytes_per_s`` (``flow_cap``; 0 = no cap);
* NCCL's LL and LL128 protocols (``ll_routes``, ``ll128_routes``): the same
  resources, each protocol's own latency per ring step inside a host and between
  hosts;
* gloo on the hosts' CPUs (``host_routes``): TCP between two ranks of a host, the
  devices' copies to and from host memory over ``host_link`` (``stage_s``).

The resources are the same kind ``network.Network`` shares max-min fairly and
``comm.costs`` counts per step, so both fidelities see them.
Imports: ``contracts`` and ``model.network``.
"""
from __future__ import annotations

import copy
import functools
from dataclasses import replace

from contracts.cluster import Cluster
from contracts.profile import Transport
from simulator.model.network import Routes


class FabricRoutes(Routes):
    """Routes over the devices, NICs and switches a cluster's ``Hardware`` describes."""

    def __init__(self, placement: tuple[int, ...], cluster: Cluster, shm: Transport,
                 handoff_s: tuple[float, ...] | None = None,
                 pools: tuple[int, ...] | None = None):
        super().__init__(placement, cluster.link, shm, handoff_s, pools)
        hw = cluster.hardware
        self.hardware = hw
        self.intra = hw.intra
        local, seen = [], {}
        for host in placement:
            local.append(seen.get(host, 0))
            seen[host] = local[-1] + 1
        self.nic_of = tuple(k % hw.nics for k in local)
        if hw.topology == "two_tier" and cluster.link is not None:
            self.uplink_bytes_per_s = (hw.hosts_per_leaf * hw.nics
                                       * cluster.link.bandwidth_bytes_per_s / hw.oversubscription)
        self.flow_cap = hw.channels * hw.channel_bytes_per_s
        self.rings = min(hw.channels, hw.nics) if shm.backend == "nccl" else 1
        self.nccl = shm.backend == "nccl"

    @functools.cached_property
    def ll_routes(self) -> FabricRoutes | None:
        """These routes as NCCL's LL protocol runs a ring over them: the same devices,
        NICs and switches, each step after the protocol's own latency (a call moves
        ``1 / share`` times its bytes: ``comm.costs``, ``comm.message``).
        None where the cluster does not price the protocol."""
        return self._protocol_routes(self.hardware.ll)

    @functools.cached_property
    def ll128_routes(self) -> FabricRoutes | None:
        """As ``ll_routes``, for NCCL's LL128 protocol."""
        return self._protocol_routes(self.hardware.ll128)

    @functools.cached_property
    def host_routes(self) -> FabricRoutes:
        """These routes as gloo sends on accelerator hosts: on the host's CPU over TCP,
        so two ranks of a host talk through the profile's ``shm`` transport (gloo's
        loopback), not the devices' link; between hosts the same NICs and switches."""
        other = copy.copy(self)
        for name in ("ll_routes", "ll128_routes", "host_routes"):
            other.__dict__.pop(name, None)
        other.intra = None
        other.rings = 1                        # TCP from the host: one NIC a flow
        other.__dict__["host_routes"] = other
        return other

    def stage_s(self, n_bytes: float) -> float:
        """A device's copy of ``n_bytes`` to or from pinned host memory over the cluster's
        ``host_link`` (its own link each: copies of two devices do not contend)."""
        link = self.hardware.host_link
        if link is None:
            return 0.0
        return link.latency_s + n_bytes / link.bandwidth_bytes_per_s

    def _protocol_routes(self, ll) -> FabricRoutes | None:
        if ll is None:
            return None
        other = copy.copy(self)
        other.__dict__.pop("ll_routes", None)
        other.__dict__.pop("ll128_routes", None)
        if self.intra is not None:
            other.intra = replace(self.intra, latency_s=ll.intra_latency_s)
        if self.link is not None:
            other.link = replace(self.link, latency_s=ll.link_latency_s)
        return other

    def params(self, src: int, dst: int) -> tuple[float, float]:
        latency_s, resources = self.path(src, dst)
        slowest = min((c for _k, c in resources), default=0.0)
        return latency_s + self.handoff_s[dst], (1.0 / slowest if slowest else 0.0)

    def path(self, src: int, dst: int):
        hs, hd = self.placement[src], self.placement[dst]
        if hs == hd or self.link is None:
            if self.intra is None:
                return super().path(src, dst)
            bw = self.intra.bandwidth_bytes_per_s
            return self.intra.latency_s, ((("dev_out", src), bw), (("dev_in", dst), bw))
        bw = self.link.bandwidth_bytes_per_s
        if self.rings > 1:                     # NCCL's rings, one over each NIC
            hops = [(("nic_out", hs, "rings"), bw * self.rings),
                    (("nic_in", hd, "rings"), bw * self.rings)]
        else:
            hops = [(("nic_out", hs, self.nic_of[src]), bw),
                    (("nic_in", hd, self.nic_of[dst]), bw)]
        leaf_s, leaf_d = self.hardware.leaf_of(hs), self.hardware.leaf_of(hd)
        if leaf_s != leaf_d:
            up = self.uplink_bytes_per_s
            hops += [(("leaf_up", leaf_s), up), (("leaf_down", leaf_d), up)]
        return self.link.latency_s, tuple(hops)

    def group_params(self, ranks: tuple[int, ...]) -> tuple[float, float]:
        """The slowest path's (alpha, beta) when ``ranks`` talk among themselves."""
        pairs = [(a, b) for a in ranks[:2] for b in ranks if a != b] or [(ranks[0], ranks[0])]
        params = [self.params(a, b) for a, b in pairs]
        return max(a for a, _ in params), max(b for _, b in params)


def make_routes(placement: tuple[int, ...], cluster: Cluster, shm: Transport,
                handoff_s: tuple[float, ...] | None = None,
                pools: tuple[int, ...] | None = None) -> Routes:
    """Plain ``Routes`` for cores and one link per host; ``FabricRoutes`` where the
    cluster describes accelerators, NICs or a topology."""
    if cluster.hardware is not None:
        return FabricRoutes(placement, cluster, shm, handoff_s, pools)
    return Routes(placement, cluster.link, shm, handoff_s, pools)
