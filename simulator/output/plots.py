"""The prediction figure a user chooses a scheme from (matplotlib, Agg canvas; imported only
when plotting).

Left: time per epoch against P on log-log axes, one labelled line per scheme,
the fastest scheme at each P ringed. Right: speedup over serial SGD at P = 1
(the baseline a user compares with), with the ideal line kept inside the
data's range so it does not squeeze the schemes together.

Imports: matplotlib, contracts.files.
"""
from __future__ import annotations

from pathlib import Path

from simulator.contracts.files import save_figure

MARKERS = "osD^vP<X>h*"
LINESTYLES = ("-", "--", "-.", ":")


def preload() -> None:
    """Import the parts of matplotlib the figure uses (about as long as drawing it): a
    command can do it while its predictions run in other processes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
    from matplotlib.figure import Figure  # noqa: F401
    from matplotlib.ticker import FuncFormatter  # noqa: F401


def speedup_plot(rows: list[dict], path: str | Path, title: str = "", subtitle: str = "") -> Path:
    # the Agg canvas directly, without pyplot: no GUI backend, faster to import
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    fig = Figure(figsize=(11, 5.0))
    FigureCanvasAgg(fig)
    ax_t, ax_s = fig.subplots(1, 2)
    schemes = list(dict.fromkeys(r["scheme"] for r in rows))
    by = {(r["scheme"], r["workers"]): r["epoch_s"] for r in rows}
    counts = sorted({r["workers"] for r in rows})
    serial = by.get(("serial", 1))
    top_speedup = 1.0
    for i, s in enumerate(schemes):
        pts = sorted((p, t) for (name, p), t in by.items() if name == s)
        style = dict(color=f"C{i % 10}", marker=MARKERS[i % len(MARKERS)], markersize=4,
                     linestyle=LINESTYLES[i // 10 % len(LINESTYLES)] if len(pts) > 1 else "none")
        ps, ts = zip(*pts)
        ax_t.plot(ps, ts, label=s, **style)
        if len(pts) > 1:
            ax_t.annotate(s, (ps[-1], ts[-1]), xytext=(4, 0), textcoords="offset points",
                          fontsize=7, color=style["color"], va="center")
        base = serial or by.get((s, 1)) or ts[0]
        speedups = [base / t for t in ts]
        top_speedup = max(top_speedup, *speedups)
        ax_s.plot(ps, speedups, label=s, **style)
    for p in counts:                                   # ring the fastest at each P
        here = [(t, s) for (s, q), t in by.items() if q == p]
        t, _ = min(here)
        ax_t.plot([p], [t], marker="o", markersize=9, markerfacecolor="none",
                  markeredgecolor="k", linestyle="none")
    ax_s.plot(counts, counts, color="k", linestyle=(0, (1, 2)), linewidth=1,
              label="ideal (= P; leaves the frame)")
    ax_t.set(xscale="log", yscale="log", xlabel="workers P", ylabel="time per epoch (s)",
             title="time per epoch (lower is better; o = fastest)")
    ax_s.set(xscale="log", xlabel="workers P",
             ylabel="speedup over serial SGD" if serial else "speedup over the scheme at P = 1",
             title="speedup (higher is better)")
    ax_s.set_ylim(0, top_speedup * 1.25)
    ax_t.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax_t.yaxis.set_minor_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    plain = FuncFormatter(lambda v, _pos: f"{v:g}")
    for ax in (ax_t, ax_s):
        ax.grid(alpha=0.3, which="both")
        ax.xaxis.set_major_formatter(plain)
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _pos: ""))
        if counts[-1] <= 64:
            ax.set_xticks(counts if len(counts) <= 8 else [c for c in counts if c & (c - 1) == 0])
        if len(counts) > 1:
            ax.set_xlim(counts[0] / 1.3, counts[-1] * 1.6)
    handles, labels = ax_s.get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, ncol=min(6, len(labels)), loc="lower center",
               frameon=False)
    fig.suptitle(title or "predicted by the simulator" + (f": {subtitle}" if subtitle else ""),
                 fontsize=10)
    # fixed margins (room for the legend below and tick labels up to ~8 characters): a
    # tight layout measures every label by drawing the figure once more, a third of its cost
    fig.subplots_adjust(left=0.08, right=0.985, bottom=0.22, top=0.87, wspace=0.2)
    return save_figure(fig, path, dpi=110, tight=False)
