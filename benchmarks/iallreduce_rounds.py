"""How long MPICH's non-blocking allreduce takes when every rank waits in sleeping polls,
from its schedule as MPICH's source writes it (no run: a check of a closed form against
``benchmarks/iallreduce_polls.py``'s measured table before anything enters the model).

What the source says (MPICH 5.0.x, github:pmodels/mpich):

* Which schedule: ``maint/tuning/coll/mpir/generic.json``, ``collective=iallreduce``: above
  2048 bytes with a built-in op and ``count >= pof2``, ``MPIR_Iallreduce_intra_sched_reduce_
  scatter_allgather`` (``src/mpi/coll/iallreduce/iallreduce_intra_sched_reduce_scatter_
  allgather.c``): recursive halving then recursive doubling, 2 log2(P) rounds at a power of
  two (two more otherwise); each round an ``MPIR_Sched_send`` and ``MPIR_Sched_recv`` to the
  partner ``rank ^ mask``, then a barrier (the round ends when both are complete).
* When a round advances: only in the progress hook ``MPIDU_Sched_progress``
  (``src/mpid/common/sched/mpidu_sched.c``, ``MPIDU_Sched_progress_state``: it sees the
  round's requests complete and calls ``MPIDU_Sched_continue`` to post the next), which
  ``MPIDI_progress_test`` (``src/mpid/ch4/src/ch4_progress.h``) runs *before* the network's
  progress, once a ``MPI_Test``; the hook reports progress only when a whole schedule ends,
  so the network is polled in the same call. A request the network completes in one poll is
  therefore seen by the schedule in the rank's next poll.
* A send completes only when the receiver has taken it: over libfabric's tcp provider the
  receiver's ack (``simulator/model/comm/polls.py`` cites it); on one host from 8192 bytes
  the CMA copy's ack (``MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD``), smaller sends go eager and
  complete at once, and a poll takes one message (``MPIDI_POSIX_progress_recv``,
  ``src/mpid/ch4/shm/posix/posix_progress.h``, reads one cell).
* The project's wait (``real.launch.dist.wait``): ``Test``, then sleeps of 50 us doubling up
  to ``PSGD_WAIT_SLEEP_S`` (1 ms in phantom runs).

The chain: rank 0 enters ``--late-ms`` after the others, who posted their first round then;
rank 0 polls at 0, 50, 150, ... us (``simulator.model.comm.polls.checks_s``), the others
poll on the same back-off from their own start (one host: the probe's fixed phases) or
``--poll-ms`` apart at a drawn phase (the emulated cluster, whose ranks arrive at any time).
A poll runs the schedule first (a round whose receive and send are complete advances and
posts the next round's send, which reaches the partner at once), then the network. Prints
rank 0's time in the call (ms) a P for one host, for tcp, and for the first guess (one poll
a round: a round advances in the poll that takes its message, sends complete at once);
``benchmarks/iallreduce_polls.py`` measures it (docs/results/phantom.md, psgd's part):

    python -m benchmarks.iallreduce_rounds --late-ms 13 --poll-ms 1
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.model.comm import polls


def partners(P: int) -> list[int]:
    """The masks of reduce_scatter_allgather's rounds at a power of two P."""
    m, out = 1, []
    while m < P:
        out.append(m)
        m *= 2
    return out + out[::-1]


def late_checks(poll_ms: float, until_ms: float) -> list[float]:
    """The last rank's polls (ms after it began to wait): ``simulator.model.comm.polls``."""
    return [c * 1e3 for c in polls.checks_s(poll_ms / 1e3, until_ms / 1e3)]


CMA_BYTES = 8192                 # MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD: from here a send is acked


def call_ms(P: int, late_ms: float, poll_ms: float, rng: random.Random | None,
            transport: str = "tcp", nbytes: int = 39360, one_poll: bool = False) -> float:
    """Rank 0's time in the call. ``rng`` draws the others' phases (None: their polls follow
    the back-off from ``-late_ms``, as in ``benchmarks/iallreduce_polls.py``). ``transport``
    "tcp": a poll takes every message that arrived, every send is acked; "shm": a poll takes
    one message (``MPIDI_POSIX_progress_recv`` reads one cell), sends of ``CMA_BYTES`` or
    more are acked. ``one_poll``: a round advances in the poll that takes its message and
    sends complete at once."""
    masks = partners(P)
    horizon = 12 * len(masks) * poll_ms + 10
    ticks = [(t, 0) for t in late_checks(poll_ms, horizon)]
    for r in range(1, P):
        if rng is None:
            ticks += [(c - late_ms, r) for c in late_checks(poll_ms, horizon + late_ms)]
        else:
            phase = rng.random() * poll_ms - late_ms
            ticks += [(phase + k * poll_ms, r) for k in range(int((horizon + late_ms) / poll_ms) + 2)]
    ticks.sort()
    sizes = [nbytes // (2 * m) for m in masks]       # recursive halving, then doubling
    acked = [not one_poll and (transport == "tcp" or b >= CMA_BYTES) for b in sizes]
    rnd = {r: 0 for r in range(P)}
    inbox: dict[int, list] = {r: [] for r in range(P)}   # (arrival, kind, (src, dst, round))
    done: set = set()

    def post(r: int, k: int, t: float) -> None:
        inbox[r ^ masks[k]].append((t, "data", (r, r ^ masks[k], k)))
        if not acked[k]:
            done.add(("send", r, k))

    def advance(r: int, t: float) -> bool:
        """Post rank r's next round if its round is complete; True when r has finished."""
        k = rnd[r]
        if ("recv", r, k) not in done or ("send", r, k) not in done:
            return False
        rnd[r] = k + 1
        if k + 1 < len(masks):
            post(r, k + 1, t)
        return k + 1 == len(masks)

    for r in range(P):
        post(r, 0, 0.0 if r == 0 else -late_ms)
    for t, r in ticks:
        if rnd[r] == len(masks):
            continue
        if advance(r, t) and r == 0:                 # the schedule's hook, first in a poll
            return t
        if rnd[r] == len(masks):
            continue
        arrived = sorted(m for m in inbox[r] if m[0] <= t)   # then the network
        for m in arrived[:1] if transport == "shm" else arrived:
            inbox[r].remove(m)
            src, dst, k = m[2]
            if m[1] == "data":
                done.add(("recv", dst, k))
                if acked[k]:
                    inbox[src].append((t, "ack", m[2]))
            else:
                done.add(("send", src, k))
        if one_poll and advance(r, t) and r == 0:
            return t
    raise RuntimeError("horizon too short")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.iallreduce_rounds",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--late-ms", type=float, default=13.0, help="rank 0 in after the others "
                    "(default: 13)")
    ap.add_argument("--poll-ms", type=float, default=1.0, help="longest sleep between polls "
                    "(default: 1, PSGD_WAIT_SLEEP_S of phantom runs)")
    ap.add_argument("--workers", default="2,4,8,16", help="powers of two (default: 2,4,8,16)")
    ap.add_argument("--bytes", type=int, default=39360, help="allreduce size (default: "
                    "the phantom validations' CNN, 39360)")
    ap.add_argument("--trials", type=int, default=400, help="phase draws (default: 400)")
    a = ap.parse_args(argv)
    sizes = [int(p) for p in a.workers.split(",")]
    if any(p < 2 or p & (p - 1) for p in sizes):
        print("error: --workers takes powers of two from 2 (e.g. 2,4,8)", file=sys.stderr)
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
