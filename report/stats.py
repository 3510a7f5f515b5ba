"""How a repeated measurement is stated everywhere: its mean and the half-width of its 95%
confidence interval (Student t), as a sweep's summary, ``compare``'s measured column and the
phantom check give it; and how a validation states its error: the median and the worst
|relative error| of all points and of each scheme's (``scheme_sets``, ``median_worst``), as
``compare``'s summary, the cluster and phantom reports and ``benchmarks.repredict --pool``
give them.

Imports: numpy, pandas, scipy.
"""
from __future__ import annotations

import numpy as np
import pandas as pd


def mean_ci95(values) -> tuple[float, float]:
    """Mean and the half-width of its 95% confidence interval (t-distribution); NaNs dropped."""
    x = np.asarray(list(values), dtype=float)
    x = x[~np.isnan(x)]
    if len(x) == 0:
        return float("nan"), float("nan")
    if len(x) == 1:
        return float(x[0]), 0.0
    from scipy import stats
    half = stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    return float(x.mean()), float(half)


def scheme_sets(points: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The sets a per-scheme error is stated over: all ``points`` (``all``), then each
    scheme's (its ``scheme`` column), by name."""
    return [("all", points), *points.groupby("scheme")]


def median_worst(rel_error: pd.Series) -> tuple[float, float]:
    """The median and the worst |relative error| of a set of points (fractions; NaN where
    the set is empty; a missing error is skipped)."""
    err = rel_error.abs()
    return err.median(), err.max()
