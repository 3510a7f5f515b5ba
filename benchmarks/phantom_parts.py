"""Measured against predicted, part by part, at every point of shipped phantom validations.

    python -m benchmarks.phantom_parts docs/results/phantom-1 docs/results/phantom-6 \
        --schemes ps_sync,psgd --bandwidths 1000 [--server-probe WORKDIR] [--out parts.csv]
    python -m benchmarks.phantom_parts docs/results/phantom-{13,14,15} --held-out --by-demand \
        --plot demand.png
    python -m benchmarks.phantom_parts docs/results/phantom-{13,14,15} --held-out --by-core-waits

Each folder's points are predicted again from its records as ``benchmarks.repredict`` does
(the profile its comparison used, its calibrated link, its held-out flags) and each point's
measured figure, ``simulator.compare.steady_epoch_s``, is split exactly as
``benchmarks/ddp_breakdown.py`` splits it (``epoch_parts``; ms an epoch, scaled by
n / (n - 1)):

* *outside*: the window's time before rank 0's first step and after its last (``setup``:
  the ranks' uneven start, DDP's constructor, the parameter server's first w) plus the
  first rows' *skew* (rank 0's first row less the slowest one's: a collective's first
  row absorbs the uneven start, and the skew gives it back);
* *steps*: rank 0's rows after its first and its loop's Python between them, and once,
  unscaled, the slowest worker's closing average (``iteration`` -1), as
  ``compare.steady_epoch_s`` counts it.

The gap, predicted less measured, is then *steps* (the model's whole epoch against the
steps) plus *outside* (which the model does not hold apart from its steps: its start-up
communication, DDP's weights broadcast and the server's first w, is inside its epoch). A
step is set beside the model's: the workers' compute row against what the workload sleeps
(the *sleeps' overrun*: a slept step that took longer than asked, the testbed's) and
against the model's compute a step (the sleeps and the loop's Python), and the workers'
communication and waiting against the model's (ddp's compute row holds its buckets'
all-reduces, so there the two are one, ``comm``). Also per point: the *first spread*, the
largest wait at the run's first synchronisation (a collective's first row, else the
closing average): how unevenly the ranks started; the CPU check's bar (the largest
share of its window a rank's thread waited for a core); and a rank's *core waits a step*:
every thread's time runnable without a core (``testbed.checks.cpu.thread_waits``, the short
wake-up waits the bar does not count included), summed over its threads, mean over the
ranks, over the steps (``benchmarks.core_waits``' *all waits*, a step): what the two shared
cores could have added to a step that the hosts the point stands for would not; and, in
records that keep it (``timings.rank_starts_s``, which older records lack), the
*start spread*: the last rank's start of training after the first's; and the *CPU asked /
cores*: the CPU the ranks' threads asked for (running or runnable, ``real.records.load``'s
``demand_cores``) against the machine's cores, above 1 where the testbed had fewer cores
than the ranks wanted, which the hosts the point stands for would not have lacked.
``--by-demand`` prints the |error| by that share instead of the points (at most the cores,
up to twice, beyond), ``--by-core-waits`` by the *core waits a step* against the step
(under 10%, 10-20%, over 20%: the share of a step the two shared cores could have added),
``--plot`` draws each point's |error| against the CPU asked.

*where*: the part that holds most of the gap: ``outside`` (start-up and the uneven start,
outside any step), ``sleeps`` (the compute rows beyond the model's compute) or ``comm``
(communication and waiting inside the steps). Reads records only; the records
``simulator.compare`` leaves out are left out here.

Imports: pandas, contracts, pipelines.validate_phantom, simulator.compare, benchmarks.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pandas as pd

import cli

PROG = "python -m benchmarks.phantom_parts"


def step_figures(it: pd.DataFrame, server: bool) -> dict:
    """A record's workers' rows after their first (a server's rank 0 left out): compute and
    communication + waiting a step (means, s), and the first spread (s): the largest wait at
    the first synchronisation, the first rows where any rank waited, else the closing
    average's (``iteration`` -1)."""
    workers = it[it["rank"] > 0] if server else it
    steady = workers[workers["iteration"] >= 1]
    first = it[it["iteration"] == 0]["wait_s"]
    spread = float(first.max()) if len(first) and first.max() > 0 else float(
        it[it["iteration"] < 0]["wait_s"].max() if (it["iteration"] < 0).any() else 0.0)
    return {"compute_s": float(steady["compute_s"].mean()),
            "comm_wait_s": float((steady["comm_s"] + steady["wait_s"]).mean()),
            "first_spread_s": spread}


def record_parts(rec: dict, it: pd.DataFrame, server: bool) -> dict:
    """One record's steady epoch split (``epoch_parts``) and its step figures."""
    from benchmarks.ddp_breakdown import core_wait_per_step_s, epoch_parts
    rows = it.astype({"rank": str, "iteration": str}).to_dict("records")
    parts = epoch_parts(rec, rows, server)
    bar = max(m["max_wait_share"] for m in rec["testbed"]["checks"]["cpu"]["machines"])
    core_wait = core_wait_per_step_s(rec, parts["steps"])
    starts = rec["timings"].get("rank_starts_s")
    return {**parts, **step_figures(it, server), "bar_share": bar, "core_wait_s": core_wait,
            "start_spread_s": max(starts) if starts else float("nan"),
            "demand_share": demand_share(rec)}


def demand_share(rec: dict) -> float:
    """The CPU the ranks asked for against the cores they could use, on the machine where
    that was most (``load.machines``: ``demand_cores``, the ranks' time running or runnable
    a second of the window, ``real.records.load``; over ``cores``). Above 1 the ranks'
    threads wanted more cores than the testbed has, which the hosts the point stands for,
    each with cores of its own, would not have lacked; NaN where the record has no meter."""
    shares = [m["demand_cores"] / m["cores"] for m in rec.get("load", {}).get("machines", ())
              if m.get("cores") and m.get("demand_cores") is not None]
    return max(shares, default=float("nan"))


def point_row(recs: list[dict], pred: dict, slept_step_s: float,
              overlaps: bool = False) -> dict:
    """A point's parts (ms an epoch, ms a step), measured (mean over ``recs``' parts)
    against ``pred`` (its compare row: ``measured_s``, ``predicted_s`` and its compute, comm
    and wait per epoch), and where the gap lies. The error is the compare row's; the parts
    are ``epoch_parts``', whose n is the steps (a closing average counted once, not as one). With
    ``overlaps`` (DDP: the buckets' all-reduces run inside the compute row) the compute row
    is not set against the model's compute: its whole gap is ``comm``."""
    m = {k: statistics.fmean(r[k] for r in recs) for k in recs[0]}
    n = int(recs[0]["steps"])
    outside = m["setup_s"] + m["skew_s"]
    steps = m["loop_s"] + m["rows_s"] + m["once_s"]
    predicted = pred["predicted_s"]
    pred_compute = pred["predicted_compute_s"] / n
    gap = {"outside": -outside,
           "sleeps": 0.0 if overlaps else -(m["compute_s"] - pred_compute) * n}
    gap["comm"] = predicted - steps - gap["sleeps"]
    return {"measured_ms": pred["measured_s"] * 1e3, "predicted_ms": predicted * 1e3,
            "error": predicted / pred["measured_s"] - 1,
            "outside_ms": outside * 1e3, "steps_ms": steps * 1e3,
            "steps_error": predicted / steps - 1,
            "compute_step_ms": m["compute_s"] * 1e3, "slept_step_ms": slept_step_s * 1e3,
            "sleeps_overrun": float("nan") if overlaps else m["compute_s"] / slept_step_s - 1,
            "predicted_compute_step_ms": pred_compute * 1e3,
            "comm_wait_step_ms": m["comm_wait_s"] * 1e3,
            "predicted_comm_wait_step_ms": (pred["predicted_comm_s"]
                                            + pred["predicted_wait_s"]) / n * 1e3,
            "first_spread_ms": m["first_spread_s"] * 1e3, "bar_share": m["bar_share"],
            "demand_share": m["demand_share"],
            "core_wait_step_ms": m["core_wait_s"] * 1e3,
            "core_wait_share": m["core_wait_s"] * n / steps,
            "start_spread_ms": m["start_spread_s"] * 1e3,
            "where": max(gap, key=lambda k: abs(gap[k])),
            **{f"gap_{k}_ms": v * 1e3 for k, v in gap.items()}, "steps": n, "runs": len(recs)}


def folder_parts(folder: Path, schemes: set[str] | None, rates: set[int] | None,
                 server_rows: tuple = ()) -> pd.DataFrame:
    """Every point of one shipped phantom folder (of ``schemes`` and ``rates`` in Mbit/s,
    all where None), a row each; ValueError with one line where the folder cannot be read."""
    from benchmarks.repredict import calibrate_workers_of
    from contracts import record_archive
    from contracts.workload import load_workload, slept
    from pipelines.validate_phantom import compared
    from real.schemes import SCHEMES
    from simulator.compare import iterations_of, usable_records
    from simulator.model.schemes import SCHEMES as MODEL_SCHEMES
    if not (folder / "profile.json").is_file() or not (folder / "compare.csv").is_file():
        raise ValueError(f"{folder}: not a shipped phantom validation (profile.json, "
                         "compare.csv)")
    shipped = pd.read_csv(folder / "compare.csv")
    out = []
    try:
        with record_archive.unpacked(folder) as runs:
            df, link = compared(folder, folder / "profile.json", calibrate_workers_of(shipped),
                                server_rows=server_rows, runs=runs)
            if df is None:
                raise ValueError(link)
            groups, _ = usable_records(runs, link, keep=("phantom",))
            for (scheme, workers, wl, bits, _), recs in groups.items():
                mbit = round(bits / 1e6)
                if (schemes and scheme.name not in schemes) or (rates and mbit not in rates):
                    continue
                pred = df[(df["scheme"] == scheme.name) & (df["workers"] == workers)
                          & (df["model"] == wl.model) & (df["bandwidth_bits_per_s"] == bits)]
                if pred.empty:
                    continue
                p = pred.iloc[0]
                c = recs[0]["compute"]
                step = slept(load_workload(p["workload"]), c["time_scale"]).step_s
                parts = [record_parts(r, iterations_of(r), SCHEMES[scheme.name].server)
                         for r in recs]
                overlaps = MODEL_SCHEMES[scheme.name].overlaps_backward
                out.append({"folder": folder.name, "scheme": scheme.name, "model": wl.model,
                            "workers": workers, "mbit": mbit, "held_out": bool(p["held_out_p"]
                                                                              or p["unseen_rate"]),
                            **point_row(parts, p.to_dict(), step, overlaps)})
    except record_archive.ArchiveError as e:
        raise ValueError(str(e)) from None
    return pd.DataFrame(out)


COLUMNS = {"folder": "folder", "scheme": "scheme", "model": "model", "workers": "P", "mbit": "Mbit/s",
           "error": "error", "steps_error": "steps only", "outside_ms": "outside (ms)",
           "gap_outside_ms": "gap: outside", "gap_sleeps_ms": "sleeps", "gap_comm_ms": "comm",
           "compute_step_ms": "compute a step", "predicted_compute_step_ms": "predicted",
           "sleeps_overrun": "sleeps' overrun", "comm_wait_step_ms": "comm+wait a step",
           "predicted_comm_wait_step_ms": "predicted ", "first_spread_ms": "first spread (ms)",
           "start_spread_ms": "start spread (ms)",
           "bar_share": "CPU bar", "core_wait_step_ms": "core waits a step (ms)",
           "demand_share": "CPU asked / cores",
           "where": "where"}


def markdown(df: pd.DataFrame) -> str:
    """The points as a markdown table (errors and shares in percent, times in ms)."""
    def cell(k, v):
        if isinstance(v, float) and v != v:
            return "-"
        if k == "demand_share":
            return f"{v:.2f}"
        if k in ("error", "steps_error", "sleeps_overrun", "bar_share"):
            return f"{100 * v:+.1f}%" if k != "bar_share" else f"{100 * v:.1f}%"
        if k == "model":
            return str(v).split("-")[0]
        return f"{v:.1f}" if isinstance(v, float) else str(v)
    lines = ["| " + " | ".join(COLUMNS.values()) + " |", "|" + "---|" * len(COLUMNS)]
    for r in df.to_dict("records"):
        lines.append("| " + " | ".join(cell(k, r[k]) for k in COLUMNS) + " |")
    return "\n".join(lines)


DEMAND_BINS = ((0.0, 1.0, "at most the cores"), (1.0, 2.0, "1-2x the cores"),
               (2.0, float("inf"), "over 2x the cores"))
CORE_WAIT_BINS = ((0.0, 0.10, "under 10% of the step"), (0.10, 0.20, "10-20% of the step"),
                  (0.20, float("inf"), "over 20% of the step"))
# how a point's |error| is binned: its column, the bins, and the table's heading for them
MEASURES = {"demand": ("demand_share", DEMAND_BINS, "CPU the ranks asked"),
            "core_waits": ("core_wait_share", CORE_WAIT_BINS, "core waits a step")}


def share_bin(share: float, bins=DEMAND_BINS) -> str:
    """The label of the bin of ``bins`` (lo, hi], label that holds ``share`` (NaN: unknown)."""
    return next((label for lo, hi, label in bins if lo < share <= hi), "unknown")


def by_measure(df: pd.DataFrame, measure: str = "demand", goal_worst: float = 0.12) -> pd.DataFrame:
    """|error| by a point's ``MEASURES[measure]``: how much CPU the ranks asked of the
    testbed's cores (``demand``) or how long a rank's threads waited for a core against
    the step (``core_waits``), for all schemes and for each: points, median, worst, and
    points beyond ``goal_worst`` (the phantom regime's 12%)."""
    column, bins, _heading = MEASURES[measure]
    d = df.assign(abs_error=df["error"].abs(),
                  bin=df[column].map(lambda x: share_bin(x, bins)))
    out = []
    for scheme, part in [("all", d), *d.groupby("scheme")]:
        for _lo, _hi, label in bins:
            e = part[part["bin"] == label]["abs_error"]
            if len(e):
                out.append({"scheme": scheme, "bin": label, "points": len(e),
                            "median": e.median(), "worst": e.max(),
                            "beyond goal": int((e > goal_worst).sum())})
    return pd.DataFrame(out)


def markdown_bins(table: pd.DataFrame, measure: str = "demand") -> str:
    """``by_measure``'s table in markdown (errors in percent)."""
    lines = [f"| scheme | {MEASURES[measure][2]} | points | median | worst | beyond 12% |",
             "|---|---|---:|---:|---:|---:|"]
    for r in table.to_dict("records"):
        lines.append(f"| {r['scheme']} | {r['bin']} | {r['points']} | "
                     f"{100 * r['median']:.1f}% | {100 * r['worst']:.1f}% | {r['beyond goal']} |")
    return "\n".join(lines)


def demand_figure(df: pd.DataFrame, path: Path, goal_worst: float = 0.12) -> Path:
    """|error| of each point against the CPU its ranks asked of the cores, a colour a scheme,
    the goal's worst as a line."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from contracts.files import save_figure
    fig = Figure(figsize=(7, 4.2))
    ax = fig.add_subplot()
    for scheme, part in df.groupby("scheme"):
        ax.plot(part["demand_share"], 100 * part["error"].abs(), "o", ms=4, alpha=0.7,
                label=scheme)
    ax.axhline(100 * goal_worst, color="k", lw=0.8, ls="--", label=f"goal: worst {goal_worst:.0%}")
    ax.axvline(1.0, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("CPU the ranks asked / the machine's cores (running or runnable)")
    ax.set_ylabel("|error| of time per epoch (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    ax.set_title("phantom points: error against the testbed's CPU "
                 "(python -m benchmarks.phantom_parts --by-demand)", fontsize=8)
    return save_figure(fig, path)


def build_parser() -> cli.Parser:
    ap = cli.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=cli.input_folder,
                    help="shipped phantom validations (docs/results/phantom-N)")
    ap.add_argument("--schemes", help="only these schemes, comma-separated (default: all)")
    ap.add_argument("--bandwidths", help="only these shaped rates in Mbit/s, comma-separated "
                                         "(default: all)")
    ap.add_argument("--held-out", action="store_true", help="only the held-out points")
    ap.add_argument("--server-probe", type=cli.input_folder, metavar="WORKDIR",
                    help="a server probe's workdir (server_update.csv), as for "
                         "benchmarks.repredict")
    ap.add_argument("--out", type=cli.output_file(".csv"), help="CSV to write (default: none)")
    ap.add_argument("--by-demand", action="store_true",
                    help="print |error| by the CPU the ranks asked of the machine's cores "
                         "instead of the points")
    ap.add_argument("--by-core-waits", action="store_true",
                    help="print |error| by a rank's threads' waits for a core against the "
                         "step instead of the points")
    ap.add_argument("--plot", type=cli.output_file(".png"),
                    help="PNG of each point's |error| against that CPU (default: none)")
    return ap


def run(a) -> int:
    if a.by_demand and a.by_core_waits:
        return cli.usage_error(PROG, "give --by-demand or --by-core-waits, not both")
    schemes = set(a.schemes.split(",")) if a.schemes else None
    try:
        rates = {int(x) for x in a.bandwidths.split(",")} if a.bandwidths else None
    except ValueError:
        return cli.usage_error(PROG, f"--bandwidths {a.bandwidths!r}: give whole Mbit/s, "
                                     "comma-separated (20,100,1000)")
    server_rows: tuple = ()
    if a.server_probe:
        table = Path(a.server_probe) / "server_update.csv"
        if not table.is_file():
            return cli.usage_error(PROG, f"{a.server_probe} has no server_update.csv")
        server_rows = tuple(pd.read_csv(table).to_dict("records"))
    frames = []
    for f in a.folders:
        try:
            frames.append(folder_parts(Path(f), schemes, rates, server_rows))
        except ValueError as e:
            return cli.usage_error(PROG, str(e))
    if a.by_demand:
        legend, table = ("|error| by the CPU the ranks asked (running or runnable, "
                         "real.records.load) against the machine's cores",
                         lambda df: markdown_bins(by_measure(df, "demand"), "demand"))
    elif a.by_core_waits:
        legend, table = ("|error| by a rank's threads' time runnable without a core a step "
                         "(all its threads, mean over the ranks) against the step",
                         lambda df: markdown_bins(by_measure(df, "core_waits"), "core_waits"))
    else:
        legend, table = ("gap = predicted - measured, ms an epoch; outside = before and after "
                         "the steps (setup and first-row skew); steps only = the error against "
                         "the steps", markdown)
    code = print_parts(a, PROG, frames, ["scheme", "mbit", "workers", "folder"],
                       "no point of those schemes and rates in the folders given", legend, table)
    if a.plot and code == 0:
        df = pd.concat(frames, ignore_index=True)
        print(demand_figure(df[df["held_out"]] if a.held_out else df, a.plot))
    return code


def print_parts(a, prog: str, frames: list[pd.DataFrame], order: list[str], none_msg: str,
                legend: str, table) -> int:
    """The parts tables' common end: the folders' rows pooled (held-out ones where asked),
    sorted by ``order``, written to ``a.out`` and printed under ``legend`` by ``table``;
    a usage error of ``prog`` with ``none_msg`` where no row is left. Shared with
    ``benchmarks.onehost_parts``."""
    from contracts.files import atomic_write_text
    df = pd.concat(frames, ignore_index=True)
    if a.held_out and len(df):
        df = df[df["held_out"]]
    if df.empty:
        return cli.usage_error(prog, none_msg)
    df = df.sort_values(order).reset_index(drop=True)
    if a.out:
        atomic_write_text(a.out, df.to_csv(index=False))
    cli.print_out(legend, table(df))
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
