"""Figures of accuracy over time, measured and predicted drawn alike (matplotlib, Agg canvas;
imported only when plotting).

* ``accuracy_time_plot``: test accuracy against training time, one panel per
  scheme, one line per P; predicted curves solid, measured ones (if given)
  dashed in the same colour.
* ``time_to_target_plot``: time to a target accuracy against P, one line per
  scheme, predicted dashed and measured solid; a point not reached is left out.
* ``final_accuracy_plot``: final test accuracy against P, the same way.

Rows are dicts with ``scheme``, ``workers`` and ``points`` (curves: a run record's, as
``real.records.accuracy_report`` reads them, or a prediction's), or the summary rows of
``simulator.accuracy`` (one per scheme and P).

Imports: matplotlib, contracts.files.
"""
from __future__ import annotations

import math
from pathlib import Path

from contracts.files import save_figure

MARKERS = "osD^vP<X>h*"


def _figure(n_panels: int, per_row: int = 5, size=(3.2, 2.8)):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    cols = min(per_row, n_panels)
    rows = math.ceil(n_panels / cols)
    fig = Figure(figsize=(size[0] * cols, size[1] * rows + 0.6))
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes[n_panels:]:
        ax.set_visible(False)
    return fig, axes


def mean_curves(rows: list[dict]) -> dict[tuple[str, int], tuple[list, list]]:
    """(scheme, P) -> (times, accuracies), averaged point by point over seeds."""
    groups: dict[tuple, list] = {}
    for r in rows:
        groups.setdefault((r["scheme"], r["workers"]), []).append(r["points"])
    out = {}
    for key, curves in groups.items():
        n = min(len(c) for c in curves)
        out[key] = ([sum(c[i]["train_s"] for c in curves) / len(curves) for i in range(n)],
                    [sum(c[i]["test_accuracy"] for c in curves) / len(curves) for i in range(n)])
    return out


def accuracy_time_plot(rows: list[dict], path, title: str,
                       measured: list[dict] | None = None) -> Path:
    pred, meas = mean_curves(rows), mean_curves(measured or [])
    schemes = list(dict.fromkeys(s for s, _ in list(pred) + list(meas)))
    counts = sorted({p for _, p in list(pred) + list(meas)})
    fig, axes = _figure(len(schemes))
    for ax, scheme in zip(axes, schemes):
        for j, p in enumerate(counts):
            color = f"C{j % 10}"
            if (scheme, p) in pred:
                ax.plot(*pred[(scheme, p)], color=color, lw=1.2, label=f"P={p}")
            if (scheme, p) in meas:
                ax.plot(*meas[(scheme, p)], color=color, lw=1.0, ls="--",
                        label=None if (scheme, p) in pred else f"P={p}")
        ax.set_title(scheme, fontsize=9)
        ax.set_xlabel("training time (s)", fontsize=8)
        ax.set_ylabel("test accuracy", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    note = " (solid: predicted, dashed: measured)" if measured else ""
    fig.suptitle(title + note, fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path, dpi=110, tight=False)


def _by_p(summary: list[dict], key: str) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list] = {}
    for s in summary:
        if s.get(key) is not None:
            out.setdefault(s["scheme"], []).append((s["workers"], s[key]))
    return {k: sorted(v) for k, v in out.items()}


def _against_p(predicted, measured, key: str, ylabel: str, title: str, path) -> Path:
    fig, (ax,) = _figure(1, size=(7.5, 4.8))
    pred, meas = _by_p(predicted, key), _by_p(measured, key)
    for i, scheme in enumerate(dict.fromkeys(list(meas) + list(pred))):
        style = {"color": f"C{i % 10}", "marker": MARKERS[i % len(MARKERS)], "markersize": 4}
        if scheme in meas:
            ax.plot(*zip(*meas[scheme]), lw=1.3, label=f"{scheme} measured", **style)
        if scheme in pred:
            ax.plot(*zip(*pred[scheme]), lw=1.0, ls="--", markerfacecolor="none",
                    label=f"{scheme} predicted", **style)
    counts = sorted({s["workers"] for s in list(predicted) + list(measured)})
    ax.set_xticks(counts)
    ax.set(xlabel="workers P", ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    if pred or meas:
        ax.legend(fontsize=6, ncol=2)
    else:                                  # (no point has a value: no target reached)
        ax.text(0.5, 0.5, "no point reached the target", ha="center",
                transform=ax.transAxes)
    fig.tight_layout()
    return save_figure(fig, path, dpi=110, tight=False)


def time_to_target_plot(predicted: list[dict], measured: list[dict], target: float,
                        path) -> Path:
    return _against_p(predicted, measured, "time_to_target_s",
                      f"training time to {target:g} test accuracy (s)",
                      f"Time to {target:g} accuracy (solid: measured, dashed: predicted)", path)


def final_accuracy_plot(predicted: list[dict], measured: list[dict], path) -> Path:
    return _against_p(predicted, measured, "final_accuracy", "final test accuracy",
                      "Final test accuracy (solid: measured, dashed: predicted)", path)
