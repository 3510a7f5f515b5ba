"""How long MPICH's non-blocking allreduce takes when every rank waits in sleeping polls:
the model's chain (``simulator.model.comm.iallreduce``, which cites MPICH's and
libfabric's source) replayed with no time on the wire, to put beside the call measured by
``benchmarks/iallreduce_polls.py`` (no run here).

Rank 0 enters ``--late-ms`` after the others, who posted their first round then; every
rank polls on ``real.launch.dist.wait``'s back-off from its own start (one host: the
probe's, all others at ``-late-ms``) or, over tcp, from a start drawn up to a poll
earlier (the emulated cluster, whose ranks arrive at any time). Prints rank 0's time in
the call (ms) a P for one host (a poll takes one message, CMA sends acked), for tcp (a
poll takes every message, every send acked), and for the first guess (one poll a round:
a round advances in the poll that takes its message, sends complete at once);
docs/results/phantom.md (psgd's part) puts them beside the measured call:

    python -m benchmarks.iallreduce_rounds --late-ms 13 --poll-ms 1
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.model.comm import iallreduce


def call_ms(P: int, late_ms: float, poll_ms: float, rng: random.Random | None,
            transport: str = "tcp", nbytes: int = 39360, one_poll: bool = False) -> float:
    """Rank 0's time in the call, played out by the model's own chain
    (``simulator.model.comm.iallreduce.leave_s``, no time on the wire). ``rng`` draws the
    others' phases: each entered up to one poll before ``-late_ms`` (None: all at
    ``-late_ms``, as in ``benchmarks/iallreduce_polls.py``)."""
    others = [-late_ms - (rng.random() * poll_ms if rng else 0.0) for _ in range(1, P)]
    out = iallreduce.leave_s([x / 1e3 for x in [0.0] + others], poll_ms / 1e3, nbytes,
                             transport=transport, one_poll=one_poll)
    return out[0] * 1e3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.iallreduce_rounds",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--late-ms", type=float, default=13.0, help="rank 0 in after the others "
                    "(default: 13)")
    ap.add_argument("--poll-ms", type=float, default=1.0, help="longest sleep between polls "
                    "(default: 1, PSGD_WAIT_SLEEP_S of phantom runs)")
    ap.add_argument("--workers", default="2,4,8,16", help="world sizes (default: 2,4,8,16)")
    ap.add_argument("--bytes", type=int, default=39360, help="allreduce size (default: "
                    "the phantom validations' CNN, 39360)")
    ap.add_argument("--trials", type=int, default=400, help="phase draws (default: 400)")
    a = ap.parse_args(argv)
    sizes = [int(p) for p in a.workers.split(",")]
    if any(p < 2 for p in sizes):
        print("error: --workers takes world sizes from 2 (e.g. 2,4,8)", file=sys.stderr)
        return 2
    print(f"rank 0 in {a.late_ms:g} ms late, polls backing off to {a.poll_ms:g} ms, "
          f"{a.bytes} bytes; its time in the call, ms (mean over {a.trials} phase draws):")
    rows = (("one host (shm), the probe's phases", {"transport": "shm"}, False),
            ("emulated cluster (tcp), any phase", {"transport": "tcp"}, True),
            ("one poll a round (tcp), any phase", {"transport": "tcp", "one_poll": True}, True))
    for label, kw, drawn in rows:
        rng = random.Random(1)
        cells = []
        for P in sizes:
            v = [call_ms(P, a.late_ms, a.poll_ms, rng if drawn else None, nbytes=a.bytes, **kw)
                 for _ in range(a.trials if drawn else 1)]
            cells.append(f"P={P} {statistics.mean(v):6.2f}")
        print(f"  {label:<38}" + "  ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
