"""Stalls in the records that a model of bandwidth and latency does not have.

On a link with a shallow queue (a switch port, a shaped link), a message loses
packets when what is sent at once exceeds what the queue holds: a window that grew
past it, or several senders converging on one receiver (TCP incast). Losses that
duplicate ACKs cannot signal (the end of a message, a whole window) are recovered by
the retransmission timer, whose floor on Linux is ``RtoMin`` = 200 ms: the step
that carries the message takes 200 ms (or a multiple) longer than its peers. The
records show both sides of it:

* ``measured_stall_s``: per epoch, the time a lock-step scheme's iterations spent
  beyond the run's typical step (its first quartile) in steps that took at least
  ``STALL_MIN_S`` (3/4 of RtoMin) longer; the first iteration (warm-up) is left out,
  as ``compare.steady_epoch_s`` leaves it out of the measured time;
* ``tcp_timeouts_per_epoch``: the kernel's count of retransmission timeouts over
  training, summed over the hosts (``comm.tcp`` of ``real.records.tcpstats``; records from
  before 2026-11-24 have none).

``simulator.compare`` writes both beside each point's error: where the model is
too fast by about the stall time, the missing mechanism is the loss recovery, not
the link's rate or latency.

Imports: numpy, simulator.model.schemes.
"""
from __future__ import annotations

import numpy as np

from simulator.model.schemes import SCHEMES

RTO_MIN_S = 0.200            # Linux's TCP_RTO_MIN (/proc/net/snmp: Tcp RtoMin)
STALL_MIN_S = 0.75 * RTO_MIN_S


def lockstep(scheme: str) -> bool:
    """Every worker meets every iteration, so one slow message holds up the step (psgd's
    workers step alone and meet once, at the average: no typical step to stall beyond)."""
    s = SCHEMES[scheme]
    return s.lock_step and s.weights == "shared" and not s.single_worker


def stall_s(it, scheme: str) -> float | None:
    """One run's stall time (all epochs) from its iterations table, or None where the
    scheme is not lock-step or too few iterations were recorded."""
    if it is None or not lockstep(scheme):
        return None
    workers = it[(it["rank"] > 0) if SCHEMES[scheme].server else (it["rank"] >= 0)]
    steps = workers[workers["iteration"] >= 0]
    step_s = (steps["compute_s"] + steps["comm_s"] + steps["wait_s"]).groupby(
        [steps["epoch"], steps["iteration"]]).max().to_numpy()[1:]
    if len(step_s) < 3:
        return None
    excess = step_s - np.quantile(step_s, 0.25)
    return float(excess[excess >= STALL_MIN_S].sum() * (len(step_s) + 1) / len(step_s))


def stall_figures(recs: list[dict], scheme: str, epochs: int, iterations) -> dict:
    """The two columns of ``simulator.compare`` for one point's records; ``iterations(rec)``
    reads a record's iterations table (None where it cannot)."""
    stalls = [s for s in (stall_s(iterations(r), scheme) for r in recs) if s is not None]
    timeouts = [sum(h["timeouts"] for h in r["comm"]["tcp"]) for r in recs
                if (r.get("comm") or {}).get("tcp")]
    return {"measured_stall_s": float(np.mean(stalls)) / epochs if stalls else np.nan,
            "tcp_timeouts_per_epoch": float(np.mean(timeouts)) / epochs if timeouts else np.nan}
