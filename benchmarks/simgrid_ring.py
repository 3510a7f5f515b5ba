"""The ring allreduce of P ranks on a star network, simulated by SimGrid (a peer check).

Run with the Python that has SimGrid's bindings (Debian: ``apt-get install
python3-simgrid``, then ``/usr/bin/python3 benchmarks/simgrid_ring.py 64 40e6``), from a
checkout: the project need not be installed there (its ``cli`` is read from the checkout;
it needs the standard library alone).
Every host has its own full-duplex link to a non-blocking switch
(``SPLITDUPLEX`` private links of a ``<cluster>`` without a backbone), at
``--bandwidth`` (``10gbit``, ``1.25GB/s``). SimGrid charges a link's latency on each link a
message crosses (two: up and down), so each link gets half of the one-way
latency the project's simulator charges per message. The CM02 network model
without cross-traffic (by default SimGrid lets the TCP acknowledgements of a
flow take 5% of the opposite direction) makes both simulators compute the
same max-min sharing; the simulated times agree exactly. Prints: P, bytes,
simulated seconds, wall seconds (the actors' creation and the run). Without SimGrid's
bindings: one line on stderr, exit code 2.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))    # the checkout's cli
import cli  # noqa: E402
from contracts.checks import ConfigError  # noqa: E402

PROG = "python3 benchmarks/simgrid_ring.py"

PLATFORM = """<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">
<platform version="4.1">
  <cluster id="star" prefix="node-" suffix="" radical="0-{last}" speed="1Gf"
           bw="{bw}Bps" lat="{half_lat}s" sharing_policy="SPLITDUPLEX"
           loopback_bw="1e15Bps" loopback_lat="0s"/>
</platform>
"""


def ring_rank(i: int, p: int, n_bytes: float) -> None:
    from simgrid import Mailbox
    right, mine = Mailbox.by_name(f"rank-{(i + 1) % p}"), Mailbox.by_name(f"rank-{i}")
    chunk = n_bytes / p
    for step in range(2 * (p - 1)):
        sent = right.put_async(step, int(chunk))
        mine.get()
        sent.wait()


def build_parser() -> cli.Parser:
    p = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("p", type=cli.positive_int, help="ranks of the ring, one a host")
    p.add_argument("n_bytes", type=cli.positive_float, help="bytes each rank reduces")
    p.add_argument("--bandwidth", type=cli.bandwidth, default=1.25e9,
                   help="payload rate of each host's link and direction, e.g. 10gbit "
                        "(default in bytes/s)")
    p.add_argument("--latency", type=cli.duration, default=20e-6,
                   help="one-way latency of a message, e.g. 20us (default in s)")
    return p


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


def run(args) -> int:
    try:
        from simgrid import Actor, Engine, Host
    except ImportError:
        raise ConfigError("SimGrid's Python bindings are not importable here: run it with "
                          "the python that has them (Debian: apt-get install python3-simgrid, "
                          "then /usr/bin/python3)") from None
    with tempfile.NamedTemporaryFile("w", suffix=".xml", delete=False) as f:
        f.write(PLATFORM.format(last=args.p - 1, bw=args.bandwidth, half_lat=args.latency / 2))
    try:
        engine = Engine(["simgrid_ring", "--cfg=network/model:CM02",
                         "--cfg=network/crosstraffic:0",
                         "--log=root.thres:critical"])
        engine.load_platform(f.name)
        t0 = time.perf_counter()
        for i in range(args.p):
            Actor.create(f"r{i}", Host.by_name(f"node-{i}"), ring_rank, i, args.p, args.n_bytes)
        engine.run()
        wall = time.perf_counter() - t0
    finally:
        os.unlink(f.name)
    print(f"{args.p} {args.n_bytes:g} {Engine.clock:.9g} {wall:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
