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
  receiver's ack (``simulator/model/comm/polls.py`` cites it), on one host the CMA copy's
  completion for messages of 8192 bytes or more (``MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD``).
* The project's wait (``real.launch.dist.wait``): ``Test``, then sleeps of 50 us doubling up
  to ``PSGD_WAIT_SLEEP_S`` (1 ms in phantom runs).

The chain: rank 0 enters ``--late-ms`` after the others (who posted their first round then
and have backed off to ``--poll-ms``, at independent phases), polls at 0, 50, 150, ... us;
a poll runs the schedule (a round whose receive and send are complete advances, posting the
next round's send, which reaches the partner at once), then the network (every message that
reached the rank is taken and acknowledged, every ack that reached it completes its send).
Prints rank 0's time in the call (median and mean over ``--trials`` phase draws, ms) a P,
and the 1-poll-a-round form (rounds advance in the poll that takes their messages, sends
complete at once) beside it:

    python -m benchmarks.iallreduce_rounds --late-ms 13
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


def call_ms(P: int, late_ms: float, poll_ms: float, rng: random.Random,
            acked: bool = True, next_poll: bool = True) -> float:
    """Rank 0's time in the call for one draw of the others' phases."""
    masks, horizon = partners(P), 8 * len(partners(P)) * poll_ms + 10
    ticks = [(t, 0) for t in late_checks(poll_ms, horizon)]
    for r in range(1, P):
        phase = rng.random() * poll_ms - late_ms
        ticks += [(phase + k * poll_ms, r) for k in range(int((horizon + late_ms) / poll_ms) + 2)]
    ticks.sort()
    rnd = {r: 0 for r in range(P)}
    sent = {(r, r ^ masks[0], 0): (0.0 if r == 0 else -late_ms) for r in range(P)}
    acks: dict = {}
    recv_done, send_done = set(), set()

    def advance(r: int, t: float) -> bool:
        """Post rank r's next round if its round is complete; True when r has finished."""
        k = rnd[r]
        if (r ^ masks[k], r, k) not in recv_done or (acked and (r, r ^ masks[k], k) not in send_done):
            return False
        rnd[r] = k + 1
        if k + 1 == len(masks):
            return True
        sent[(r, r ^ masks[k + 1], k + 1)] = t
        return False

    for t, r in ticks:
        if rnd[r] == len(masks):
            continue
        if advance(r, t) and r == 0:              # the schedule's hook, first in a poll
            return t
        if rnd[r] == len(masks):
            continue
        for key, posted in sent.items():          # then the network
            if key[1] == r and posted <= t and key not in acks:
                acks[key] = t
        for key, at in acks.items():
            if key[1] == r:
                recv_done.add(key)
            if key[0] == r and at <= t:
                send_done.add(key)
        if not next_poll and advance(r, t) and r == 0:
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
    ap.add_argument("--trials", type=int, default=400, help="phase draws (default: 400)")
    a = ap.parse_args(argv)
    sizes = [int(p) for p in a.workers.split(",")]
    if any(p < 2 or p & (p - 1) for p in sizes):
        print("error: --workers takes powers of two from 2 (e.g. 2,4,8)", file=sys.stderr)
        return 2
    print(f"rank 0 in {a.late_ms:g} ms late, polls backing off to {a.poll_ms:g} ms; "
          f"its time in the call, ms (median / mean over {a.trials} draws):")
    for label, kw in (("rounds seen a poll late, sends acked", {}),
                      ("one poll a round", {"acked": False, "next_poll": False})):
        rng = random.Random(1)
        cells = []
        for P in sizes:
            v = [call_ms(P, a.late_ms, a.poll_ms, rng, **kw) for _ in range(a.trials)]
            cells.append(f"P={P} {statistics.median(v):5.2f} / {statistics.mean(v):5.2f}")
        print(f"  {label:<38}" + "   ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
