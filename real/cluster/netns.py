"""Plumbing of the emulated cluster: Linux network namespaces, a bridge, veth pairs, tc.

Topology for ``prefix="psgd"`` and three hosts::

    netns psgd-h0          netns psgd-br             netns psgd-h1
    [psgd0 10.77.0.1] ---- [h0]--+                +--[h1] ---- [psgd1 ...]
      tbf egress            tbf  |  br0 (bridge)  |  tbf          tbf egress
                                 +------[h2]------+
                                          |
                                 [psgd0 10.77.0.3]  netns psgd-h2

Every host link is shaped in both directions with a token bucket (``tbf``):
the host's own veth end limits what it sends, the bridge-side end limits what
it receives, so each link is full duplex at the asked rate.  Each shaper holds
``queue_bytes`` (1 MiB by default), like a switch port's buffer, or ``queue_s`` of
traffic when no size is given.  With ``host_queue_packets``
the host's own end queues that many packets behind its shaper instead, as a
NIC queue does (Linux's ``txqueuelen`` is 1000): the host then drops none of
what its TCP sends, where the 5 ms queue drops 4-34% of it at 20-100 Mbit/s
(TCP hands over GSO bursts of up to 64 kB), and TCP Small Queues keep a bulk
stream's backlog there at 13-29 kB (docs/cluster.md, "The host's own queue").
The bridge lives in its own namespace and nothing is attached to the root
namespace: the machine's own network is never touched and no packet can leave
the namespaces. Every host runs the TCP congestion control asked for
(``DEFAULT_CONGESTION_CONTROL``, CUBIC, Linux's default) rather than inheriting the
machine's: a machine set to BBR (as this project's VM is) would otherwise give every
host BBR, which held a parameter server's answers back while the workers' pushes streamed
in, where CUBIC did not (docs/cluster.md, "TCP congestion control"). The one machine setting
touched is the list of algorithms namespaces may choose (``allow_congestion_control``).

Everything this module creates carries the prefix, so ``destroy(prefix)`` can
find and remove all of it, whatever state a failed bring-up left behind.
Only ``ip`` and ``tc`` (iproute2) are called; no state is kept here.

Imports: the standard library only (it runs ``ip`` and ``tc``).
"""
from __future__ import annotations

import ipaddress
import os
import re
import shutil
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

# The veth end inside every host namespace has this name, so one setting
# (FI_TCP_IFACE, GLOO_SOCKET_IFNAME) fits every rank.
HOST_IFACE = "psgd0"
BRIDGE = "br0"
# A host's own queue behind its shaper, in packets (0: the shaper's queue_s, as a port)
DEFAULT_HOST_QUEUE_PACKETS = 0
# A shaper's queue given as a time (tbf's "latency"), when one is asked for: 5 ms
# kept TCP at the rate in both directions of a two-way exchange, but drops 4-34% of
# what a host sends (docs/cluster.md, "Switch-like buffers").
DEFAULT_QUEUE_S = 0.005
# The default queue, in bytes like a switch port's buffer (tbf's "limit"): more than a
# bandwidth-delay product at these rates (125 kB at 1 Gbit/s and a 1 ms round trip)
# plus a burst: a 64 KiB GSO segment from each of 16 flows into one port. Measured at
# P = 8, 20 and 100 Mbit/s: no drops at the hosts, 0-0.7% at the switch and no TCP
# retransmission timeout, where 5 ms dropped 4-34% and stalled gather_scatter,
# ps_sync and mpi_allreduce (docs/cluster.md, "Switch-like buffers").
DEFAULT_QUEUE_BYTES = 1 << 20
DEFAULT_CONGESTION_CONTROL = "cubic"   # Linux's default since 2.6.19


class ClusterUnavailable(RuntimeError):
    """This machine cannot host the emulated cluster (not root, no iproute2)."""


def require_tools() -> None:
    """Raise ClusterUnavailable with a one-line reason unless we can build a cluster."""
    if os.geteuid() != 0:
        raise ClusterUnavailable("the emulated cluster needs root (network namespaces); "
                                 "run as root, e.g. with sudo")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise ClusterUnavailable(f"'{tool}' not found; install iproute2 "
                                     "(apt-get install iproute2)")


def bridge_namespace(prefix: str) -> str:
    return f"{prefix}-br"


def host_namespace(prefix: str, i: int) -> str:
    return f"{prefix}-h{i}"


def host_addresses(subnet: str, n_hosts: int) -> tuple[str, ...]:
    """The first n usable addresses of a private subnet, host i gets the (i+1)-th."""
    net = ipaddress.ip_network(subnet, strict=True)
    if net.version != 4 or not net.is_private:
        raise ValueError(f"subnet {subnet} must be a private IPv4 range (e.g. 10.77.0.0/24)")
    if n_hosts > net.num_addresses - 2:
        raise ValueError(f"subnet {subnet} has room for {net.num_addresses - 2} hosts, "
                         f"not {n_hosts}")
    return tuple(str(net.network_address + 1 + i) for i in range(n_hosts))


def list_namespaces(prefix: str) -> list[str]:
    """Namespaces that belong to a cluster with this prefix (bridge and hosts)."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                         check=False).stdout
    pattern = re.compile(rf"^{re.escape(prefix)}-(br|h\d+)$")
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    return sorted((n for n in names if pattern.match(n)), key=_host_order)


def _host_order(name: str) -> tuple[int, int]:
    m = re.search(r"-h(\d+)$", name)
    return (0, int(m.group(1))) if m else (1, 0)


def _run(*argv: str) -> None:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate()
    except BaseException:
        # Interrupted: reap the child before tear-down lists what exists, or an
        # ``ip netns add`` still in flight could create a namespace after the list.
        proc.kill()
        proc.wait()
        raise
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {err.strip() or proc.returncode}")


def shaper_command(ns: str, dev: str, bandwidth_bits_per_s: int, burst_bytes: int,
                   queue_s: float, queue_bytes: int = 0) -> list[str]:
    """The tc command of one shaper: a token bucket at the rate whose queue holds
    ``queue_bytes`` (tbf ``limit``, as a switch port's buffer in bytes) or, with 0,
    ``queue_s`` of traffic (tbf ``latency``)."""
    size = ["limit", str(queue_bytes)] if queue_bytes else ["latency", f"{queue_s * 1e6:.0f}us"]
    return ["tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "handle", "1:", "tbf",
            "rate", f"{bandwidth_bits_per_s}bit", "burst", str(burst_bytes), *size]


def _shape(ns: str, dev: str, bandwidth_bits_per_s: int, burst_bytes: int,
           queue_s: float, queue_packets: int = 0, queue_bytes: int = 0) -> None:
    """A token bucket at the rate; its queue holds ``queue_bytes`` (or ``queue_s`` of
    traffic), or with ``queue_packets`` a FIFO of that many packets (tbf's child) instead."""
    _run(*shaper_command(ns, dev, bandwidth_bits_per_s, burst_bytes, queue_s, queue_bytes))
    if queue_packets:
        _run("tc", "-n", ns, "qdisc", "replace", "dev", dev, "parent", "1:1", "handle", "10:",
             "pfifo", "limit", str(queue_packets))


def _no_ipv6(ns: str) -> None:
    # IPv6 router solicitations and DAD would be stray traffic on shaped links.
    for key in ("all", "default"):
        with open(os.devnull, "w") as null:
            subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw",
                            f"net.ipv6.conf.{key}.disable_ipv6=1"],
                           stdout=null, stderr=null, check=False)


def tcp_setting(ns: str, key: str, value: int | str) -> None:
    """One of a host namespace's own TCP settings (``net.ipv4.*`` keys live per namespace
    since Linux 4.15), e.g. ``tcp_slow_start_after_idle``; raises if the kernel refuses."""
    _run("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv4.{key}={value}")


IPV4 = Path("/proc/sys/net/ipv4")


def available_congestion_controls(ipv4: Path = IPV4) -> list[str]:
    """The TCP congestion controls this kernel has (built in or loaded)."""
    return (ipv4 / "tcp_available_congestion_control").read_text().split()


def known_congestion_control(name: str, ipv4: Path = IPV4) -> str:
    """``name``, or ValueError (one line naming those there are) where the kernel lacks it."""
    available = available_congestion_controls(ipv4)
    if name not in available:
        raise ValueError(f"TCP congestion control {name!r} is not in this kernel (it has "
                         f"{', '.join(available)}); pick one of them, or 'host'")
    return name


def allow_congestion_control(name: str, ipv4: Path = IPV4) -> None:
    """Let namespaces pick TCP congestion control ``name``: a namespace other than the
    machine's may only choose from ``tcp_allowed_congestion_control``, a setting of the
    machine alone, so ``name`` is added to it where missing (the machine's own default,
    ``tcp_congestion_control``, is left as it is). Raises ValueError for a name the kernel
    does not have (``known_congestion_control``)."""
    known_congestion_control(name, ipv4)
    allowed = (ipv4 / "tcp_allowed_congestion_control").read_text().split()
    if name not in allowed:
        (ipv4 / "tcp_allowed_congestion_control").write_text(" ".join([*allowed, name]))


def create(prefix: str, addresses: tuple[str, ...], prefixlen: int,
           bandwidth_bits_per_s: int, burst_bytes: int, queue_s: float = DEFAULT_QUEUE_S,
           host_queue_packets: int = DEFAULT_HOST_QUEUE_PACKETS,
           queue_bytes: int = DEFAULT_QUEUE_BYTES,
           slow_start_after_idle: int | None = None,
           congestion_control: str | None = None) -> None:
    """Build bridge, hosts, links and shaping; with ``slow_start_after_idle`` 0 or 1, every
    host's ``net.ipv4.tcp_slow_start_after_idle`` (None: the kernel's default, 1); with
    ``congestion_control``, every host's TCP congestion control (None: the machine's).  On
    any failure the caller must destroy()."""
    if congestion_control is not None:
        allow_congestion_control(congestion_control)
    br = bridge_namespace(prefix)
    _run("ip", "netns", "add", br)
    _no_ipv6(br)
    _run("ip", "-n", br, "link", "set", "lo", "up")
    _run("ip", "-n", br, "link", "add", BRIDGE, "type", "bridge", "stp_state", "0")
    _run("ip", "-n", br, "link", "set", BRIDGE, "up")
    for i, addr in enumerate(addresses):
        ns, port = host_namespace(prefix, i), f"h{i}"
        _run("ip", "netns", "add", ns)
        _no_ipv6(ns)
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        if slow_start_after_idle is not None:
            tcp_setting(ns, "tcp_slow_start_after_idle", slow_start_after_idle)
        if congestion_control is not None:
            tcp_setting(ns, "tcp_congestion_control", congestion_control)
        # Both ends are born in their namespaces: nothing appears in the root namespace.
        _run("ip", "-n", br, "link", "add", port, "type", "veth",
             "peer", "name", HOST_IFACE, "netns", ns)
        _run("ip", "-n", br, "link", "set", port, "master", BRIDGE)
        _run("ip", "-n", br, "link", "set", port, "up")
        _run("ip", "-n", ns, "addr", "add", f"{addr}/{prefixlen}", "dev", HOST_IFACE)
        _run("ip", "-n", ns, "link", "set", HOST_IFACE, "up")
        _shape(ns, HOST_IFACE, bandwidth_bits_per_s, burst_bytes, queue_s,   # host -> switch
               host_queue_packets, queue_bytes)
        _shape(br, port, bandwidth_bits_per_s, burst_bytes, queue_s,         # switch -> host
               queue_bytes=queue_bytes)


@contextmanager
def signals_deferred():
    """Hold SIGINT/SIGTERM until the block is done, so a second Ctrl-C can't cut a tear-down
    short."""
    sigs = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def destroy(prefix: str) -> list[str]:
    """Remove every namespace with the prefix (and with it every veth and qdisc).

    Processes still running inside them are terminated first: a namespace with a
    live process outlives ``ip netns del``.  Idempotent; returns what was removed.
    """
    removed: list[str] = []
    with signals_deferred():
        for _ in range(5):
            names = list_namespaces(prefix)
            if not names:
                break
            _terminate_processes(names)
            for ns in names:
                subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
            removed += [n for n in names if n not in removed]
        else:
            raise RuntimeError(f"could not remove {', '.join(names)}")
        return removed


def _terminate_processes(namespaces: list[str], grace_s: float = 1.0) -> None:
    pids = set()
    for ns in namespaces:
        out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True,
                             check=False).stdout
        pids.update(int(p) for p in out.split() if p.isdigit() and int(p) != os.getpid())
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in list(pids):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pids.discard(pid)
        deadline = time.monotonic() + grace_s
        while pids and time.monotonic() < deadline:
            pids = {p for p in pids if os.path.exists(f"/proc/{p}")}
            time.sleep(0.05)
        if not pids:
            return


def qdisc_counters(ns: str, dev: str) -> tuple[int, int]:
    """(packets sent, packets dropped) by a device's shaper since it was made: the root
    qdisc's counters, which include what its child queue dropped."""
    out = subprocess.run(["tc", "-s", "-n", ns, "qdisc", "show", "dev", dev],
                         capture_output=True, text=True, check=False).stdout
    m = re.search(r"Sent \d+ bytes (\d+) pkt \(dropped (\d+),", out)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def qdisc_summary(ns: str, dev: str) -> str:
    """One line of ``tc qdisc show`` for a device, for status output."""
    out = subprocess.run(["tc", "-n", ns, "qdisc", "show", "dev", dev], capture_output=True,
                         text=True, check=False).stdout.strip()
    return out.splitlines()[0] if out else "(no qdisc)"
