"""How a repeated measurement is stated everywhere: its mean and the half-width of its 95%
confidence interval (Student t), as a sweep's summary, ``compare``'s measured column and the
phantom check give it.

Imports: numpy, scipy.
"""
from __future__ import annotations

import numpy as np


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
