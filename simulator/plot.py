"""Speedup plot of sweep rows (matplotlib, Agg backend; imported only when plotting)."""
from __future__ import annotations

from pathlib import Path


def speedup_plot(rows: list[dict], path: str | Path, title: str = "") -> Path:
    # the Agg canvas directly, without pyplot: no GUI backend, faster to import
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    schemes = list(dict.fromkeys(r["scheme"] for r in rows))
    top = max((r["workers"] for r in rows), default=1)
    ax.plot([1, top], [1, top], color="0.7", linestyle="--", label="ideal")
    for s in schemes:
        pts = [(r["workers"], r["speedup"]) for r in rows if r["scheme"] == s]
        if len(pts) > 1:
            ax.plot(*zip(*pts), marker="o", markersize=3, label=s)
    ax.set_xlabel("workers P")
    ax.set_ylabel("speedup vs P = 1 (same scheme)")
    ax.set_title(title or "predicted speedup (simulator)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path
