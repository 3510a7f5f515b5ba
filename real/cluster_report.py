"""Measured against predicted for the emulated-cluster experiment: tables and one figure.

``report(out, profile, link_toml, calibrated_bits_per_s)`` predicts every
record under ``out`` with ``simulator.compare`` (each on its own cluster, with
the calibrated link) and writes ``compare.csv``, ``errors.csv``, ``table.md``
and ``cluster-compare.png`` into ``out``. Two kinds of points are *held out*:
worker counts the profile never saw (its ``workers_seen``), and shaped rates
the link calibration never saw (all but ``calibrated_bits_per_s``).
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd


def with_flags(df: pd.DataFrame, calibrated_bits_per_s: float) -> pd.DataFrame:
    df = df.copy()
    df["mbit"] = (df["bandwidth_bits_per_s"] / 1e6).round().astype(int)
    df["unseen_rate"] = df["bandwidth_bits_per_s"] != calibrated_bits_per_s
    df["held_out_p"] = df["held_out"]
    return df


def error_table(df: pd.DataFrame) -> pd.DataFrame:
    """Median and worst |relative error| per scheme (and all), on each subset of points."""
    subsets = {"all points": np.ones(len(df), bool), "held-out P": df["held_out_p"].to_numpy(),
               "unseen rate": df["unseen_rate"].to_numpy(),
               "held-out P and unseen rate": (df["held_out_p"] & df["unseen_rate"]).to_numpy()}
    rows = []
    for name, mask in subsets.items():
        for scheme, g in [("all", df[mask])] + list(df[mask].groupby("scheme")):
            err = g["rel_error"].abs()
            rows.append({"points": name, "scheme": scheme, "n": len(g),
                         "median_error": err.median() if len(g) else np.nan,
                         "worst_error": err.max() if len(g) else np.nan})
    return pd.DataFrame(rows)


def markdown_table(df: pd.DataFrame) -> str:
    lines = ["| scheme | P | link Mbit/s | measured s/epoch (95% CI) | predicted | error | "
             "predicted compute / comm / wait s | held out |",
             "|---|---|---|---|---|---|---|---|"]
    for _, r in df.sort_values(["scheme", "mbit", "workers"]).iterrows():
        held = ", ".join(n for n, f in (("P", r.held_out_p), ("rate", r.unseen_rate)) if f) or "-"
        ci = f" ± {r.measured_ci_s:.2f}" if r.runs > 1 else ""
        lines.append(f"| {r.scheme} | {r.workers} | {r.mbit} | {r.measured_s:.2f}{ci} "
                     f"({r.runs} run{'s' if r.runs > 1 else ''}) | {r.predicted_s:.2f} | "
                     f"{100 * r.rel_error:+.1f}% | {r.predicted_compute_s:.2f} / "
                     f"{r.predicted_comm_s:.2f} / {r.predicted_wait_s:.2f} | {held} |")
    return "\n".join(lines)


def markdown_errors(errors: pd.DataFrame) -> str:
    lines = ["| points | scheme | n | median error | worst error |", "|---|---|---|---|---|"]
    for _, r in errors.iterrows():
        if r.n:
            lines.append(f"| {r.points} | {r.scheme} | {r.n} | {100 * r.median_error:.1f}% | "
                         f"{100 * r.worst_error:.1f}% |")
    return "\n".join(lines)


def figure(df: pd.DataFrame, path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from real.plots import save_figure
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


def report(out: Path, profile_path: Path, link_toml: Path, calibrated_bits_per_s: float,
           figure_copy: str | None = None) -> int:
    from simulator import profile as profiles
    from simulator.compare import compare, load_link_calibration
    prof = profiles.load(profile_path)
    link = load_link_calibration(link_toml)
    df = compare(out, prof, link=link)
    if df.empty:
        print(f"no completed run records under {out}", file=sys.stderr)
        return 1
    df = with_flags(df[df["hosts"] > 1], calibrated_bits_per_s)
    errors = error_table(df)
    df.to_csv(out / "compare.csv", index=False)
    errors.to_csv(out / "errors.csv", index=False)
    text = (f"Profile: {profile_path} (workers seen {list(prof.provenance.workers_seen)}); link: "
            f"{link_toml} (latency {link.latency_s * 1e6:.1f} us, payload "
            f"{link.payload_efficiency:.3f} of the shaped rate, measured at "
            f"{link.shaped_bits_per_s / 1e6:g} Mbit/s)\n\n"
            + markdown_table(df) + "\n\n" + markdown_errors(errors) + "\n")
    (out / "table.md").write_text(text)
    fig = figure(df, out / "cluster-compare.png")
    if figure_copy:
        shutil.copyfile(fig, figure_copy)
    print(text)
    print(f"wrote {out / 'compare.csv'}, {out / 'errors.csv'}, {out / 'table.md'}, {fig}"
          + (f", {figure_copy}" if figure_copy else ""), file=sys.stderr)
    return 0
