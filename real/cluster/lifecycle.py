"""Bring an emulated cluster up and tear it down, leaving nothing behind.

``up`` builds the namespaces, links and shapers (``netns``) and writes the
state file (``state``); ``down`` removes everything with the prefix;
``emulated_cluster`` is both around a ``with`` block, torn down however the
block ends (exception, Ctrl-C, or SIGTERM from the main thread).

Imports: real.cluster (launch, netns, state).
"""
from __future__ import annotations

import ipaddress
import json
import re
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from real.cluster import netns
from real.cluster.launch import write_hydra_launcher
from real.cluster.state import (
    DEFAULT_PREFIX,
    DEFAULT_SUBNET,
    STATE_DIR,
    Cluster,
    default_burst_bytes,
    parse_bandwidth,
    parse_size,
    state_path,
    write_atomically,
)


class AlreadyUp(RuntimeError):
    """A cluster with this prefix exists: a usage error, not a failure."""


class Terminated(BaseException):
    """SIGTERM arrived; raised like KeyboardInterrupt so every finally runs."""


@contextmanager
def _sigterm_raises() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Terminated(signum)
    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def up(hosts: int, bandwidth: str | int, burst: str | int | None = None,
       prefix: str = DEFAULT_PREFIX, subnet: str = DEFAULT_SUBNET,
       queue_s: float | None = None,
       host_queue_packets: int = netns.DEFAULT_HOST_QUEUE_PACKETS,
       queue_bytes: int | None = None,
       slow_start_after_idle: int | None = None,
       congestion_control: str | None = netns.DEFAULT_CONGESTION_CONTROL) -> Cluster:
    """Build the cluster and write its state file.  Anything half-built is removed
    before an error (or Ctrl-C, or SIGTERM) propagates. Each shaper's queue is
    ``queue_bytes``, or ``queue_s`` of traffic, or (neither given) the switch-like
    ``netns.DEFAULT_QUEUE_BYTES``. ``slow_start_after_idle`` 0 or 1 sets every host's
    ``net.ipv4.tcp_slow_start_after_idle`` (None: the kernel's default);
    ``congestion_control`` every host's TCP congestion control (None: the machine's)."""
    netns.require_tools()
    if hosts < 2:
        raise ValueError("a cluster needs at least 2 hosts")
    if not re.fullmatch(r"[a-z][a-z0-9]{0,15}", prefix):
        raise ValueError(f"prefix {prefix!r}: lower-case letters and digits, at most 16")
    rate = bandwidth if isinstance(bandwidth, int) else parse_bandwidth(bandwidth)
    burst_bytes = (default_burst_bytes(rate) if burst is None
                   else burst if isinstance(burst, int) else parse_size(burst))
    if burst_bytes < 2048:
        raise ValueError(f"burst {burst_bytes} B is less than a full-size frame")
    if queue_s is not None and queue_bytes is not None:
        raise ValueError("give the queue as a time or as a size, not both")
    queue_bytes = queue_bytes if queue_bytes is not None else \
        0 if queue_s is not None else netns.DEFAULT_QUEUE_BYTES
    queue_s = netns.DEFAULT_QUEUE_S if queue_s is None else queue_s
    if not 0.0005 <= queue_s <= 1.0:
        raise ValueError(f"queue {queue_s * 1e3:g} ms is outside 0.5 ms .. 1 s")
    if not 0 <= host_queue_packets <= 100_000:
        raise ValueError(f"host queue {host_queue_packets} packets is outside 0 .. 100000")
    if slow_start_after_idle not in (None, 0, 1):
        raise ValueError(f"slow start after idle {slow_start_after_idle!r} is neither 0 nor 1")
    if queue_bytes and not 2048 <= queue_bytes <= 2**30:
        raise ValueError(f"queue {queue_bytes} B is outside 2kb (a full-size frame) .. 1gb")
    addresses = netns.host_addresses(subnet, hosts)
    if netns.list_namespaces(prefix):
        raise AlreadyUp(f"a cluster with prefix '{prefix}' is already up; "
                           f"run 'python -m real.cluster down --prefix {prefix}' first")
    cluster = Cluster(
        prefix=prefix,
        namespaces=tuple(netns.host_namespace(prefix, i) for i in range(hosts)),
        addresses=addresses, interface=netns.HOST_IFACE, subnet=subnet,
        bridge_namespace=netns.bridge_namespace(prefix), bridge=netns.BRIDGE,
        bandwidth_bits_per_s=rate, burst_bytes=burst_bytes,
        hydra_launcher=str(STATE_DIR / f"{prefix}-cluster-hydra-launcher"), queue_s=queue_s,
        host_queue_packets=host_queue_packets, queue_bytes=queue_bytes,
        tcp_slow_start_after_idle=slow_start_after_idle,
        tcp_congestion_control=congestion_control)
    with _sigterm_raises():
        try:
            netns.create(prefix, addresses, ipaddress.ip_network(subnet).prefixlen,
                         rate, burst_bytes, queue_s, host_queue_packets, queue_bytes,
                         slow_start_after_idle, congestion_control)
            write_hydra_launcher(cluster)
            write_atomically(state_path(prefix), json.dumps(cluster.to_json(), indent=2) + "\n")
        except BaseException:
            down(prefix)
            raise
    return cluster


def down(prefix: str = DEFAULT_PREFIX) -> list[str]:
    """Remove everything with the prefix; idempotent.  Returns the namespaces removed."""
    netns.require_tools()
    with netns.signals_deferred():
        removed = netns.destroy(prefix)
        state_path(prefix).unlink(missing_ok=True)
        Path(STATE_DIR / f"{prefix}-cluster-hydra-launcher").unlink(missing_ok=True)
    return removed


@contextmanager
def emulated_cluster(hosts: int, bandwidth: str | int, burst: str | int | None = None,
                     prefix: str = DEFAULT_PREFIX, subnet: str = DEFAULT_SUBNET,
                     queue_s: float | None = None,
                     host_queue_packets: int = netns.DEFAULT_HOST_QUEUE_PACKETS,
                     queue_bytes: int | None = None,
                     slow_start_after_idle: int | None = None,
                     congestion_control: str | None = netns.DEFAULT_CONGESTION_CONTROL,
                     ) -> Iterator[Cluster]:
    """``with emulated_cluster(2, "100mbit") as c:`` -- torn down however the block ends
    (exception, Ctrl-C, or SIGTERM when used from the main thread)."""
    with _sigterm_raises():
        cluster = up(hosts, bandwidth, burst, prefix=prefix, subnet=subnet, queue_s=queue_s,
                     host_queue_packets=host_queue_packets, queue_bytes=queue_bytes,
                     slow_start_after_idle=slow_start_after_idle,
                     congestion_control=congestion_control)
        try:
            yield cluster
        finally:
            down(prefix)
