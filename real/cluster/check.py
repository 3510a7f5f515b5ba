"""Throughput probe for the emulated cluster: one TCP stream from host src to host dst.

A receiver is started inside dst's namespace, a sender inside src's; the
sender writes zeros for ``seconds`` (at most ``max_bytes``), the receiver
timestamps what arrives.  The first ``warmup_s`` are left out: they hold the
token bucket's initial burst and TCP's slow start, neither of which is the
link's rate.  Goodput counts TCP payload; the shaper counts frames, so the
wire rate is goodput x (MSS + 66) / MSS (Ethernet 14 + IPv4 20 + TCP with
timestamps 32 bytes of headers per segment).

    python -m real.cluster.check recv --address A --port P   (inside dst)
    python -m real.cluster.check send --address A --port P   (inside src)
are the two halves; ``measure_bandwidth`` runs them.

Imports: real.cluster (launch, state), cli.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cli import Parser, command

if TYPE_CHECKING:
    from real.cluster.state import Cluster

HEADER_BYTES_PER_SEGMENT = 14 + 20 + 32
CHUNK_BYTES = 256 * 1024
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Throughput:
    goodput_bits_per_s: float   # TCP payload after warm-up
    wire_bits_per_s: float      # the same plus headers: what the shaper limits
    seconds: float              # measured window
    bytes: int                  # payload in the window
    mss_bytes: int


def receive(address: str, port: int, warmup_s: float, timeout_s: float) -> dict:
    with socket.create_server((address, port)) as server:
        print("READY", flush=True)
        server.settimeout(timeout_s)
        conn, _ = server.accept()
        with conn:
            conn.settimeout(timeout_s)
            mss = conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)
            buf = bytearray(CHUNK_BYTES)
            total, t0, mark = 0, None, None
            while True:
                n = conn.recv_into(buf)
                now = time.perf_counter()
                if n == 0:
                    break
                if t0 is None:
                    t0 = now
                total += n
                if mark is None and now - t0 >= warmup_s:
                    mark = (now, total)
                end = (now, total)
    if mark is None or end[0] <= mark[0]:
        raise RuntimeError(f"receiver: too little data after warm-up ({total} B)")
    return {"bytes": end[1] - mark[1], "seconds": end[0] - mark[0], "mss_bytes": mss}


def send(address: str, port: int, seconds: float, max_bytes: int) -> None:
    payload = bytes(CHUNK_BYTES)
    with socket.create_connection((address, port), timeout=10) as conn:
        sent, t0 = 0, time.perf_counter()
        while sent < max_bytes and time.perf_counter() - t0 < seconds:
            conn.sendall(payload)
            sent += len(payload)


def measure_bandwidth(cluster: Cluster, src: int = 0, dst: int = 1, seconds: float = 1.5,
                      warmup_s: float = 0.25, max_bytes: int = 1 << 30,
                      port: int = 5201) -> Throughput:
    """TCP throughput from host src to host dst, each half inside its namespace."""
    from real.cluster.launch import netns_command
    env = os.environ | {"PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)}
    me = [sys.executable, "-m", "real.cluster.check"]
    addr = ["--address", cluster.addresses[dst], "--port", str(port)]
    recv = subprocess.Popen(
        netns_command(cluster, dst, [*me, "recv", *addr, "--warmup-s", str(warmup_s),
                                     "--timeout-s", str(seconds + 10)]),
        stdout=subprocess.PIPE, text=True, env=env)
    try:
        if recv.stdout.readline().strip() != "READY":
            raise RuntimeError("bandwidth check: the receiver did not start")
        subprocess.run(netns_command(cluster, src, [*me, "send", *addr, "--seconds", str(seconds),
                                                    "--max-bytes", str(max_bytes)]),
                       env=env, check=True, timeout=seconds + 20)
        out, _ = recv.communicate(timeout=seconds + 20)
    finally:
        if recv.poll() is None:
            recv.kill()
            recv.wait()
    if recv.returncode != 0:
        raise RuntimeError(f"bandwidth check: receiver failed ({recv.returncode})")
    r = json.loads(out)
    goodput = r["bytes"] * 8 / r["seconds"]
    mss = r["mss_bytes"]
    return Throughput(goodput, goodput * (mss + HEADER_BYTES_PER_SEGMENT) / mss,
                      r["seconds"], r["bytes"], mss)


PROG = "python -m real.cluster.check"


def build_parser() -> Parser:
    p = Parser(prog=PROG, description="One half of the cluster's throughput probe.")
    p.add_argument("role", choices=["recv", "send"])
    p.add_argument("--address", required=True, help="receiver's address")
    p.add_argument("--port", type=int, default=5201, help="receiver's TCP port")
    p.add_argument("--seconds", type=float, default=1.5, help="sender: how long to send")
    p.add_argument("--max-bytes", type=int, default=1 << 30, help="sender: at most this much")
    p.add_argument("--warmup-s", type=float, default=0.25, help="receiver: left out at the start")
    p.add_argument("--timeout-s", type=float, default=30.0, help="receiver: give up after")
    return p


def run(args) -> int:
    if args.role == "recv":
        print(json.dumps(receive(args.address, args.port, args.warmup_s, args.timeout_s)))
    else:
        send(args.address, args.port, args.seconds, args.max_bytes)
    return 0


def main(argv: list[str] | None = None) -> int:
    return command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
