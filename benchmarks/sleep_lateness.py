"""How late a sleep wakes on this machine, with its core idle and with busy loops beside it.

The basis of ``real.records.testbed``'s lateness limits: phantom compute is sleeps, and a
sleep that wakes late stretches the compute it stands for. This pins one process to
CPU 0, sleeps ``--sleeps`` times for each length of ``--lengths-ms`` through the
phantom's ``real.phantom.sleep.Sleeper`` (each sleep alone: no lateness carried to the
next; the thread's own timer slack unless ``--fine-slack``), and reports p50, p99 (to
within the sleeper's 4.7% histogram bins) and the mean lateness as a share of the length,
with 0, 1, ... ``--max-busy`` busy loops pinned to the same CPU (each a process spinning
in Python).

    python benchmarks/sleep_lateness.py --lengths-ms 0.1,1,10 --sleeps 300 --max-busy 1
"""
from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cli  # noqa: E402
from real.phantom.sleep import Sleeper  # noqa: E402

PROG = "python benchmarks/sleep_lateness.py"


def spin(cpu: int) -> None:
    os.sched_setaffinity(0, {cpu})
    while True:
        pass


def measure(length_s: float, sleeps: int, fine_slack: bool) -> dict:
    sleeper = Sleeper(carry=False, slack=fine_slack)
    for _ in range(sleeps):
        sleeper.sleep(length_s)
    return sleeper.summary()


def build_parser() -> cli.Parser:
    p = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--lengths-ms", default="0.1,1,10", help="sleep lengths, ms")
    p.add_argument("--sleeps", type=int, default=300, help="sleeps per length")
    p.add_argument("--max-busy", type=int, default=1, help="busy loops beside it, 0..N")
    p.add_argument("--cpu", type=int, default=0, help="the CPU everything is pinned to")
    p.add_argument("--fine-slack", action="store_true",
                   help="a 1 ns timer slack while sleeping, as phantom runs have it")
    return p


def run(args) -> int:
    os.sched_setaffinity(0, {args.cpu})
    print(f"{'busy loops':>10} {'sleep ms':>9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
          f"{'mean late / sleep':>17}")
    for busy in range(args.max_busy + 1):
        loops = [mp.Process(target=spin, args=(args.cpu,), daemon=True) for _ in range(busy)]
        for lp in loops:
            lp.start()
        time.sleep(0.2)
        try:
            for ms in (float(x) for x in args.lengths_ms.split(",")):
                s = measure(ms / 1e3, args.sleeps, args.fine_slack)
                print(f"{busy:>10} {ms:>9g} {s['p50_s'] * 1e3:>8.3f} {s['p99_s'] * 1e3:>8.3f} "
                      f"{s['max_s'] * 1e3:>8.3f} {s['late_total_s'] / s['asked_total_s']:>17.1%}")
        finally:
            for lp in loops:
                lp.terminate()
                lp.join()
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
