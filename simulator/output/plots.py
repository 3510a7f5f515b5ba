"""The prediction figure a user chooses a scheme from (matplotlib, Agg canvas; imported only
when plotting).

Left: time per epoch against P on log-log axes, one labelled line per scheme,
the fastest scheme at each P ringed. Right: speedup against the prediction's one baseline
(the fastest single worker, or the fastest at ``--baseline P0``: the rows' ``speedup``),
with the ideal line (P / P0) where it is inside the frame.

Readable at any range: times are labelled in human units (ms, s, min, h, d) at whole
decades, with labels between them only where the axis spans less than two decades; the
workers' axis labels at most ``MAX_X_LABELS`` counts; a panel with nothing to draw says why.

Imports: matplotlib, contracts.files, contracts.units.
"""
from __future__ import annotations

import math
import textwrap
from pathlib import Path

from contracts.files import save_figure
from contracts.units import format_duration

MARKERS = "osD^vP<X>h*"
LINESTYLES = ("-", "--", "-.", ":")
MAX_X_LABELS = 9


def preload() -> None:
    """Import the parts of matplotlib the figure uses (about as long as drawing it): a
    command can do it while its predictions run in other processes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
    from matplotlib.figure import Figure  # noqa: F401
    from matplotlib.ticker import FuncFormatter  # noqa: F401


def worker_ticks(counts: list[int]) -> list[int]:
    """At most ``MAX_X_LABELS`` worker counts to label: all of them if few, else powers of
    two (every second, fourth ... one as the range needs) with the first and last."""
    if len(counts) <= MAX_X_LABELS:
        return counts
    lo, hi = counts[0], counts[-1]
    ticks = [2 ** k for k in range(math.ceil(math.log2(lo)), int(math.log2(hi)) + 1)]
    step = 1
    while len(ticks[::step]) > MAX_X_LABELS - 1:
        step *= 2
    return sorted(set(ticks[::step]) | {lo, hi}) if ticks[::step] else [lo, hi]


def time_ticks(low_s: float, high_s: float) -> list[float]:
    """Tick positions on a log time axis from ``low_s`` to ``high_s``: whole decades, and
    2 and 5 times them where the axis spans less than two decades."""
    first, last = math.floor(math.log10(low_s)), math.ceil(math.log10(high_s))
    subs = (1, 2, 5) if last - first <= 2 else (1,)
    ticks = [m * 10.0 ** e for e in range(first, last + 1) for m in subs]
    inside = [t for t in ticks if low_s <= t <= high_s]
    return inside if len(inside) >= 2 else ticks


def spread(positions: list[float], gap: float) -> list[float]:
    """``positions`` (in order) moved up as little as needed to be ``gap`` apart."""
    out: list[float] = []
    for y in positions:
        out.append(max(y, out[-1] + gap) if out else y)
    return out


def label_ends(ax, ends: list[tuple], low: float, high: float, height_pt: float = 227.0,
               gap_pt: float = 8.0) -> None:
    """Name each line at its last point; labels at one P that would overprint are moved
    apart (``height_pt``: the axes' height, for the log y axis from ``low`` to ``high``)."""
    span = math.log10(high / low)
    by_x: dict = {}
    for x, y, name, color in ends:
        by_x.setdefault(x, []).append((math.log10(y / low) / span * height_pt, name, color, y))
    for x, group in by_x.items():
        group.sort()
        for (pos, name, color, y), moved in zip(group, spread([g[0] for g in group], gap_pt)):
            ax.annotate(name, (x, y), xytext=(4, moved - pos), textcoords="offset points",
                        fontsize=7, color=color, va="center")


def speedup_plot(rows: list[dict], path: str | Path, title: str = "", subtitle: str = "",
                 baseline: str = "the fastest single worker", p0: int = 1) -> Path:
    """The figure of ``rows`` (``engine.sweep``), whose speedups are against ``baseline``,
    the fastest at ``p0`` workers."""
    # the Agg canvas directly, without pyplot: no GUI backend, faster to import
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

    fig = Figure(figsize=(11, 5.0))
    FigureCanvasAgg(fig)
    ax_t, ax_s = fig.subplots(1, 2)
    schemes = list(dict.fromkeys(r["scheme"] for r in rows))
    by = {(r["scheme"], r["workers"]): r for r in rows}
    counts = sorted({r["workers"] for r in rows})
    top_speedup, ends = 1.0, []
    for i, s in enumerate(schemes):
        pts = sorted((p, r["epoch_s"], r["speedup"]) for (name, p), r in by.items() if name == s)
        style = dict(color=f"C{i % 10}", marker=MARKERS[i % len(MARKERS)], markersize=4,
                     linestyle=LINESTYLES[i // 10 % len(LINESTYLES)] if len(pts) > 1 else "none")
        ps, ts, speedups = zip(*pts)
        ax_t.plot(ps, ts, label=s, **style)
        if len(pts) > 1:
            ends.append((ps[-1], ts[-1], s, style["color"]))
        top_speedup = max(top_speedup, *speedups)
        ax_s.plot(ps, speedups, label=s, **style)
    for p in counts:                                   # ring the fastest at each P
        t = min(r["epoch_s"] for (_s, q), r in by.items() if q == p)
        ax_t.plot([p], [t], marker="o", markersize=9, markerfacecolor="none",
                  markeredgecolor="k", linestyle="none")
    ideal = [(p, p / p0) for p in counts if p / p0 <= top_speedup * 1.25]
    if len(ideal) > 1:
        ax_s.plot(*zip(*ideal), color="k", linestyle=(0, (1, 2)), linewidth=1,
                  label=f"ideal (speedup = P / {p0})" if p0 > 1 else "ideal (speedup = P)")
    ax_t.set(xscale="log", yscale="log", xlabel="workers P", ylabel="time per epoch",
             title="time per epoch (lower is better; o = fastest)")
    ax_s.set(xscale="log", xlabel="workers P", ylabel=f"speedup over {baseline}",
             title="speedup (higher is better)")
    ax_s.set_ylim(0, top_speedup * 1.25)
    times = [r["epoch_s"] for r in rows if r["epoch_s"] > 0]
    low, high = min(times) / 1.15, max(times) * 1.15
    ax_t.set_ylim(low, high)
    ax_t.yaxis.set_major_locator(FixedLocator(time_ticks(low, high)))
    ax_t.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: format_duration(v, 2)))
    ax_t.yaxis.set_minor_locator(NullLocator())
    label_ends(ax_t, ends, low, high)
    ticks = worker_ticks(counts)
    for ax in (ax_t, ax_s):
        ax.grid(alpha=0.3, which="both")
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.tick_params(axis="x", labelsize=8)
        if len(counts) > 1:
            ax.set_xlim(counts[0] / 1.3, counts[-1] * 1.6)
    if len(counts) < 2:
        ax_s.text(0.5, 0.5, f"one worker count (P = {counts[0]}): no speedup curve to draw;\n"
                  "ask for several, e.g. --workers 1,8,64", transform=ax_s.transAxes,
                  ha="center", va="center", fontsize=9)
    handles, labels = ax_s.get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, ncol=min(6, len(labels)), loc="lower center",
               frameon=False)
    fig.suptitle("\n".join(textwrap.wrap(title or "predicted by the simulator"
                                          + (f": {subtitle}" if subtitle else ""), 130)),
                 fontsize=10)
    # fixed margins (room for the legend below and tick labels up to ~8 characters): a
    # tight layout measures every label by drawing the figure once more, a third of its cost
    fig.subplots_adjust(left=0.08, right=0.985, bottom=0.22, top=0.85, wspace=0.2)
    return save_figure(fig, path, dpi=110, tight=False)
