"""Figures of a sweep's measured runs: speedup against P (with the ideal line) and the final
accuracy against P. Test accuracy against training time is ``report.accuracy``'s, the one
figure of curves that measured and predicted runs share.

Imports: matplotlib, real.schemes, contracts.files.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from contracts.files import save_figure  # noqa: E402

from real.schemes import SCHEMES  # noqa: E402


def speedup_plot(summary, path, title: str = "Measured speedup") -> Path:
    fig, ax = plt.subplots(figsize=(6, 4.2))
    p_max = int(summary["workers"].max())
    ax.plot([1, p_max], [1, p_max], "k--", lw=1, label="ideal")
    for alg, g in summary.groupby("algorithm"):
        if len(g) < 2 and alg in SCHEMES and SCHEMES[alg].baseline:
            continue
        err = g["speedup"] * g["time_ci_s"] / g["time_s"]
        ax.errorbar(g["workers"], g["speedup"], yerr=err, marker="o", capsize=3, label=alg)
    if "disturbed" in summary and summary["disturbed"].astype(bool).any():
        bad = summary[summary["disturbed"].astype(bool)]
        ax.scatter(bad["workers"], bad["speedup"], s=120, facecolors="none", edgecolors="red",
                   zorder=5, label="disturbed (other processes took CPU)")
    ax.set_xlabel("workers P")
    ax.set_ylabel("speedup T(1) / T(P)")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.set_xticks(range(1, p_max + 1))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def accuracy_plot(summary, path, title: str = "Test accuracy of the final model") -> Path:
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for alg, g in summary.groupby("algorithm"):
        ax.plot(g["workers"], g["test_accuracy"], marker="o", label=alg)
    ax.set_xlabel("workers P")
    ax.set_ylabel("test accuracy")
    ax.set_title(title)
    ax.set_xticks(range(1, int(summary["workers"].max()) + 1))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)
