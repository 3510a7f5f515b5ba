"""Figures of measured runs: speedup against P (with the ideal line) and accuracy against P."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def save_figure(fig, path: str | os.PathLike) -> Path:
    """Save atomically (a reader never sees half a PNG) and close the figure."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=path.suffix)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=120, bbox_inches="tight")
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def speedup_plot(summary, path, title: str = "Measured speedup") -> Path:
    fig, ax = plt.subplots(figsize=(6, 4.2))
    p_max = int(summary["workers"].max())
    ax.plot([1, p_max], [1, p_max], "k--", lw=1, label="ideal")
    for alg, g in summary.groupby("algorithm"):
        if len(g) < 2 and alg == "serial":
            continue
        err = g["speedup"] * g["time_ci_s"] / g["time_s"]
        ax.errorbar(g["workers"], g["speedup"], yerr=err, marker="o", capsize=3, label=alg)
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
