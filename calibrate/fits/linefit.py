"""Straight lines through timings, and piecewise lines where one does not fit.

Every cost model in the profile is a line ``t(x) = intercept + slope * x``:

* compute: ``t_step(batch) = step_intercept_s + step_s_per_sample * batch``;
* Hockney: ``t(n_bytes) = alpha_s + beta_s_per_byte * n_bytes``;
* server:  ``t_update(params) = update_intercept_s + update_s_per_param * params``.

Timings span several decades (4 B to 64 MiB), so an ordinary fit would only see
the largest sizes. The fits minimise the *relative* error instead: weighted least squares
with weights ``1 / t^2`` minimises ``sum(((t_fit - t) / t)^2)``. Both
coefficients are kept non-negative (a negative latency is not a cost the
simulator can use, and the profile loader refuses it), so the solver is NNLS.

Where one line misses (MPI switches from eager to rendezvous protocol; caches
overflow), ``fit_segments`` tries 1..3 independent lines over contiguous size
ranges, every split at a measured size, and keeps the number of segments with the
lowest BIC of the squared relative error: a split must pay for its 3 parameters.

Imports: numpy, scipy.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats


@dataclass(frozen=True)
class Line:
    """``y = intercept + slope * x`` fitted on ``x_min..x_max``; CIs are 95% half-widths."""
    intercept: float
    slope: float
    intercept_ci: float
    slope_ci: float
    r2: float                 # ordinary R^2 on the raw scale, clamped at 0
    n_points: int
    x_min: float
    x_max: float
    sq_rel_error: float       # sum of squared relative residuals

    def predict(self, x):
        return self.intercept + self.slope * np.asarray(x, dtype=float)


def relative_errors(y_fit, y) -> np.ndarray:
    y = np.asarray(y, dtype=float)
    return np.abs(np.asarray(y_fit, dtype=float) - y) / y


def fit_line(x, y, relative: bool = True, nonnegative: bool = True) -> Line:
    """Non-negative weighted least squares line with 95% confidence half-widths.

    ``relative=True`` weights each point by ``1/y`` (relative residuals).
    ``nonnegative=False`` lets the intercept (and slope) take any sign: for a line
    through part of a range whose intercept is not a cost of its own (the slope of
    a token bucket's drained regime, whose intercept is latency minus the burst's
    head start), clamping it at 0 would bend the slope.
    CIs come from the weighted residual variance and ``(A^T A)^-1``; they are 0
    when there are no degrees of freedom left (2 points or fewer).
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 2 or len(np.unique(x)) < 2:
        raise ValueError(f"a line needs two distinct x values, got {np.unique(x).tolist()}")
    if np.any(y <= 0) and relative:
        raise ValueError("relative fit needs positive times")
    x_scale = float(np.max(np.abs(x))) or 1.0      # conditioning: x spans 1e0..1e8
    w = 1.0 / y if relative else np.ones_like(y)
    a = np.column_stack([np.ones_like(x), x / x_scale]) * w[:, None]
    coef = (optimize.nnls(a, y * w)[0] if nonnegative
            else np.linalg.lstsq(a, y * w, rcond=None)[0])
    resid = y * w - a @ coef
    dof = len(x) - 2
    ci = np.zeros(2)
    if dof > 0:
        cov = (resid @ resid / dof) * np.linalg.pinv(a.T @ a)
        ci = stats.t.ppf(0.975, dof) * np.sqrt(np.clip(np.diag(cov), 0, None))
    y_fit = coef[0] + coef[1] * x / x_scale
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum((y - y_fit) ** 2)) / ss_tot if ss_tot > 0 else 1.0
    return Line(intercept=float(coef[0]), slope=float(coef[1] / x_scale),
                intercept_ci=float(ci[0]), slope_ci=float(ci[1] / x_scale),
                r2=max(0.0, r2), n_points=len(x), x_min=float(x.min()), x_max=float(x.max()),
                sq_rel_error=float(np.sum(relative_errors(y_fit, y) ** 2)))


def _splits(n_x: int, n_segments: int, min_points: int):
    """Index tuples that cut ``n_x`` sorted distinct x values into contiguous groups."""
    for cuts in itertools.combinations(range(min_points, n_x - min_points + 1), n_segments - 1):
        bounds = (0, *cuts, n_x)
        if all(b - a >= min_points for a, b in zip(bounds, bounds[1:])):
            yield bounds


def _fit_groups(x, y, xs, bounds) -> list[Line]:
    lines = []
    for lo, hi in zip(bounds, bounds[1:]):
        mask = (x >= xs[lo]) & (x <= xs[hi - 1])
        lines.append(fit_line(x[mask], y[mask]))
    return lines


SPLIT_GAIN = 4.0        # a further segment must cut the squared relative error 4-fold ...
MIN_RMS_REL = 0.02      # ... and is only tried while the fit misses by more than 2% (RMS)


def fit_segments(x, y, max_segments: int = 3, min_points: int = 3) -> tuple[Line, ...]:
    """Piecewise lines against x (sorted, non-overlapping), as few as fit.

    ``x`` may repeat (several repetitions per size); a segment holds at least
    ``min_points`` distinct sizes. For each number of segments every split at a
    measured size is tried and the one with the least total squared relative
    error kept. One more segment is accepted only while the current fit misses
    by more than ``MIN_RMS_REL`` and the split cuts the error ``SPLIT_GAIN``-fold:
    trying every breakpoint finds *some* gain in pure noise, so the bar is high.
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    xs = np.unique(x)
    if len(xs) < 2 * min_points:
        return (fit_line(x, y),)
    best = [fit_line(x, y)]
    for n_seg in range(2, max_segments + 1):
        candidates = [_fit_groups(x, y, xs, b) for b in _splits(len(xs), n_seg, min_points)]
        if not candidates:
            break
        lines = min(candidates, key=lambda ls: sum(s.sq_rel_error for s in ls))
        sse_now = sum(s.sq_rel_error for s in best)
        if math.sqrt(sse_now / len(x)) <= MIN_RMS_REL or \
                sum(s.sq_rel_error for s in lines) * SPLIT_GAIN > sse_now:
            break
        best = lines
    return tuple(best)


def predict_segments(lines: tuple[Line, ...], x) -> np.ndarray:
    """Evaluate piecewise lines; a size between two segments uses the one whose range is nearer."""
    x = np.asarray(x, dtype=float)
    edges = [math.sqrt(a.x_max * b.x_min) if a.x_max > 0 else b.x_min
             for a, b in zip(lines, lines[1:])]
    idx = np.searchsorted(np.asarray(edges), x, side="right")
    out = np.empty_like(x)
    for i, line in enumerate(lines):
        out[idx == i] = line.predict(x[idx == i])
    return out


def segment_edges(lines: tuple[Line, ...]) -> list[tuple[int, int]]:
    """Contiguous integer ranges for the segments: the first starts at 0, cuts at geometric
    midpoints."""
    cuts = [int(math.floor(math.sqrt(a.x_max * b.x_min))) for a, b in zip(lines, lines[1:])]
    lows = [0] + [c + 1 for c in cuts]
    highs = cuts + [int(lines[-1].x_max)]
    return list(zip(lows, highs))
