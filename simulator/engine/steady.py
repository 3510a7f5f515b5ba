"""Steady state: simulate a window of a long run and extrapolate the rest.

After a few iterations a run repeats itself: synchronous schemes step by
step, asynchronous ones statistically. A run of N iterations per worker is
simulated for ``n = window(N)`` iterations only (every mechanism in place;
the run's own start and end included), and the iterations in between are
added at the pace of the window's second half, per worker::

    T(N)   = T(n) + (N - n) * max over workers (t_w(n) - t_w(h)) / (n - h)
    x_w(N) = x_w(n) + (N - n) * (x_w at step n - x_w at step h) / (n - h)

with ``t_w(k)`` the time worker w finished its k-th step, ``h = n / 2``, and
``x`` its compute, communication and waiting. The staleness histogram is
scaled by N / n. Runs shorter than ``3 n`` are simulated whole; so is any run
the user asks to trace. ``Result.simulated_iterations`` says what was done.

Imports: the standard library only.
"""
from __future__ import annotations

from dataclasses import replace

WINDOW = 24          # iterations simulated at least (the pace comes from the second half)


def window(iterations: int, period: int = 0) -> int | None:
    """Iterations to simulate of a run of ``iterations``, or None to simulate it whole.
    ``period``: the scheme's averaging or exchange period (the window spans whole ones)."""
    n = WINDOW
    if period > 1:
        n = max(n, 4 * period)
        n = -(-n // period) * period
    return n if iterations >= 3 * n else None


def extrapolate(result, recorder, n: int, total: int):
    """The Result of ``total`` iterations from the window run of ``n`` (``recorder`` watched
    steps ``n // 2`` and ``n``)."""
    h = n // 2
    rest = total - n
    ranks = range(result.workers)
    pace = max((recorder.noted[r, n][0] - recorder.noted[r, h][0]) / (n - h) for r in ranks)
    extra = [[(recorder.noted[r, n][k] - recorder.noted[r, h][k]) / (n - h) * rest
              for k in (1, 2, 3)] for r in ranks]
    compute = [c + e[0] for c, e in zip(result.compute_s_per_worker, extra)]
    comm = [c + e[1] for c, e in zip(result.comm_s_per_worker, extra)]
    wait = [c + e[2] for c, e in zip(result.wait_s_per_worker, extra)]
    time_s = result.time_s + rest * pace
    per_epoch = result.iterations_per_epoch
    return replace(
        result, time_s=time_s, iterations_per_worker=total,
        epoch_s=time_s * per_epoch / total,
        compute_s=sum(compute) / len(compute), comm_s=sum(comm) / len(comm),
        wait_s=sum(wait) / len(wait), compute_s_per_worker=tuple(compute),
        comm_s_per_worker=tuple(comm), wait_s_per_worker=tuple(wait),
        staleness={k: round(v * total / n) for k, v in result.staleness.items()},
        simulated_iterations=n)
