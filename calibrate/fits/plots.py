"""Log-log plots of measured points and fitted lines: one panel per operation, one for compute.

Imports: matplotlib, numpy, pandas, contracts.files, calibrate.fits.linefit.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from contracts.files import save_figure

from calibrate.fits.linefit import Line, predict_segments

OPS = ("allreduce", "bcast", "gather", "scatter", "sendrecv")


def _comm_panel(ax, op: str, points: pd.DataFrame, fitted: dict) -> None:
    mine = points[points["op"] == op]
    for (backend, alg, workers), g in mine.groupby(["backend", "algorithm", "workers"]):
        label = f"{backend} {alg if alg != '-' else ''} P={workers}".replace("  ", " ")
        # the mean (what the fit uses) can lie outside p25..p75 when the tail is heavy
        low = (g["time_s"] - g["p25_s"]).clip(lower=0)
        high = (g["p75_s"] - g["time_s"]).clip(lower=0)
        dots = ax.errorbar(g["bytes"], g["time_s"], yerr=[low, high], fmt="o", ms=3,
                           label=label)
        lines = fitted.get((backend, op, alg, workers))
        if lines:
            x = np.geomspace(max(1, g["bytes"].min()), g["bytes"].max(), 200)
            ax.plot(x, predict_segments(lines, x), "-", lw=1, color=dots[0].get_color())
    ax.set(xscale="log", yscale="log", title=op, xlabel="message bytes (per rank)",
           ylabel="time (s): mean of max over ranks")
    ax.legend(fontsize=5, ncol=2)


def _compute_panel(ax, steps: pd.DataFrame, costs) -> None:
    for cost in costs:
        for fit in cost.steps:
            g = steps[(steps["model"] == cost.model) & (steps["threads"] == fit.threads)]
            med = g.groupby("batch")["step_s"].median()
            dots = ax.plot(med.index, med.values, "o", ms=3,
                           label=f"{cost.model} T={fit.threads}")
            x = np.geomspace(med.index.min(), med.index.max(), 50)
            ax.plot(x, fit.step_s(x), "-", lw=1, color=dots[0].get_color())
    ax.set(xscale="log", yscale="log", title="compute: one SGD step", xlabel="batch size",
           ylabel="step time (s), median")
    ax.legend(fontsize=5, ncol=2)


def plot_fits(path: Path, points: pd.DataFrame, fitted: dict[tuple, tuple[Line, ...]],
              steps: pd.DataFrame, costs) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ops = [op for op in OPS if op in set(points["op"])] if len(points) else []
    n = len(ops) + 1
    cols = 3
    fig, axes = plt.subplots((n + cols - 1) // cols, cols, figsize=(5 * cols, 4 * ((n + cols - 1) // cols)),
                             squeeze=False)
    flat = axes.ravel()
    for ax, op in zip(flat, ops):
        _comm_panel(ax, op, points, fitted)
    _compute_panel(flat[len(ops)], steps, costs)
    for ax in flat[n:]:
        ax.axis("off")
    fig.suptitle("calibration: measured points (median, p25-p75) and fitted lines")
    fig.tight_layout()
    try:
        return save_figure(fig, Path(path))
    finally:
        plt.close(fig)
