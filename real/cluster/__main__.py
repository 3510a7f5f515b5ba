"""``python -m real.cluster up|down|status|check``: the emulated cluster from the shell.

Bad input and a missing tool or privilege are one line on stderr; an
interrupted ``up`` leaves nothing behind.

Imports: real.cluster (check, lifecycle, netns, state), cli, contracts (checks, units).
"""
from __future__ import annotations

import argparse
import ipaddress
import signal
import sys

from real.cluster import netns
from real.cluster.check import measure_bandwidth
from real.cluster.lifecycle import AlreadyUp, Terminated, _sigterm_raises, down, up
from real.cluster.netns import (DEFAULT_CONGESTION_CONTROL, DEFAULT_HOST_QUEUE_PACKETS,
                                ClusterUnavailable)
from real.cluster.state import (
    DEFAULT_PREFIX,
    DEFAULT_SUBNET,
    parse_bandwidth,
    parse_size,
    read_state,
    state_path,
)
import cli
from cli import HelpFormatter, Parser
from contracts.checks import ConfigError
from contracts.units import parse_duration


def _print_status(prefix: str) -> int:
    cluster, live = read_state(prefix), netns.list_namespaces(prefix)
    if cluster is None:
        print(f"no cluster up with prefix '{prefix}'"
              + (f" (stray namespaces: {', '.join(live)}; run down)" if live else ""))
        return 1
    print(f"cluster '{prefix}': {cluster.n_hosts} hosts, "
          f"{cluster.bandwidth_bits_per_s / 1e6:g} Mbit/s per link and direction, "
          f"burst {cluster.burst_bytes} B, queue "
          + (f"{cluster.queue_bytes} B" if cluster.queue_bytes else f"{cluster.queue_s * 1e3:g} ms")
          + ", host queue "
          + (f"{cluster.host_queue_packets} packets" if cluster.host_queue_packets
             else "the shaper's")
          + ("" if cluster.tcp_slow_start_after_idle is None
             else f", tcp_slow_start_after_idle {cluster.tcp_slow_start_after_idle}")
          + f", TCP {cluster.tcp_congestion_control or 'as the machine'}"
          + f", bridge {cluster.bridge} in {cluster.bridge_namespace}")
    for i, (ns, addr) in enumerate(zip(cluster.namespaces, cluster.addresses)):
        state = "up" if ns in live else "MISSING"
        print(f"  host {i}: {ns:<10} {addr:<15} {cluster.interface}  [{state}]  "
              f"{netns.qdisc_summary(ns, cluster.interface) if ns in live else ''}")
    if cluster.bridge_namespace in live:
        _print_drops(cluster, live)
    print(f"  state: {state_path(prefix)}")
    return 0


def _print_drops(cluster, live) -> None:
    """Packets each link's two shapers sent and dropped since the cluster came up: at the
    host's own end (its sends) and at the switch's end (what the host receives)."""
    print("  packets since up: host -> switch sent / dropped, switch -> host sent / dropped")
    totals = [0, 0, 0, 0]
    for i, ns in enumerate(cluster.namespaces):
        if ns not in live:
            continue
        out = netns.qdisc_counters(ns, cluster.interface)
        into = netns.qdisc_counters(cluster.bridge_namespace, f"h{i}")
        for k, v in enumerate(out + into):
            totals[k] += v
        print(f"  host {i}: {out[0]:>9} / {out[1]:<8} {into[0]:>9} / {into[1]}")
    share = [d / (s + d) if s + d else 0.0 for s, d in (totals[:2], totals[2:])]
    print(f"  all:    {totals[0]:>9} / {totals[1]:<8} {totals[2]:>9} / {totals[3]}   "
          f"(dropped {100 * share[0]:.1f}% at the hosts, {100 * share[1]:.1f}% at the switch)")


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


def _subnet(text: str) -> str:
    """A private IPv4 range written as a network (10.77.0.0/24), with room for 2 hosts."""
    try:
        net = ipaddress.ip_network(text, strict=True)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not a network like 10.77.0.0/24 ({e})") \
            from None
    if net.version != 4 or not net.is_private or net.num_addresses < 4:
        raise argparse.ArgumentTypeError(f"{text!r} must be a private IPv4 range with room for "
                                         "2 hosts (e.g. 10.77.0.0/24)")
    return text


def _queue(text: str) -> tuple[float | None, int | None]:
    """(queue_s, queue_bytes) from '5ms' (a time) or '256kb' (a size in bytes)."""
    try:
        return parse_duration(text), None
    except ValueError:
        pass
    try:
        size = parse_size(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a time (5ms) nor a size in "
                                         "bytes (256kb)") from None
    if not MIN_BURST_BYTES <= size <= MAX_BURST_BYTES:
        raise argparse.ArgumentTypeError(f"{text!r} is outside {MIN_BURST_BYTES} B .. 1gb")
    return None, size


def _burst(text: str):
    value = _arg(parse_size)(text)
    if value is not None and not MIN_BURST_BYTES <= value <= MAX_BURST_BYTES:
        raise argparse.ArgumentTypeError(f"{text!r} is outside {MIN_BURST_BYTES} B "
                                         f"(a full-size frame) .. 1gb")
    return value


def _congestion_control(text: str) -> str | None:
    """``--congestion-control``: a name of the kernel's list, or ``host`` (None)."""
    if text == "host":
        return None
    try:
        return netns.known_congestion_control(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


MIN_BURST_BYTES, MAX_BURST_BYTES = 2048, 2**30
MAX_HOSTS = 254                         # addresses of a /24; a larger --subnet may hold more


PROG = "python -m real.cluster"


def _parser() -> argparse.ArgumentParser:
    fmt = HelpFormatter
    p = Parser(prog=PROG, formatter_class=fmt,
               description="An emulated cluster of network namespaces.")
    sub = p.add_subparsers(dest="command", required=True)
    common = Parser(add_help=False, formatter_class=fmt)
    common.add_argument("--prefix", default=DEFAULT_PREFIX, type=cli.cluster_prefix,
                        help="names of everything created start with this")
    u = sub.add_parser("up", parents=[common], formatter_class=fmt, help="bring a cluster up")
    u.add_argument("--hosts", type=cli.int_in(2, 4094), default=2,
                   help="number of hosts (namespaces)")
    u.add_argument("--bandwidth", default="100mbit", type=_arg(parse_bandwidth),
                   help="per link and direction, tc units (100mbit, 1gbit, 500kbit)")
    u.add_argument("--queue", default="1mb", type=_queue,
                   help="each shaper's queue, the switch port's buffer: a size in bytes (tc "
                        "tbf limit, e.g. 256kb) or a time a packet may wait (tbf latency, e.g. "
                        "5ms, the default before 2026-11-27)")
    u.add_argument("--host-queue", default=DEFAULT_HOST_QUEUE_PACKETS,
                   type=cli.int_in(0, 100_000),
                   help="packets a host's own end of its link queues behind its shaper, as a "
                        "NIC queue (Linux's txqueuelen is 1000); 0: the shaper's --queue, as "
                        "at the switch")
    u.add_argument("--tcp-slow-start-after-idle", default=None, type=int, choices=(0, 1),
                   help="every host's net.ipv4.tcp_slow_start_after_idle: 1 restarts a "
                        "connection idle past its retransmission timeout from the initial "
                        "window (RFC 5681 4.1), 0 keeps its window; unset: the kernel's (1)")
    u.add_argument("--congestion-control", default=DEFAULT_CONGESTION_CONTROL, metavar="NAME",
                   type=_congestion_control,
                   help="every host's TCP congestion control, one the kernel has (default: "
                        "cubic, Linux's own); host: whatever the machine runs")
    u.add_argument("--burst", default="auto", type=_burst,
                   help="token-bucket depth, tc units (64kb); auto: 2 ms of traffic, >= 16kb")
    u.add_argument("--subnet", default=DEFAULT_SUBNET, type=_subnet,
                   help="private range, used only inside the namespaces")
    sub.add_parser("down", parents=[common], formatter_class=fmt, help="tear it down")
    sub.add_parser("status", parents=[common], formatter_class=fmt, help="describe it")
    c = sub.add_parser("check", parents=[common], formatter_class=fmt,
                       help="measure TCP throughput between two hosts")
    c.add_argument("--src", type=cli.nonnegative_int, default=0, help="sending host")
    c.add_argument("--dst", type=cli.nonnegative_int, default=1, help="receiving host")
    c.add_argument("--seconds", type=cli.float_in(0.1, 3600), default=1.5,
                   help="how long to send")
    return p


def _problem(args) -> str | None:
    """What the parser cannot see alone: a subnet too small for the hosts, a check between
    hosts the cluster does not have, a cluster that is (or is not) up."""
    if args.command == "up":
        room = ipaddress.ip_network(args.subnet).num_addresses - 2
        if args.hosts > room:
            return f"--subnet {args.subnet} has room for {room} hosts, not --hosts {args.hosts}"
    if args.command == "check":
        cluster = read_state(args.prefix)
        if cluster is None:
            return f"no cluster up with prefix '{args.prefix}'; run 'python -m real.cluster up'"
        for flag, host in (("--src", args.src), ("--dst", args.dst)):
            if host >= cluster.n_hosts:
                return f"{flag} {host}: the cluster has hosts 0..{cluster.n_hosts - 1}"
        if args.src == args.dst:
            return f"--src and --dst are both host {args.src}"
    return None


def main(argv: list[str] | None = None) -> int:
    return cli.command(PROG, _parser().parse_args, run, argv, (ClusterUnavailable, AlreadyUp))


def run(args) -> int:
    """One subcommand. What the flags say together, a missing tool or privilege and a
    cluster already up are usage errors (exit code 2); a failing ``ip`` or ``tc`` is 1."""
    netns.require_tools()
    try:
        problem = _problem(args)
    except ValueError as e:                     # a state file this code cannot read
        problem = str(e)
    if problem:
        raise ConfigError(problem)
    try:
        if args.command == "down":
            removed = down(args.prefix)
            print(f"removed {', '.join(removed)}" if removed else "nothing to remove")
            return 0
        if args.command == "up":
            with _sigterm_raises():
                cluster = up(args.hosts, args.bandwidth, args.burst, args.prefix, args.subnet,
                             *args.queue[:1], args.host_queue, args.queue[1],
                             args.tcp_slow_start_after_idle, args.congestion_control)
            return _print_status(cluster.prefix)
        if args.command == "status":
            return _print_status(args.prefix)
        return _check(args)
    except (ClusterUnavailable, AlreadyUp):
        raise
    except (ValueError, RuntimeError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; nothing left behind", file=sys.stderr)
        return 128 + signal.SIGINT
    except Terminated:
        print(f"{PROG}: terminated; nothing left behind", file=sys.stderr)
        return 128 + signal.SIGTERM


def _check(args) -> int:
    cluster = read_state(args.prefix)
    m = measure_bandwidth(cluster, args.src, args.dst, seconds=args.seconds)
    asked = cluster.bandwidth_bits_per_s
    print(f"host {args.src} -> host {args.dst}: asked {asked / 1e6:.1f} Mbit/s, "
          f"measured {m.goodput_bits_per_s / 1e6:.1f} Mbit/s TCP payload "
          f"({m.goodput_bits_per_s / asked:.1%}; on the wire ~{m.wire_bits_per_s / 1e6:.1f} Mbit/s) "
          f"over {m.seconds:.2f} s, {m.bytes} B")
    return 0


if __name__ == "__main__":
    sys.exit(main())
