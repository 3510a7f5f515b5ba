"""Bias or noise? The held-out errors of several hold-out sweeps, side by side.

One sweep's error at a point mixes the model's bias with that sweep's noise:
the measurement's own spread (2-3 repeats) and its calibration's. Repeating
the whole loop (``simulator.validate``) on other days and pooling separates
them: an error that keeps its sign and size on every sweep is the model's; one
that changes sign from sweep to sweep is noise. Per scheme and P this reports
the mean signed error over the sweeps (the bias estimate), its range, and in
how many sweeps the prediction fell inside the measured 95% CI::

    python -m simulator.pool validation/fresh2 validation/fresh3 validation/fresh4 --out pooled/
    python -m simulator.pool docs/results/fresh2 docs/results ... --labels fresh2,fresh3,...

Each folder holds the ``compare.csv`` of ``simulator.compare`` (as ``validate``
leaves it). Writes ``pooled.csv`` and ``pooled.png`` (one panel per scheme:
each sweep's signed error per P, their mean, the +-5% band) into ``--out``.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

PROG = "python -m simulator.pool"
NEEDED = ("scheme", "workers", "measured_s", "measured_ci_s", "predicted_s", "rel_error",
          "held_out")


class PoolError(ValueError):
    """A folder without a readable comparison; shown as one line, exit code 2."""


def read_sweep(folder: Path) -> pd.DataFrame:
    """The held-out rows of one sweep's ``compare.csv`` (all rows if none is held out)."""
    path = Path(folder) / "compare.csv"
    if not path.is_file():
        raise PoolError(f"{folder} has no compare.csv (run python -m simulator.compare "
                        f"or simulator.validate there first)")
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as e:
        raise PoolError(f"{path} is not a readable CSV ({str(e).splitlines()[0]})") from None
    missing = [c for c in NEEDED if c not in df.columns]
    if missing:
        raise PoolError(f"{path} lacks column(s) {', '.join(missing)}: not a simulator.compare table")
    held = df[df["held_out"].astype(str).str.lower() == "true"]
    return _cluster_named(held if len(held) else df)


def _cluster_named(df: pd.DataFrame) -> pd.DataFrame:
    """Emulated-cluster rows are other configurations: their scheme name says so."""
    if "hosts" not in df.columns:
        return df
    many = df["hosts"].fillna(1).astype(int) > 1
    if not many.any():
        return df
    bw = df.get("bandwidth_bits_per_s", pd.Series(0.0, index=df.index)).fillna(0)
    names = df["scheme"].where(~many, df["scheme"] + "-" + df["hosts"].astype(str) + "hosts-"
                               + (bw // 10**6).astype(int).astype(str) + "mbit")
    return df.assign(scheme=names)


def pool(folders) -> pd.DataFrame:
    """One row per (scheme, P) seen in any sweep: the signed errors' mean, min and max over
    the sweeps, and how many sweeps predicted inside the measured 95% CI."""
    frames = []
    for f in folders:
        df = read_sweep(Path(f))
        frames.append(df.assign(sweep=str(f),
                                inside_ci=(df["predicted_s"] - df["measured_s"]).abs()
                                <= df["measured_ci_s"],
                                ci_rel=df["measured_ci_s"] / df["measured_s"]))
    rows = pd.concat(frames, ignore_index=True)
    return rows.groupby(["scheme", "workers"]).agg(
        sweeps=("rel_error", "size"), mean_error=("rel_error", "mean"),
        min_error=("rel_error", "min"), max_error=("rel_error", "max"),
        inside_ci=("inside_ci", "sum"),
        measured_ci_rel=("ci_rel", "mean")).reset_index()   # CI half-width / time, mean


def summary(pooled: pd.DataFrame) -> pd.DataFrame:
    """Per scheme: median and worst |mean error| over P (the bias), and the share of the
    points inside the measured CI."""
    g = pooled.assign(abs_mean=pooled["mean_error"].abs()).groupby("scheme")
    return pd.DataFrame({
        "bias_median": g["abs_mean"].median(), "bias_worst": g["abs_mean"].max(),
        "spread_worst": g.apply(lambda d: (d["max_error"] - d["min_error"]).max(),
                                include_groups=False),
        "inside_ci": g["inside_ci"].sum() / g["sweeps"].sum()}).reset_index()


def format_tables(pooled: pd.DataFrame, summ: pd.DataFrame, n_sweeps: int) -> str:
    lines = [f"held-out error over {n_sweeps} sweep(s), signed (+ = predicted slower)",
             f"{'scheme':<15}{'P':>3}{'mean':>8}{'min':>8}{'max':>8}{'CI ±':>8}  inside CI"]
    for _, r in pooled.iterrows():
        lines.append(f"{r.scheme:<15}{r.workers:>3}{100 * r.mean_error:>7.1f}%"
                     f"{100 * r.min_error:>7.1f}%{100 * r.max_error:>7.1f}%"
                     f"{100 * r.measured_ci_rel:>7.1f}%  {int(r.inside_ci)}/{int(r.sweeps)}")
    lines += ["", f"{'scheme':<15}{'bias median':>12}{'bias worst':>12}{'spread worst':>14}"
                  f"{'inside CI':>11}"]
    for _, r in summ.iterrows():
        lines.append(f"{r.scheme:<15}{100 * r.bias_median:>11.1f}%{100 * r.bias_worst:>11.1f}%"
                     f"{100 * r.spread_worst:>13.1f}%{100 * r.inside_ci:>10.0f}%")
    return "\n".join(lines)


def pool_plot(folders, path: Path, labels=None) -> Path:
    """One panel per scheme: each sweep's signed error against P, the mean, a +-5% band."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator
    from real.plots import save_figure
    labels = labels or [Path(f).name for f in folders]
    sweeps = [(name, read_sweep(Path(f))) for name, f in zip(labels, folders)]
    schemes = sorted(set().union(*(set(df["scheme"]) for _, df in sweeps)))
    cols = min(3, len(schemes))
    rows = -(-len(schemes) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 2.8 * rows), sharey=True,
                             squeeze=False)
    for ax, scheme in zip(axes.flat, schemes):
        ax.axhspan(-5, 5, color="0.9", zorder=0)
        ax.axhline(0, color="k", lw=0.8)
        mine = []
        for i, (name, df) in enumerate(sweeps):
            d = df[df["scheme"] == scheme].sort_values("workers")
            ax.plot(d["workers"], 100 * d["rel_error"], "o", ms=4, color=f"C{i}", label=name)
            mine.append(d[["workers", "rel_error"]])
        mean = pd.concat(mine).groupby("workers")["rel_error"].mean()
        ax.plot(mean.index, 100 * mean.values, "k-", lw=1.5, label="mean (bias)")
        ax.set_title(scheme, fontsize=10)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(schemes):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("error %")
    for ax in axes[-1, :]:
        ax.set_xlabel("workers P (held out)")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle("predicted vs measured time per epoch, per sweep (grey: within 5%)")
    fig.tight_layout()
    return save_figure(fig, path)


def build_parser():
    from real.cli import Parser
    p = Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("sweeps", nargs="+", help="folders holding a compare.csv (validate --out)")
    p.add_argument("--labels", default=None,
                   help="comma-separated names of the sweeps in the figure (default: folder names)")
    p.add_argument("--out", default=None, help="folder for pooled.csv and pooled.png "
                   "(default: print the tables only)")
    return p


def main(argv=None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    from real.cli import usage_error
    labels = args.labels.split(",") if args.labels else None
    if labels is not None and len(labels) != len(args.sweeps):
        return usage_error(PROG, f"--labels names {len(labels)} sweep(s) for "
                                 f"{len(args.sweeps)} folder(s)")
    try:
        pooled = pool(args.sweeps)
    except PoolError as e:
        return usage_error(PROG, str(e))
    print(format_tables(pooled, summary(pooled), len(args.sweeps)))
    if args.out:
        from calibrate.rawio import atomic_write_text
        out = Path(args.out)
        csv_path = atomic_write_text(out / "pooled.csv", pooled.to_csv(index=False))
        png = pool_plot(args.sweeps, out / "pooled.png", labels)
        print(f"\nwrote {csv_path}, {png}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
