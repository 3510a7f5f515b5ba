"""NCCL's "plateau effect of ring": a Simple ring allreduce across hosts, from a size on,
takes ``ring_plateau`` times its step latencies (``model.comm.costs.plateau_s``)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from contracts.cluster import Cluster, Device, Hardware, Link, load_preset
from contracts.profile import Transport
from simulator.model.comm.costs import collective_time_s, plateau_s
from simulator.model.fabric import FabricRoutes

NCCL = Transport("nccl", 5.7e-6, 1 / 11.7e9, 0.0, call_latency_s=8.4e-6)


def routes(hosts, per_host, plateau=1.9, per_rank=4096.0, backend="nccl"):
    hw = Hardware(device=Device("V100", 15e12), intra=Link(130e9, 3.4e-6), nics=1,
                  call_latency_s=8.4e-6, ring_plateau=plateau, ring_plateau_bytes=per_rank)
    cluster = Cluster(hosts=hosts, cores_per_host=per_host,
                      link=Link(12.5e9, 9.6e-6) if hosts > 1 else None, placement="packed",
                      hardware=hw)
    placement = tuple(cluster.placement_of(hosts * per_host))
    return FabricRoutes(placement, cluster, replace(NCCL, backend=backend))


def ring(r, n):
    ranks = tuple(range(len(r.placement)))
    return collective_time_s("allreduce", ranks, n, r, 0.0, "ring")


def test_across_hosts_the_steps_take_the_plateau_times_their_latency():
    """(f - 1) * 2 (P - 1) * the slowest hop's latency on top of the ring's closed form."""
    n = 64e6
    with_, without = routes(4, 4), routes(4, 4, plateau=1.0)
    p = 16
    hop_s = max(with_.path(i, (i + 1) % p)[0] for i in range(p))
    assert hop_s >= 9.6e-6
    assert ring(with_, n) - ring(without, n) == pytest.approx(0.9 * 2 * (p - 1) * hop_s,
                                                               rel=1e-12)


def test_no_plateau_on_one_host_below_its_size_or_for_another_library():
    assert plateau_s(tuple(range(8)), 64e6, routes(1, 8)) == 0.0
    r = routes(4, 4)
    assert plateau_s(tuple(range(16)), 4096 * 16 - 1, r) == 0.0
    assert plateau_s(tuple(range(16)), 4096 * 16, r) > 0.0
    assert plateau_s(tuple(range(16)), 64e6, routes(4, 4, backend="gloo")) == 0.0


def test_the_presets_carry_their_releases_plateau():
    """NCCL 2.7.3-2.16: 1.9 from nRanks/16 * 64 KiB a call (4 KiB a rank); 2.26.2: 1.4
    on Hopper from 64 bytes per rank and channel; 2.5.6 (the Pascal preset): none."""
    for name in ("dgx2", "dgx1-v100", "dgx-a100", "azure-nd-a100-v4"):
        hw = load_preset(name).hardware
        assert (hw.release, hw.ring_plateau, hw.ring_plateau_bytes) == ("2.9.6", 1.9, 4096)
    for name in ("dgx-h100", "azure-nd-h100-v5"):
        hw = load_preset(name).hardware
        assert (hw.ring_plateau, hw.ring_plateau_bytes) == (1.4, 64 * hw.channels)
    assert load_preset("pascal-pcie-25gbe").hardware.ring_plateau == 1.0
