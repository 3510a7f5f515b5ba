"""What TCP did under a run: retransmission timeouts and retransmitted segments per host.

A message that loses packets at a shallow queue (a switch, a shaped link) is
recovered either quickly (fast retransmit, a tail-loss probe) or by the
retransmission timer, whose floor on Linux is ``RtoMin`` = 200 ms: a stall of
whole multiples of 200 ms in a step that otherwise takes tens of milliseconds
(the "TCP incast" collapse of synchronized senders into one receiver is the
best-known case). The kernel counts both per network namespace
(``/proc/self/net/netstat``: ``TCPTimeouts``, ``TCPLossProbes``;
``/proc/self/net/snmp``: ``RetransSegs``, ``OutSegs``), so each rank reads its
own host's counters at the start and end of training and the record keeps the
difference per host (``comm.tcp``), with the congestion control the host's TCP ran
(``congestion_control``: CUBIC and BBR size their windows differently enough to move a
run's time; records from before 2026-11-28 do not say). Ranks that share a namespace share its
counters, and so do all the connections in it: on one host the figures include
other processes' TCP traffic.

Imports: standard library only.
"""
from __future__ import annotations

from pathlib import Path

NETSTAT = {"TCPTimeouts": "timeouts", "TCPLossProbes": "loss_probes"}
SNMP = {"RetransSegs": "retrans_segs", "OutSegs": "out_segs"}


def _pairs(path: Path, prefix: str) -> dict[str, int]:
    """The ``prefix`` line pair of a /proc/net table as name -> value."""
    lines = path.read_text().splitlines()
    for head, values in zip(lines[::2], lines[1::2]):
        if head.startswith(prefix + ":"):
            return {k: int(v) for k, v in zip(head.split()[1:], values.split()[1:])}
    return {}


def counters(proc_net: Path = Path("/proc/self/net")) -> dict[str, int] | None:
    """This namespace's TCP counters now, or None where the kernel does not expose them."""
    try:
        ext, tcp = _pairs(proc_net / "netstat", "TcpExt"), _pairs(proc_net / "snmp", "Tcp")
    except (OSError, ValueError):
        return None
    named = {**{v: ext[k] for k, v in NETSTAT.items() if k in ext},
             **{v: tcp[k] for k, v in SNMP.items() if k in tcp}}
    return named if len(named) == len(NETSTAT) + len(SNMP) else None


def congestion_control(ipv4: Path = Path("/proc/sys/net/ipv4")) -> str | None:
    """The TCP congestion control new connections of this namespace get, or None."""
    try:
        return (ipv4 / "tcp_congestion_control").read_text().strip() or None
    except OSError:
        return None


def delta(before: dict | None, after: dict | None) -> dict[str, int] | None:
    if before is None or after is None:
        return None
    return {k: after[k] - before[k] for k in before}


def per_host(per_rank: list[dict]) -> list[dict]:
    """One entry per host (network namespace) from the ranks' ``{"host", "tcp"}``: the
    first rank's counters of each host (its other ranks read the same ones)."""
    hosts: dict[str, dict] = {}
    for rank, r in enumerate(per_rank):
        if r.get("tcp") is None:
            continue
        entry = hosts.setdefault(r["host"], {"host": r["host"], "ranks": [], **r["tcp"]})
        entry["ranks"].append(rank)
    return list(hosts.values())
