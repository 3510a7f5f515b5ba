"""The comparison figure: measured speedup with error bars, predicted curve, ideal line,
and the relative error of the predicted time per epoch below.

Imports: matplotlib, contracts.files.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def comparison_plot(g, path: Path) -> Path:
    """``g``: rows of one scheme (and cluster) from ``simulator.compare.compare``."""
    from contracts.files import save_figure
    g = g.sort_values("workers")
    base = g[g["workers"] == g["workers"].min()].iloc[0]
    meas_speedup = base.measured_s / g["measured_s"]
    meas_err = meas_speedup * g["measured_ci_s"] / g["measured_s"]
    pred_speedup = base.predicted_s / g["predicted_s"]
    fig, (ax, ax_err) = plt.subplots(2, 1, figsize=(6, 6), sharex=True,
                                     gridspec_kw={"height_ratios": [2.2, 1]})
    p = g["workers"]
    ax.plot([p.min(), p.max()], [1, p.max() / p.min()], "k--", lw=1, label="ideal")
    ax.errorbar(p, meas_speedup, yerr=meas_err, fmt="o", capsize=3, label="measured (95% CI)")
    ax.plot(p, pred_speedup, "-", marker=".", label="predicted")
    held = g[g["held_out"]]
    if len(held):
        ax.scatter(held["workers"], (base.measured_s / held["measured_s"]), s=120,
                   facecolors="none", edgecolors="C3", label="held out of calibration")
    ax.set_ylabel(f"speedup vs P = {int(p.min())}")
    ax.set_ylim(bottom=0)
    title = f"{base.scheme}: measured vs predicted"
    if base.hosts > 1:
        title += f" ({base.hosts} hosts, {base.bandwidth_bits_per_s / 1e6:.0f} Mbit/s)"
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax_err.bar(p, 100 * g["rel_error"], color=["C3" if h else "C0" for h in g["held_out"]])
    ax_err.axhline(0, color="k", lw=0.8)
    ax_err.set_ylabel("error of time/epoch %")
    ax_err.set_xlabel("workers P")
    ax_err.set_xticks(list(p))
    ax_err.grid(alpha=0.3)
    return save_figure(fig, path)
