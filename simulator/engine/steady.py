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

On oversubscribed cores the steps do not repeat: the kernel's run queues and
its balancer (``model.hardware.cores``) turn the ranks round over many steps,
and a fixed window of 24 iterations missed the mean by up to 7% (ddp at
P = 4 on 2 cores). Such a run is simulated *until its pace is stable*: with
``T(j)`` the time the last worker finished step j, at n = 36, 54, 81 ...
iterations (at most half the run) the steps n/2..n split into ``BATCHES``
stretches, and the run stops once the 95% confidence half-width of their mean
step time (batch means, Student t) is at most ``HALF_WIDTH`` of it. The
window of those n iterations is then simulated as a run of its own (its end
included: the communication after the last step's compute) and extrapolated
as above. A run that never gets there goes on to its end.

Imports: the standard library only.
"""
from __future__ import annotations

from dataclasses import replace

WINDOW = 24          # iterations simulated at least (the pace comes from the second half)
FIRST_WINDOW = 36    # the first window an oversubscribed run tries
BATCHES = 6          # batch means over the second half of the steps so far
T_975 = 2.5706       # Student t quantile 0.975 at BATCHES - 1 degrees of freedom
HALF_WIDTH = 0.005   # stop once the pace is known within this fraction (95% confidence)


def window(iterations: int, period: int = 0) -> int | None:
    """Iterations to simulate of a run of ``iterations``, or None to simulate it whole.
    ``period``: the scheme's averaging or exchange period (the window spans whole ones)."""
    n = WINDOW
    if period > 1:
        n = max(n, 4 * period)
        n = -(-n // period) * period
    return n if iterations >= 3 * n else None


def extrapolate(result, recorder, n: int, total: int, ranks: tuple[int, ...]):
    """The Result of ``total`` iterations from the window run of ``n`` (``recorder`` watched
    steps ``n // 2`` and ``n`` of the workers' ``ranks``)."""
    h = n // 2
    rest = total - n
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


def checkpoints(iterations: int) -> list[int]:
    """Step counts at which an oversubscribed run of ``iterations`` asks whether its pace
    is stable (36, 54, 81 ...: each half again), each at most half the run: a run stable
    at n is simulated again for a window of n iterations (its own end included), so it
    costs 2 n at most instead of the whole run."""
    out, n = [], FIRST_WINDOW
    while 2 * n <= iterations:
        out.append(n)
        n += n // 2
    return out


def stable_pace(step_end_s: list[float], n: int) -> float | None:
    """Seconds per step over steps n/2..n (``step_end_s[j]``: when the last worker
    finished step j), or None while the batch means of ``BATCHES`` stretches leave it
    uncertain by more than ``HALF_WIDTH`` (95% confidence)."""
    h = n // 2
    size = (n - h) // BATCHES
    starts = [n - size * (BATCHES - i) for i in range(BATCHES + 1)]
    means = [(step_end_s[b] - step_end_s[a]) / size for a, b in zip(starts, starts[1:])]
    mean = sum(means) / BATCHES
    var = sum((m - mean) ** 2 for m in means) / (BATCHES - 1)
    if mean <= 0 or T_975 * (var / BATCHES) ** 0.5 > HALF_WIDTH * mean:
        return None
    return (step_end_s[n] - step_end_s[h]) / (n - h)
