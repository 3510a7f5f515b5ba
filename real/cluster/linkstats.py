"""What every shaper of the emulated cluster did during a run: bytes, drops, achieved rate.

A token bucket with packets waiting sends at its configured rate, unless the kernel
that runs it is too busy (its dequeue runs in softirq on the machine's cores, the same
cores the ranks use). So the rate a shaper achieved *while backlogged* tells whether
the links were the network asked for or the machine's CPU (Mininet-HiFi's link
invariant; Handigol et al., CoNEXT 2012). ``LinkSampler`` reads every shaper's
counters (tc's ``Sent`` bytes and packets, ``dropped``, ``overlimits``, ``backlog``)
every ``SAMPLE_S`` through one rtnetlink socket per namespace, opened in that
namespace (``setns``), so a sample costs no process; ``summarize`` keeps, per shaper,
the totals over the window and the bytes it sent over the intervals that began with
at least an interval's worth of traffic queued (so the link had work throughout, new
arrivals or not), as a share of its rate. tc counts whole frames (Ethernet header
included), as its rate does. A fast link's queue (1 MiB is 8 ms at 1 Gbit/s) seldom
holds a 50 ms interval's worth: its rate is then not judged.

Needs root (rank 0 on the emulated cluster runs as root); ``start`` returns None
where the namespaces cannot be entered.

Imports: the standard library (ctypes for setns).
"""
from __future__ import annotations

import ctypes
import os
import socket
import struct
import threading
import time

SAMPLE_S = 0.05
MIN_BACKLOGGED_S = 0.2           # shorter backlogged time: too little to judge a rate
CLONE_NEWNET = 0x40000000
RTM_GETQDISC, RTM_NEWQDISC, NLMSG_DONE, NLMSG_ERROR = 38, 36, 3, 2
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
TCA_KIND, TCA_STATS2 = 1, 7
TCA_STATS_BASIC, TCA_STATS_QUEUE = 1, 3
TC_H_ROOT = 0xFFFFFFFF


def _attrs(data: bytes, offset: int, end: int):
    """(type, payload) of the rtattrs in data[offset:end]."""
    while offset + 4 <= end:
        length, kind = struct.unpack_from("=HH", data, offset)
        if length < 4:
            break
        yield kind & 0x3FFF, data[offset + 4: offset + length]
        offset += (length + 3) & ~3


def parse_qdiscs(data: bytes) -> tuple[list[dict], bool]:
    """Root qdiscs of an RTM_NEWQDISC dump: ifindex, kind, bytes, packets, drops,
    overlimits, backlog; and whether the dump ended (NLMSG_DONE)."""
    out, offset, done = [], 0, False
    while offset + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, offset)
        if length < 16:
            break
        if kind in (NLMSG_DONE, NLMSG_ERROR):
            done = True
        elif kind == RTM_NEWQDISC:
            _, _, _, ifindex, _, parent, _ = struct.unpack_from("=BBHiIII", data, offset + 16)
            if parent == TC_H_ROOT:
                q = {"ifindex": ifindex}
                for t, payload in _attrs(data, offset + 36, offset + length):
                    if t == TCA_KIND:
                        q["kind"] = payload.rstrip(b"\0").decode()
                    elif t == TCA_STATS2:
                        for st, sp in _attrs(payload, 0, len(payload)):
                            if st == TCA_STATS_BASIC:
                                q["bytes"], q["packets"] = struct.unpack_from("=QI", sp)
                            elif st == TCA_STATS_QUEUE:
                                _, q["backlog"], q["drops"], _, q["overlimits"] = \
                                    struct.unpack_from("=IIIII", sp)
                out.append(q)
        offset += (length + 3) & ~3
    return out, done


class _Netns:
    """An rtnetlink socket opened inside a named namespace, and its interfaces' names."""

    def __init__(self, name: str):
        libc = ctypes.CDLL(None, use_errno=True)
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(f"/run/netns/{name}", os.O_RDONLY)
        try:
            if libc.setns(target, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"setns into {name}")
            try:
                self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
                self.names = dict(socket.if_nameindex())
            finally:
                libc.setns(own, CLONE_NEWNET)
        finally:
            os.close(own)
            os.close(target)
        self.name, self.seq = name, 0

    def qdiscs(self) -> list[dict]:
        self.seq += 1
        req = struct.pack("=IHHII", 36, RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP, self.seq, 0) \
            + struct.pack("=BBHiIII", 0, 0, 0, 0, 0, 0, 0)
        self.sock.send(req)
        out, done = [], False
        while not done:
            part, done = parse_qdiscs(self.sock.recv(65536))
            out += part
        for q in out:
            q["dev"] = self.names.get(q["ifindex"], str(q["ifindex"]))
        return out

    def close(self) -> None:
        self.sock.close()


def shapers_of(cluster: dict) -> list[tuple[str, str, str]]:
    """(name, namespace, device) of every shaper of a cluster description
    (``real.cluster.state.Cluster.to_json``): each host's own end, then the switch's."""
    out = []
    for i, ns in enumerate(cluster["namespaces"]):
        out.append((f"h{i}->switch", ns, cluster["interface"]))
        out.append((f"switch->h{i}", cluster["bridge_namespace"], f"h{i}"))
    return out


class LinkSampler:
    """Samples every shaper of a cluster until ``stop``; ``stop`` returns ``summarize``'s rows."""

    def __init__(self, cluster: dict, sample_s: float = SAMPLE_S):
        self.cluster, self.sample_s = cluster, sample_s
        self.shapers = shapers_of(cluster)
        spaces = dict.fromkeys(ns for _, ns, _ in self.shapers)
        self._ns = {ns: _Netns(ns) for ns in spaces}
        self.samples: list[tuple[float, dict]] = []
        self._stop = threading.Event()
        self._sample()
        self._thread = threading.Thread(target=self._run, name="link-sampler", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        now = time.monotonic()
        seen = {}
        for ns, net in self._ns.items():
            try:
                for q in net.qdiscs():
                    seen[(ns, q["dev"])] = q
            except OSError:
                continue
        self.samples.append((now, seen))

    def _run(self) -> None:
        while not self._stop.wait(self.sample_s):
            self._sample()

    def stop(self) -> list[dict]:
        self._stop.set()
        self._thread.join()
        self._sample()
        for net in self._ns.values():
            net.close()
        return summarize(self.samples, self.shapers, self.cluster["bandwidth_bits_per_s"])


def summarize(samples: list[tuple[float, dict]], shapers: list[tuple[str, str, str]],
              rate_bits_per_s: float, min_backlogged_s: float = MIN_BACKLOGGED_S) -> list[dict]:
    """Per shaper: bytes, packets, drops and overlimits over the window, and the rate it
    sent at over the sampling intervals that began with at least the interval's worth of
    traffic queued, as a share of ``rate_bits_per_s`` (None when those intervals add up
    to less than ``min_backlogged_s``)."""
    rows = []
    for name, ns, dev in shapers:
        series = [(t, s[(ns, dev)]) for t, s in samples if (ns, dev) in s]
        if len(series) < 2:
            continue
        first, last = series[0][1], series[-1][1]
        busy_s, busy_bytes = 0.0, 0
        for (t0, a), (t1, b) in zip(series, series[1:]):
            if a.get("backlog", 0) * 8 >= rate_bits_per_s * (t1 - t0):
                busy_s += t1 - t0
                busy_bytes += b["bytes"] - a["bytes"]
        window = series[-1][0] - series[0][0]
        rows.append({
            "name": name, "bytes": last["bytes"] - first["bytes"],
            "packets": last["packets"] - first["packets"],
            "drops": last.get("drops", 0) - first.get("drops", 0),
            "overlimits": last.get("overlimits", 0) - first.get("overlimits", 0),
            "mean_rate_share": round((last["bytes"] - first["bytes"]) * 8 / window
                                     / rate_bits_per_s, 4) if window > 0 else None,
            "backlogged_s": round(busy_s, 3),
            "backlogged_rate_share": round(busy_bytes * 8 / busy_s / rate_bits_per_s, 4)
            if busy_s >= min_backlogged_s else None})
    return rows


def start(cluster: dict | None) -> LinkSampler | None:
    """A sampler of ``cluster``'s shapers, or None (no cluster, not root, no namespaces)."""
    if not cluster or os.geteuid() != 0:
        return None
    try:
        return LinkSampler(cluster)
    except (OSError, KeyError, TypeError):
        return None
