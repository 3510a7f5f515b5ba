"""Incast at one port of the emulated cluster: do concurrent TCP flows share it fairly?

    sudo python benchmarks/incast.py --bandwidth 20mbit --queues 5ms,50ms --offsets 0,20

K senders (hosts 1..K of an emulated cluster, ``real.cluster``) each send one
message of ``--bytes`` to host 0, the second sender ``offset`` ms after the first
(the others evenly after it). Every flow enters host 0 through the same shaped
port (the bridge side's token bucket toward host 0), as a parameter server's
pushes do. The connections are opened before the clock starts; each message
ends when the receiver has every byte. Per queue and offset: the median over
``--repeats`` of when the first and the last flow completed (from the first
send), their spread, and what two sharing rules predict for the same start
times at the link's payload rate:

* max-min fair sharing (the simulator's fluid network): every active flow gets
  an equal share;
* one after another (a FIFO port that serves the flow that came first).

A message alone (``solo``) is measured too: TCP's start on an idle connection
adds to the rate's time. The cluster is built per queue and removed after
(``python -m real.cluster down --prefix incast`` cleans up after a kill).

Imports: real.cluster (lifecycle), contracts.units.
"""
from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cli  # noqa: E402
from real.cluster.lifecycle import emulated_cluster  # noqa: E402
from contracts.units import parse_bandwidth  # noqa: E402

PROG = "python benchmarks/incast.py"

PORT = 5555
PAYLOAD = 0.95             # TCP payload share of the shaped rate (calibrate.link measures it)
PREFIX = "incast"


def receive(senders: int, n_bytes: int) -> None:
    """Host 0: accept ``senders`` connections; print when each one's message was whole."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", PORT))
    srv.listen(senders)
    print("ready", flush=True)
    done: dict[str, float] = {}

    def serve(conn, peer):
        got = 0
        while got < n_bytes:
            chunk = conn.recv(1 << 20)
            if not chunk:
                break
            got += len(chunk)
        done[peer] = time.time()
        conn.sendall(b"k")

    threads = []
    for _ in range(senders):
        conn, (peer, _port) = srv.accept()
        threads.append(threading.Thread(target=serve, args=(conn, peer)))
        threads[-1].start()
    for t in threads:
        t.join()
    print(json.dumps(done), flush=True)


def send(host: str, n_bytes: int, start_at: float) -> None:
    """A sender: connect now, send the message at the wall-clock instant ``start_at``."""
    sock = socket.create_connection((host, PORT))
    message = b"x" * n_bytes
    while time.time() < start_at - 0.002:
        time.sleep(0.0005)
    while time.time() < start_at:
        pass
    sock.sendall(message)
    sock.recv(1)


def one_round(cluster, starts_s: list[float], n_bytes: int) -> list[float]:
    """Completion times of the flows (seconds after the first send), in completion order."""
    me = [sys.executable, str(Path(__file__).resolve())]
    recv = subprocess.Popen(["ip", "netns", "exec", cluster.namespaces[0], *me, "--role",
                             "recv", "--senders", str(len(starts_s)), "--bytes", str(n_bytes)],
                            stdout=subprocess.PIPE, text=True)
    if recv.stdout.readline().strip() != "ready":
        raise RuntimeError("the receiver did not start")
    t0 = time.time() + 0.5
    senders = [subprocess.Popen(["ip", "netns", "exec", cluster.namespaces[1 + i], *me,
                                 "--role", "send", "--to", cluster.addresses[0], "--bytes",
                                 str(n_bytes), "--start-at", repr(t0 + s)])
               for i, s in enumerate(starts_s)]
    for p in senders:
        p.wait(timeout=60)
    done = json.loads(recv.communicate(timeout=60)[0])
    return sorted(t - t0 for t in done.values())


def fair_share(starts_s: list[float], n_bytes: int, rate: float) -> list[float]:
    """Completion times under max-min fair sharing of one port (processor sharing)."""
    left = {i: float(n_bytes) for i in range(len(starts_s))}
    now, done, pending = 0.0, [], sorted(range(len(starts_s)), key=lambda i: starts_s[i])
    active: list[int] = []
    while left:
        while pending and starts_s[pending[0]] <= now + 1e-12:
            active.append(pending.pop(0))
        if not active:
            now = starts_s[pending[0]]
            continue
        share = rate / len(active)
        to_end = min(left[i] for i in active) / share
        to_next = starts_s[pending[0]] - now if pending else float("inf")
        dt = min(to_end, to_next)
        for i in active:
            left[i] -= share * dt
        now += dt
        for i in [i for i in active if left[i] <= 1e-6]:
            active.remove(i)
            del left[i]
            done.append(now)
    return done


def one_after_another(starts_s: list[float], n_bytes: int, rate: float) -> list[float]:
    """Completion times when the port serves the flows one at a time, first come first."""
    now, done = 0.0, []
    for s in sorted(starts_s):
        now = max(now, s) + n_bytes / rate
        done.append(now)
    return done


def build_parser() -> cli.Parser:
    p = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--senders", type=int, default=2)
    p.add_argument("--bytes", type=int, default=407_000, help="one message (default: mlp's gradients)")
    p.add_argument("--bandwidth", default="20mbit", help="link rate, tc units")
    p.add_argument("--queues", default="5ms,50ms", help="shaper queues to compare (tc tbf latency)")
    p.add_argument("--offsets", default="0,20", help="ms between the first and the second send")
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--role", choices=("recv", "send"), help=argparse.SUPPRESS)
    p.add_argument("--to", help=argparse.SUPPRESS)
    p.add_argument("--start-at", type=float, help=argparse.SUPPRESS)
    return p


def run(args) -> int:
    if args.role == "recv":
        receive(args.senders, args.bytes)
        return 0
    if args.role == "send":
        send(args.to, args.bytes, args.start_at)
        return 0
    rate = PAYLOAD * parse_bandwidth(args.bandwidth)          # bytes per second
    print(f"{args.senders} x {args.bytes} B into one {args.bandwidth} port, medians of "
          f"{args.repeats} (first / last flow done, ms after the first send; range of the last)")
    for queue in args.queues.split(","):
        queue_s = float(queue.removesuffix("ms")) / 1e3
        with emulated_cluster(args.senders + 1, args.bandwidth, prefix=PREFIX,
                              queue_s=queue_s) as cluster:
            solo = statistics.median(one_round(cluster, [0.0], args.bytes)[0]
                                     for _ in range(args.repeats))
            print(f"queue {queue}: one message alone {solo * 1e3:.0f} ms "
                  f"(the rate alone: {args.bytes / rate * 1e3:.0f} ms)")
            for off in args.offsets.split(","):
                gap = float(off) / 1e3
                starts = [0.0] + [gap * (1 + i / max(1, args.senders - 1))
                                  for i in range(args.senders - 1)]
                rounds = [one_round(cluster, starts, args.bytes) for _ in range(args.repeats)]
                first = statistics.median(r[0] for r in rounds)
                last = [r[-1] for r in rounds]
                fair = fair_share(starts, args.bytes, rate)
                fifo = one_after_another(starts, args.bytes, rate)
                print(f"  offset {off:>3} ms: measured {first * 1e3:4.0f} / "
                      f"{statistics.median(last) * 1e3:4.0f} ms (last {min(last) * 1e3:.0f}-"
                      f"{max(last) * 1e3:.0f});  fair share {fair[0] * 1e3:4.0f} / "
                      f"{fair[-1] * 1e3:4.0f};  one after another {fifo[0] * 1e3:4.0f} / "
                      f"{fifo[-1] * 1e3:4.0f}", flush=True)
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
