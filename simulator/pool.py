"""Bias or noise? The held-out errors of several hold-out sweeps, side by side.

One sweep's error at a point mixes the model's bias with that sweep's noise:
the measurement's own spread (2-3 repeats) and its calibration's. Repeating
the whole loop (``pipelines.validate``) on other days and pooling separates
them: an error that keeps its sign and size on every sweep is the model's; one
that changes sign from sweep to sweep is noise. Per scheme and P this reports
the mean signed error over the sweeps (the bias estimate), its range, and in
how many sweeps the prediction fell inside the measured 95% CI::

    python -m simulator.pool validation-1 validation-2 validation-3 --out pooled/
    python -m simulator.pool docs/results/validation-1 ... --labels v1,v2,... --out pooled/

Each folder holds the ``compare.csv`` of ``simulator.compare`` (as ``validate``
leaves it). Writes ``pooled.csv`` and ``pooled.png`` (one panel per scheme:
each sweep's signed error per P, their mean, the +-5% band) into ``--out``.
Folders of ``pipelines.validate_accuracy`` (one seed each) are pooled over their
seeds instead (``simulator.pool_accuracy``): ``pooled_accuracy.csv`` and
``time-to-target.png``.

Imports: matplotlib, pandas, cli, contracts (files, tables).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

import cli
from contracts.tables import TableError, read_table

PROG = "python -m simulator.pool"
NEEDED = {"scheme": "text", "workers": "positive_count", "measured_s": "positive",
          "measured_ci_s": "seconds", "predicted_s": "positive", "rel_error": "number",
          "held_out": "bool", "hosts": "positive_count?", "bandwidth_bits_per_s": "positive?"}


class PoolError(ValueError):
    """A folder without a readable comparison; shown as one line, exit code 2."""


def read_sweep(folder: Path) -> pd.DataFrame:
    """The held-out rows of one sweep's ``compare.csv`` (all rows if none is held out)."""
    path = Path(folder) / "compare.csv"
    if not path.is_file():
        raise PoolError(f"{folder} has no compare.csv (run python -m simulator.compare "
                        f"or pipelines.validate there first)")
    optional = {k: v for k, v in NEEDED.items() if v.endswith("?")}
    try:
        head = read_table(path, {})
        df = read_table(path, {k: v for k, v in NEEDED.items()
                               if not v.endswith("?") or k in head.columns})
    except TableError as e:
        if "lacks column" in str(e):
            raise PoolError(f"{e}: not a simulator.compare table") from None
        raise PoolError(str(e)) from None
    for col in optional:
        if col not in df.columns:
            df[col] = pd.NA
    held = df[df["held_out"]]
    return _cluster_named(held if len(held) else df)


def _cluster_named(df: pd.DataFrame) -> pd.DataFrame:
    """Emulated-cluster rows are other configurations: their scheme name says so, by the
    link rate (one rank per host: how many idle hosts a sweep brought up does not count)."""
    if "hosts" not in df.columns:
        return df
    hosts = df["hosts"].fillna(1).astype(int)
    bw = df.get("bandwidth_bits_per_s", pd.Series(0.0, index=df.index)).fillna(0)
    return df.assign(scheme=[s if h == 1 else f"{s}-{int(b) // 10**6}mbit"
                             for s, h, b in zip(df["scheme"], hosts, bw)])


def read_sweeps(folders, labels=None) -> pd.DataFrame:
    """Every sweep's rows, read once, with its label and whether the prediction fell inside
    the measured 95% CI."""
    labels = labels or [Path(f).name for f in folders]
    frames = []
    for label, f in zip(labels, folders):
        df = read_sweep(Path(f))
        frames.append(df.assign(sweep=label,
                                inside_ci=(df["predicted_s"] - df["measured_s"]).abs()
                                <= df["measured_ci_s"],
                                ci_rel=df["measured_ci_s"] / df["measured_s"]))
    return pd.concat(frames, ignore_index=True)


def pool(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (scheme, P) seen in any sweep: the signed errors' mean, min and max over
    the sweeps, and how many sweeps predicted inside the measured 95% CI."""
    return rows.groupby(["scheme", "workers"]).agg(
        sweeps=("rel_error", "size"), mean_error=("rel_error", "mean"),
        min_error=("rel_error", "min"), max_error=("rel_error", "max"),
        inside_ci=("inside_ci", "sum"),
        measured_ci_rel=("ci_rel", "mean")).reset_index()   # CI half-width / time, mean


def summary(pooled: pd.DataFrame) -> pd.DataFrame:
    """Per scheme: median and worst |mean error| over P (the bias), the widest range between
    sweeps, and the share of the points inside the measured CI."""
    g = pooled.assign(abs_mean=pooled["mean_error"].abs(),
                      spread=pooled["max_error"] - pooled["min_error"]).groupby("scheme")
    return pd.DataFrame({
        "bias_median": g["abs_mean"].median(), "bias_worst": g["abs_mean"].max(),
        "spread_worst": g["spread"].max(),
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


def pool_plot(rows: pd.DataFrame, pooled: pd.DataFrame, path: Path) -> Path:
    """One panel per scheme: each sweep's signed error against P, the mean, a +-5% band."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    from contracts.files import save_figure
    schemes = sorted(set(pooled["scheme"]))
    sweeps = list(dict.fromkeys(rows["sweep"]))
    cols = min(3, len(schemes))
    n_rows = -(-len(schemes) // cols)
    fig, axes = plt.subplots(n_rows, cols, figsize=(4 * cols, 2.8 * n_rows), sharey=True,
                             squeeze=False)
    for ax, scheme in zip(axes.flat, schemes):
        ax.axhspan(-5, 5, color="0.9", zorder=0)
        ax.axhline(0, color="k", lw=0.8)
        for i, name in enumerate(sweeps):
            d = rows[(rows["scheme"] == scheme) & (rows["sweep"] == name)].sort_values("workers")
            ax.plot(d["workers"], 100 * d["rel_error"], "o", ms=4, color=f"C{i}", label=name)
        mean = pooled[pooled["scheme"] == scheme].sort_values("workers")
        ax.plot(mean["workers"], 100 * mean["mean_error"], "k-", lw=1.5, label="mean (bias)")
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
    p = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("sweeps", nargs="+", type=cli.input_folder,
                   help="folders holding a compare.csv (validate --out)")
    p.add_argument("--labels", default=None,
                   help="comma-separated names of the sweeps in the figure (default: folder names)")
    p.add_argument("--out", default=None, type=cli.output_folder,
                   help="folder for pooled.csv and pooled.png (default: print the tables only)")
    p.add_argument("--held-out-above", type=cli.nonnegative_int, default=0, metavar="K",
                   help="accuracy validations: also summarise the points P > K (those beyond "
                        "the calibration's P <= K)")
    return p


def pool_accuracy_main(args, labels) -> int:
    """The accuracy validations of ``args.sweeps``, pooled over their seeds."""
    from simulator import pool_accuracy as pa
    from cli import print_out, usage_error
    try:
        rows, target = pa.read_validations(args.sweeps, labels or
                                           [Path(f).name for f in args.sweeps])
    except pa.AccuracyPoolError as e:
        return usage_error(PROG, str(e))
    pooled = pa.pool(rows)
    written = pa.write_outputs(pooled, target, Path(args.out)) if args.out else []
    print_out(pa.format_table(pooled, len(args.sweeps), target, args.held_out_above))
    if written:
        print(f"\nwrote {', '.join(map(str, written))}", file=sys.stderr)
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


def run(args) -> int:
    from cli import usage_error
    labels = [x.strip() for x in args.labels.split(",")] if args.labels is not None else None
    if labels is not None and len(labels) != len(args.sweeps):
        return usage_error(PROG, f"--labels names {len(labels)} sweep(s) for "
                                 f"{len(args.sweeps)} folder(s)")
    if labels is not None and not all(labels):
        return usage_error(PROG, f"--labels {args.labels!r} has an empty name")
    from simulator.pool_accuracy import is_accuracy_folder
    kinds = {is_accuracy_folder(f) for f in args.sweeps}
    if kinds == {True}:
        return pool_accuracy_main(args, labels)
    if len(kinds) > 1:
        return usage_error(PROG, "the folders mix accuracy validations with time-per-epoch "
                                 "sweeps; pool one kind at a time")
    try:
        rows = read_sweeps(args.sweeps, labels)
    except PoolError as e:
        return usage_error(PROG, str(e))
    pooled = pool(rows)
    written = []
    if args.out:                  # files first: a reader piping the tables into head keeps them
        from contracts.files import atomic_write_text
        out = Path(args.out)
        written = [atomic_write_text(out / "pooled.csv", pooled.to_csv(index=False)),
                   pool_plot(rows, pooled, out / "pooled.png")]
    from cli import print_out
    print_out(format_tables(pooled, summary(pooled), len(args.sweeps)))
    if written:
        print(f"\nwrote {', '.join(map(str, written))}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
