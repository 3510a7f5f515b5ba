"""Measured against predicted for the emulated-cluster experiment: tables and one figure.

From the rows ``simulator.compare`` predicted (each record on its own cluster, with the
calibrated link): ``with_flags`` marks the held-out points, ``error_table`` and the Markdown
helpers make ``errors.csv`` and ``table.md``, ``figure`` draws ``cluster-compare.png``
(``pipelines.validate_cluster`` writes them). Beside each error, the stalls the records show
(``simulator.stalls``) and what the error would be with them added to the prediction: a
diagnostic of how much of the error the missing loss recovery accounts for, not a prediction.
Two kinds of points are *held out*: worker counts the profile never saw (its ``workers_seen``),
and shaped rates the link calibration never saw (all but ``calibrated_bits_per_s``).

Imports: matplotlib, numpy, pandas, contracts.files, report.stats.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from report.stats import median_worst, scheme_sets


def with_flags(df: pd.DataFrame, calibrated_bits_per_s: float) -> pd.DataFrame:
    df = df.copy()
    df["mbit"] = (df["bandwidth_bits_per_s"] / 1e6).round().astype(int)
    df["unseen_rate"] = df["bandwidth_bits_per_s"] != calibrated_bits_per_s
    df["held_out_p"] = df["held_out"]
    if "measured_stall_s" in df:     # what the error would be if the model had the stalls
        stall = df["measured_stall_s"].fillna(0.0)
        df["rel_error_stalls_added"] = (df["predicted_s"] + stall - df["measured_s"]) \
            / df["measured_s"]
    return df


def error_table(df: pd.DataFrame) -> pd.DataFrame:
    """Median and worst |relative error| per scheme (and all), on each subset of points
    (held out or not, and each link rate)."""
    subsets = {"all points": np.ones(len(df), bool), "held-out P": df["held_out_p"].to_numpy(),
               "unseen rate": df["unseen_rate"].to_numpy(),
               "held-out P and unseen rate": (df["held_out_p"] & df["unseen_rate"]).to_numpy(),
               **{f"{m} Mbit/s": (df["mbit"] == m).to_numpy() for m in sorted(set(df["mbit"]))}}
    rows = []
    for name, mask in subsets.items():
        for scheme, g in scheme_sets(df[mask]):
            median, worst = median_worst(g["rel_error"])
            added = median_worst(g.get("rel_error_stalls_added",
                                       pd.Series(np.nan, index=g.index)))
            rows.append({"points": name, "scheme": scheme, "n": len(g),
                         "median_error": median, "worst_error": worst,
                         "median_error_stalls_added": added[0],
                         "worst_error_stalls_added": added[1]})
    return pd.DataFrame(rows)


def markdown_table(df: pd.DataFrame) -> str:
    lines = ["| scheme | P | link Mbit/s | measured s/epoch (95% CI) | predicted | error | "
             "predicted compute / comm / wait s | stalls s/epoch (TCP timeouts) | "
             "error, stalls added | held out |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in df.sort_values(["scheme", "mbit", "workers"]).iterrows():
        held = ", ".join(n for n, f in (("P", r.held_out_p), ("rate", r.unseen_rate)) if f) or "-"
        ci = f" ± {r.measured_ci_s:.2f}" if r.runs > 1 else ""
        lines.append(f"| {r.scheme} | {r.workers} | {r.mbit} | {r.measured_s:.2f}{ci} "
                     f"({r.runs} run{'s' if r.runs > 1 else ''}) | {r.predicted_s:.2f} | "
                     f"{100 * r.rel_error:+.1f}% | {r.predicted_compute_s:.2f} / "
                     f"{r.predicted_comm_s:.2f} / {r.predicted_wait_s:.2f} | {_stalls(r)} | "
                     f"{_pct(r.get('rel_error_stalls_added'))} | {held} |")
    return "\n".join(lines)


def _pct(x, signed: bool = True) -> str:
    return "-" if x is None or pd.isna(x) else f"{100 * x:{'+' if signed else ''}.1f}%"


def _stalls(r) -> str:
    stall, rto = r.get("measured_stall_s"), r.get("tcp_timeouts_per_epoch")
    if stall is None or pd.isna(stall):
        return "-"
    return f"{stall:.2f}" + ("" if rto is None or pd.isna(rto) else f" ({rto:.1f})")


def markdown_errors(errors: pd.DataFrame) -> str:
    lines = ["| points | scheme | n | median error | worst error | median / worst, measured "
             "stalls added |", "|---|---|---|---|---|---|"]
    for _, r in errors.iterrows():
        if r.n:
            lines.append(f"| {r.points} | {r.scheme} | {r.n} | {100 * r.median_error:.1f}% | "
                         f"{100 * r.worst_error:.1f}% | "
                         f"{_pct(r.get('median_error_stalls_added'), False)} / "
                         f"{_pct(r.get('worst_error_stalls_added'), False)} |")
    return "\n".join(lines)


def figure(df: pd.DataFrame, path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from contracts.files import save_figure
    schemes = sorted(df["scheme"].unique())
    fig, axes = plt.subplots(1, len(schemes), figsize=(4.2 * len(schemes), 4), squeeze=False)
    for ax, scheme in zip(axes[0], schemes):
        g = df[df["scheme"] == scheme]
        for i, (mbit, h) in enumerate(g.groupby("mbit")):
            h = h.sort_values("workers")
            seen = "" if h["unseen_rate"].any() else ", link calibrated here"
            ax.errorbar(h["workers"], h["measured_s"], yerr=h["measured_ci_s"], fmt="o",
                        color=f"C{i}", capsize=3, label=f"{mbit} Mbit/s measured{seen}")
            ax.plot(h["workers"], h["predicted_s"], "--", marker="x", color=f"C{i}",
                    label=f"{mbit} Mbit/s predicted")
            for _, r in h.iterrows():
                ax.annotate(f"{100 * r.rel_error:+.0f}%", (r.workers, r.predicted_s),
                            textcoords="offset points", xytext=(6, 4), fontsize=7, color=f"C{i}")
        ax.set_title(scheme)
        ax.set_xlabel("workers P (P = 2: seen by calibration)")
        ax.set_xticks(sorted(g["workers"].unique()))
        ax.set_ylabel("time per epoch, s")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Emulated cluster: measured (real.train) vs predicted (simulator)", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path)


PARTS = (("compute", "C0"), ("comm", "C1"), ("wait", "C7"))


def breakdown_figure(df: pd.DataFrame, path: Path) -> Path:
    """Where a worker's epoch went, measured beside predicted: one panel per scheme (columns)
    and link rate (rows); for each P a pair of stacked bars (compute, communication,
    waiting), the measured one solid, the predicted one hatched."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from contracts.files import save_figure
    schemes, rates = sorted(df["scheme"].unique()), sorted(df["mbit"].unique())
    fig, axes = plt.subplots(len(rates), len(schemes), squeeze=False,
                             figsize=(3.2 * len(schemes), 2.8 * len(rates)))
    for row, mbit in enumerate(rates):
        for col, scheme in enumerate(schemes):
            ax = axes[row][col]
            g = df[(df["scheme"] == scheme) & (df["mbit"] == mbit)].sort_values("workers")
            x = np.arange(len(g))
            for side, (offset, hatch) in (("measured", (-0.2, None)),
                                          ("predicted", (0.2, "//"))):
                bottom = np.zeros(len(g))
                for part, color in PARTS:
                    height = g[f"{side}_{part}_s"].fillna(0).to_numpy()
                    ax.bar(x + offset, height, 0.38, bottom=bottom, color=color, hatch=hatch,
                           edgecolor="white" if hatch is None else "black", linewidth=0.3,
                           label=f"{side} {part}" if row == col == 0 else None)
                    bottom += height
            ax.set_xticks(x, [str(p) for p in g["workers"]])
            ax.set_title(f"{scheme}, {mbit} Mbit/s", fontsize=8)
            ax.tick_params(labelsize=7)
            if col == 0:
                ax.set_ylabel("s per epoch and worker", fontsize=7)
            if row == len(rates) - 1:
                ax.set_xlabel("workers P", fontsize=7)
    height_in = fig.get_size_inches()[1]
    fig.suptitle("Where the epoch went: measured (solid) against predicted (hatched)",
                 fontsize=10, y=1 - 0.12 / height_in)
    fig.legend(loc="upper center", ncol=6, fontsize=7, frameon=False,
               bbox_to_anchor=(0.5, 1 - 0.35 / height_in))
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.6 / height_in))
    return save_figure(fig, path)
