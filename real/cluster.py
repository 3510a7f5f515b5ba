"""A small real cluster on one machine: hosts as network namespaces behind a shaped switch.

On one machine the schemes share memory and communication is almost free, so
a measured run says little about a cluster.  This module builds one to measure
on: each *host* is a Linux network namespace with one veth link to a bridge
(the *switch*, in a namespace of its own), and each link is limited with a tc
token bucket to ``bandwidth_bits_per_s`` in both directions.  Link latency is
what the kernel gives between namespaces (tens of microseconds): ``netem`` is
not available in this kernel, so no delay is added.  All hosts share the
machine's cores and memory; only the network is emulated.

Commands (root and iproute2 needed)::

    python -m real.cluster up --hosts 4 --bandwidth 100mbit
    python -m real.cluster status
    python -m real.cluster check          # TCP throughput host 0 -> host 1
    python -m real.cluster down

From Python, ``with emulated_cluster(2, "100mbit") as cluster:`` brings one up
and always tears it down.  ``real.cluster_launch`` turns a description into
commands (``netns_command``, ``mpirun_command``, ``torch_env``); the current
cluster's description is kept in ``/run/<prefix>-cluster.json`` for them.
The plumbing is in ``real.cluster_netns``, the throughput probe in
``real.cluster_check``.
"""
from __future__ import annotations

import argparse
import ipaddress
import json
import os
import re
import signal
import sys
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

from real import cluster_netns as netns
from real.cluster_netns import ClusterUnavailable

SCHEMA_VERSION = 1
DEFAULT_PREFIX = "psgd"
DEFAULT_SUBNET = "10.77.0.0/24"
STATE_DIR = Path("/run")


@dataclass(frozen=True)
class Cluster:
    """What ``up`` built; enough for any launcher to place processes on it."""
    prefix: str
    namespaces: tuple[str, ...]      # host i runs in namespaces[i]
    addresses: tuple[str, ...]       # host i's IPv4 address on its link
    interface: str                   # the link's name inside every host namespace
    subnet: str
    bridge_namespace: str
    bridge: str
    bandwidth_bits_per_s: int        # per link and direction
    burst_bytes: int                 # token-bucket depth
    hydra_launcher: str              # script that lets mpiexec "ssh" into a namespace
    schema_version: int = SCHEMA_VERSION

    @property
    def n_hosts(self) -> int:
        return len(self.namespaces)

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.bandwidth_bits_per_s / 8

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "Cluster":
        if d.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"cluster state has schema_version {d.get('schema_version')!r}, "
                             f"this code reads {SCHEMA_VERSION}")
        d = dict(d)
        for key in ("namespaces", "addresses"):
            d[key] = tuple(d[key])
        return cls(**d)


# --- units, parsed like tc(8) -------------------------------------------------

_SI = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_IEC = {"ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


def parse_bandwidth(text: str) -> int:
    """'100mbit' -> 100_000_000 bits/s.  Units as in tc: bit (or none), kbit, mbit,
    gbit, tbit; bps, kbps, mbps, gbps, tbps are *bytes* per second; kibit, mibps, ...
    are powers of 1024."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmgt]i?)?(bit|bps)?\s*", text.lower())
    if not m:
        raise ValueError(f"bandwidth {text!r} is not a rate like 100mbit, 1gbit or 500kbit")
    value, scale, unit = float(m.group(1)), m.group(2) or "", m.group(3) or "bit"
    bits = value * (_IEC.get(scale) or _SI[scale]) * (8 if unit == "bps" else 1)
    if not 8_000 <= bits <= 100e9:
        raise ValueError(f"bandwidth {text!r} = {bits:.0f} bit/s is outside 8kbit..100gbit")
    return int(round(bits))


def parse_size(text: str) -> int:
    """'32kb' -> 32768 bytes.  Units as in tc: b (or none), k/kb, m/mb, g/gb are
    bytes in powers of 1024; kbit, mbit, gbit are bits."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(b|k|kb|m|mb|g|gb|kbit|mbit|gbit)?\s*", text.lower())
    if not m:
        raise ValueError(f"size {text!r} is not a size like 64kb, 1mb or 20000")
    value, unit = float(m.group(1)), m.group(2) or "b"
    scale = {"b": 1, "k": 2**10, "kb": 2**10, "m": 2**20, "mb": 2**20, "g": 2**30, "gb": 2**30,
             "kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8}[unit]
    return int(round(value * scale))


def default_burst_bytes(bandwidth_bits_per_s: int) -> int:
    """Bucket depth: 2 ms of traffic, at least 16 KiB (a few full-size frames).

    Too small a bucket and TCP can't reach the rate; too large and the first
    burst of every message crosses at memory speed."""
    return max(16 * 1024, int(bandwidth_bits_per_s / 8 * 0.002))


# --- state file ------------------------------------------------------------------

def state_path(prefix: str = DEFAULT_PREFIX) -> Path:
    return STATE_DIR / f"{prefix}-cluster.json"


def _write_atomically(path: Path, text: str, mode: int = 0o644) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_state(prefix: str = DEFAULT_PREFIX) -> Cluster | None:
    """The cluster that ``up`` left running, or None."""
    path = state_path(prefix)
    if not path.exists():
        return None
    return Cluster.from_json(json.loads(path.read_text()))


# --- bring-up and tear-down ----------------------------------------------------------

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
       prefix: str = DEFAULT_PREFIX, subnet: str = DEFAULT_SUBNET) -> Cluster:
    """Build the cluster and write its state file.  Anything half-built is removed
    before an error (or Ctrl-C, or SIGTERM) propagates."""
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
    addresses = netns.host_addresses(subnet, hosts)
    if netns.list_namespaces(prefix):
        raise RuntimeError(f"a cluster with prefix '{prefix}' is already up; "
                           f"run 'python -m real.cluster down --prefix {prefix}' first")
    from real.cluster_launch import write_hydra_launcher
    cluster = Cluster(
        prefix=prefix,
        namespaces=tuple(netns.host_namespace(prefix, i) for i in range(hosts)),
        addresses=addresses, interface=netns.HOST_IFACE, subnet=subnet,
        bridge_namespace=netns.bridge_namespace(prefix), bridge=netns.BRIDGE,
        bandwidth_bits_per_s=rate, burst_bytes=burst_bytes,
        hydra_launcher=str(STATE_DIR / f"{prefix}-cluster-hydra-launcher"))
    with _sigterm_raises():
        try:
            netns.create(prefix, addresses, ipaddress.ip_network(subnet).prefixlen,
                         rate, burst_bytes)
            write_hydra_launcher(cluster)
            _write_atomically(state_path(prefix), json.dumps(cluster.to_json(), indent=2) + "\n")
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
                     prefix: str = DEFAULT_PREFIX, subnet: str = DEFAULT_SUBNET
                     ) -> Iterator[Cluster]:
    """``with emulated_cluster(2, "100mbit") as c:`` -- torn down however the block ends
    (exception, Ctrl-C, or SIGTERM when used from the main thread)."""
    with _sigterm_raises():
        cluster = up(hosts, bandwidth, burst, prefix=prefix, subnet=subnet)
        try:
            yield cluster
        finally:
            down(prefix)


# --- command line ------------------------------------------------------------------

def _print_status(prefix: str) -> int:
    cluster, live = read_state(prefix), netns.list_namespaces(prefix)
    if cluster is None:
        print(f"no cluster up with prefix '{prefix}'"
              + (f" (stray namespaces: {', '.join(live)}; run down)" if live else ""))
        return 1
    print(f"cluster '{prefix}': {cluster.n_hosts} hosts, "
          f"{cluster.bandwidth_bits_per_s / 1e6:g} Mbit/s per link and direction, "
          f"burst {cluster.burst_bytes} B, bridge {cluster.bridge} in {cluster.bridge_namespace}")
    for i, (ns, addr) in enumerate(zip(cluster.namespaces, cluster.addresses)):
        state = "up" if ns in live else "MISSING"
        print(f"  host {i}: {ns:<10} {addr:<15} {cluster.interface}  [{state}]  "
              f"{netns.qdisc_summary(ns, cluster.interface) if ns in live else ''}")
    print(f"  state: {state_path(prefix)}")
    return 0


def _arg(parse):
    """An argparse type from a parser: its ValueError message becomes the usage error."""
    def convert(text: str):
        if text == "auto":
            return None
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    convert.__name__ = parse.__name__
    return convert


def _parser() -> argparse.ArgumentParser:
    fmt = argparse.ArgumentDefaultsHelpFormatter
    p = argparse.ArgumentParser(prog="python -m real.cluster", formatter_class=fmt,
                                description="An emulated cluster of network namespaces.")
    sub = p.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False, formatter_class=fmt)
    common.add_argument("--prefix", default=DEFAULT_PREFIX,
                        help="names of everything created start with this")
    u = sub.add_parser("up", parents=[common], formatter_class=fmt, help="bring a cluster up")
    u.add_argument("--hosts", type=int, default=2, help="number of hosts (namespaces)")
    u.add_argument("--bandwidth", default="100mbit", type=_arg(parse_bandwidth),
                   help="per link and direction, tc units (100mbit, 1gbit, 500kbit)")
    u.add_argument("--burst", default="auto", type=_arg(parse_size),
                   help="token-bucket depth, tc units (64kb); auto: 2 ms of traffic, >= 16kb")
    u.add_argument("--subnet", default=DEFAULT_SUBNET,
                   help="private range, used only inside the namespaces")
    sub.add_parser("down", parents=[common], formatter_class=fmt, help="tear it down")
    sub.add_parser("status", parents=[common], formatter_class=fmt, help="describe it")
    c = sub.add_parser("check", parents=[common], formatter_class=fmt,
                       help="measure TCP throughput between two hosts")
    c.add_argument("--src", type=int, default=0, help="sending host")
    c.add_argument("--dst", type=int, default=1, help="receiving host")
    c.add_argument("--seconds", type=float, default=1.5, help="how long to send")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        netns.require_tools()
        if args.command == "down":
            removed = down(args.prefix)
            print(f"removed {', '.join(removed)}" if removed else "nothing to remove")
            return 0
        if args.command == "up":
            with _sigterm_raises():
                cluster = up(args.hosts, args.bandwidth, args.burst, args.prefix, args.subnet)
            return _print_status(cluster.prefix)
        if args.command == "status":
            return _print_status(args.prefix)
        if args.command == "check":
            return _check(args)
    except ClusterUnavailable as e:
        print(f"real.cluster: {e}", file=sys.stderr)
        return 2
    except (ValueError, RuntimeError) as e:
        print(f"real.cluster: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("real.cluster: interrupted; nothing left behind", file=sys.stderr)
        return 128 + signal.SIGINT
    except Terminated:
        print("real.cluster: terminated; nothing left behind", file=sys.stderr)
        return 128 + signal.SIGTERM
    return 1


def _check(args) -> int:
    from real.cluster_check import measure_bandwidth
    cluster = read_state(args.prefix)
    if cluster is None:
        print(f"no cluster up with prefix '{args.prefix}'; run 'python -m real.cluster up'")
        return 1
    m = measure_bandwidth(cluster, args.src, args.dst, seconds=args.seconds)
    asked = cluster.bandwidth_bits_per_s
    print(f"host {args.src} -> host {args.dst}: asked {asked / 1e6:.1f} Mbit/s, "
          f"measured {m.goodput_bits_per_s / 1e6:.1f} Mbit/s TCP payload "
          f"({m.goodput_bits_per_s / asked:.1%}; on the wire ~{m.wire_bits_per_s / 1e6:.1f} Mbit/s) "
          f"over {m.seconds:.2f} s, {m.bytes} B")
    return 0


# Launch helpers live next door; importing them here makes real.cluster the one entry point.
from real.cluster_launch import mpi_env, mpirun_command, netns_command, torch_env, torchrun_command  # noqa: E402,F401

if __name__ == "__main__":
    sys.exit(main())
