"""Predict a shipped validation's points again with the model of this checkout.

    python -m benchmarks.repredict docs/results/validation-1 docs/results/cluster-3 \
        --train-size cluster-3=3072 --out new.csv

A validation folder under ``docs/results`` keeps its ``compare.csv`` and profile but
not its run records, so ``simulator.compare`` cannot run there again. This predicts
every row of ``compare.csv`` from what the row and the folder say: a one-host
validation (``holdout_profile.json``) on the calibrated host, an emulated-cluster one
(``profile.json``, ``link.toml``) on its hosts with the row's shaped rate and the
calibrated link, sharing the machine's cores; the dataset is Fashion-MNIST's 60000
samples on one host; on the cluster ``pipelines.validate_cluster``'s ``--train-size``
(768, or ``--train-size FOLDER=N`` where the folder's command in docs/validation.md set
another). It writes one row per point (folder, scheme, P, link rate, measured, shipped
and new prediction, whether held out) and prints the held-out error per folder and
scheme; with ``--against`` another commit's CSV, the held-out errors there and here of
the schemes whose predictions moved. Another commit's model predicts through a worktree
of it on ``PYTHONPATH`` (this file runs there by its path):

    git worktree add ../before COMMIT
    PYTHONPATH=../before python benchmarks/repredict.py FOLDERS... --out before.csv
    python -m benchmarks.repredict FOLDERS... --out after.csv --against before.csv

(At the commit that made a ``compare.csv`` the new prediction equals the shipped one.)

``--loop-ms MS`` gives each profile without it the training loop's Python a step
(``Profile.loop_s_per_step``; ``benchmarks/outside_rows.py`` measures it): the shipped
profiles predate its fit from the calibration's runs. ``--server-probe WORKDIR`` gives each folder's profile the real server's update per
model from a server probe's ``server_update.csv`` (``python -m calibrate.probe --part
server``), where the profile has none, with its curve against the idle time before it
where the probe timed one: the shipped profiles predate that probe, and their folders
keep no probe tables to refit from. (On one host the ranks spin: the server is never
idle, and the curve charges its back-to-back median.) ``--copy-probe CSV`` gives each profile
without them the host's copies of a flat vector (``python -m calibrate.copy_probe``: into
kept memory and into a new tensor, ``Profile.copy_s``), which the schemes that average one
flat vector pay around their calls. ``--cpu-per-message US`` predicts the emulated links with
that CPU a gloo message instead of each folder's calibrated one: the calibration's figure
varies from one calibration to the next more than its own interval says, and the predictions
at the two ends of that spread are the range the prediction carries.

A phantom validation's folder (``docs/results/phantom-N``: its ``workloads`` and
``link.toml``) is predicted again from its run records (``records.tar.xz``) with the profile
it was compared with (``profile.json``), as ``pipelines.validate_phantom --skip-runs`` compares
them (each prediction needs its record: the poll setting, the shapers' bursts, the run's
training-set size; a profile without the loop's Python a step takes its held-in records',
not ``--loop-ms``), held out as its ``compare.csv`` held them out (P above the largest P it
kept, or a rate other than the calibrated one); it prints that folder's error table as
``table.md`` gives it, then the held-out errors as for the other folders:

    python -m benchmarks.repredict docs/results/phantom-7 --out new.csv

``--pool`` pools the held-out rows of every folder given and prints one table, a row per
scheme and one for all: the median and worst |error|, the points, the folders they come
from, and whether the goal (``--goal-median``, ``--goal-worst``: the phantom regime's 5% and
12% by default) is met; the current-result table of docs/validation.md quotes it for the
phantom validations:

    python -m benchmarks.repredict docs/results/phantom-{1,2,3,4,5,6,7,8,9,10} --pool \
        --out phantom-now.csv

Imports: pandas, simulator, contracts, report.stats, pipelines.validate_phantom (its comparison).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from simulator.compare import emulated_link, model_workloads, workload_files
import cli
from contracts import profile as profiles
from contracts.cluster import Cluster, calibrated_cluster, load_link_calibration
from contracts.files import atomic_write_text
from contracts.workload import Workload
from report.stats import median_worst, scheme_sets
from simulator.engine import simulate
from simulator.engine.machine import machine
from simulator.model.config import SchemeConfig

PROG = "python -m benchmarks.repredict"
CLUSTER_SAMPLES = 768     # pipelines.validate_cluster's default --train-size


def cluster_of(folder: Path, row, prof, cpu_s_per_message: float | None = None):
    """The machine a row ran on: the calibrated host, or the emulated cluster (its CPU a
    message ``cpu_s_per_message`` where given instead of the calibration's)."""
    if not (folder / "link.toml").exists():
        return calibrated_cluster(prof.cores)
    cal = load_link_calibration(folder / "link.toml")
    if cpu_s_per_message is not None:
        from dataclasses import replace
        cal = replace(cal, cpu_s_per_message=cpu_s_per_message)
    link = emulated_link(row["bandwidth_bits_per_s"], link=cal, cores=prof.cores)
    return Cluster(hosts=int(row["hosts"]), cores_per_host=prof.cores, link=link,
                   shared_cores=True)


def repredict(folder: Path, cluster_samples: int, server_rows: list[dict] = (),
              loop_s: float = 0.0, copy_rows: list[dict] = (),
              cpu_s_per_message: float | None = None) -> pd.DataFrame:
    """One row per row of the folder's ``compare.csv``, predicted again (``loop_s``: the
    training loop's Python a step for a profile without it; ``copy_rows``: a copy probe's
    rows for a profile without the host's copies; ``cpu_s_per_message``: the link's CPU a
    message instead of the calibration's)."""
    emulated = (folder / "link.toml").exists()
    prof = profiles.load(folder / ("profile.json" if emulated else "holdout_profile.json"))
    if loop_s and not prof.loop_s_per_step:
        from dataclasses import replace
        prof = replace(prof, loop_s_per_step=loop_s)
    if server_rows:
        from calibrate.fits.fit_compute import with_server_probe
        prof = with_server_probe(prof, list(server_rows))
    if copy_rows and not prof.copy_s_per_byte:
        from calibrate.probes.copy_probe import with_copy_probe
        prof = with_copy_probe(prof, list(copy_rows))
    rows = []
    for _, r in pd.read_csv(folder / "compare.csv").iterrows():
        work = Workload(model=r["model"], batch_per_worker=int(r["batch_per_worker"]),
                        dataset_samples=cluster_samples if emulated else 60000, epochs=1.0,
                        threads_per_worker=int(r["threads"]))
        on = cluster_of(folder, r, prof, cpu_s_per_message)
        mach = machine(prof, "", on, model_workloads(prof, workload_files(None), [work.model]))
        new = simulate(SchemeConfig(r["scheme"]), int(r["workers"]), work, on, mach.profile, 0)
        rows.append({"folder": folder.name, "scheme": r["scheme"], "model": r["model"],
                     "workers": int(r["workers"]),
                     "bandwidth_bits_per_s": r.get("bandwidth_bits_per_s"),
                     "measured_s": r["measured_s"], "shipped_s": r["predicted_s"],
                     "predicted_s": new.epoch_s, "held_out": bool(r["held_out"])})
    return pd.DataFrame(rows)


def is_phantom(folder: Path) -> bool:
    """A ``pipelines.validate_phantom`` folder: it keeps the workloads its runs slept."""
    return (folder / "workloads").is_dir()


def calibrate_workers_of(shipped: pd.DataFrame) -> int:
    """The ``--calibrate-workers`` of a phantom comparison: the largest P it did not hold
    out (its ``held_out`` column is P above it)."""
    kept = shipped.loc[~shipped["held_out"].astype(bool), "workers"]
    return int(kept.max()) if len(kept) else int(shipped["workers"].min()) - 1


def repredict_phantom(folder: Path, server_rows: list[dict] = (), copy_rows: list[dict] = (),
                      cpu_s_per_message: float | None = None) -> tuple[pd.DataFrame, str]:
    """One row per row of a phantom folder's ``compare.csv``, predicted again from its
    records, and the folder's error table (``table.md``'s first) of the new predictions;
    ``ValueError`` with one line where the folder lacks what that needs."""
    from contracts import record_archive
    from pipelines.validate_phantom import compared
    from simulator.output.cluster_report import error_table, markdown_errors
    if not (folder / "profile.json").is_file():
        raise ValueError(f"{folder} has no profile.json: the profile its comparison used")
    shipped = pd.read_csv(folder / "compare.csv")
    try:
        with record_archive.unpacked(folder) as runs:
            df, why = compared(folder, folder / "profile.json", calibrate_workers_of(shipped),
                               server_rows=tuple(server_rows), runs=runs,
                               copy_rows=tuple(copy_rows),
                               link_values=({} if cpu_s_per_message is None
                                            else {"cpu_s_per_message": cpu_s_per_message}))
    except record_archive.ArchiveError as e:
        raise ValueError(str(e)) from None
    if df is None:
        raise ValueError(why)
    note = df.attrs.get("held_in_steps", "")
    df["held_out_any"] = df["held_out_p"] | df["unseen_rate"]
    key = ["scheme", "workers", "model", "bandwidth_bits_per_s"]
    m = df.merge(shipped[key + ["predicted_s"]], on=key, how="left", suffixes=("", "_shipped"))
    rows = pd.DataFrame({"folder": folder.name, "scheme": m["scheme"], "model": m["model"],
                         "workers": m["workers"],
                         "bandwidth_bits_per_s": m["bandwidth_bits_per_s"],
                         "measured_s": m["measured_s"], "shipped_s": m["predicted_s_shipped"],
                         "predicted_s": m["predicted_s"], "held_out": m["held_out_any"]})
    return rows, "\n".join(filter(None, [note, markdown_errors(error_table(df))]))


def moved(before: pd.DataFrame, after: pd.DataFrame) -> pd.DataFrame:
    """Held-out error per kind of validation (one host, cluster) and scheme, before and
    after, for the schemes with a prediction that moved: points, mean signed error and
    median absolute error, each as a fraction."""
    key = ["folder", "scheme", "workers", "bandwidth_bits_per_s"]
    if "model" in after and "model" in before:        # a phantom folder's workloads
        key.append("model")
    m = after.merge(before[key + ["predicted_s"]], on=key, how="left",
                    suffixes=("", "_before"))
    m["validation"] = m["folder"].str.rsplit("-", n=1).str[0].replace("validation", "one host")
    shift = (m["predicted_s"] / m["predicted_s_before"] - 1).abs()
    changed = set(zip(m.loc[shift > 1e-6, "validation"], m.loc[shift > 1e-6, "scheme"]))
    of_changed = pd.Series([k in changed for k in zip(m["validation"], m["scheme"])],
                           index=m.index)
    m = m[m["held_out"] & of_changed]
    m["before"] = m["predicted_s_before"] / m["measured_s"] - 1
    m["after"] = m["predicted_s"] / m["measured_s"] - 1
    g = m.groupby(["validation", "scheme"])
    return pd.DataFrame({"points": g.size(),
                         "mean before": g["before"].mean(), "mean after": g["after"].mean(),
                         "median |e| before": g["before"].apply(lambda e: e.abs().median()),
                         "median |e| after": g["after"].apply(lambda e: e.abs().median())})


def bias(df: pd.DataFrame) -> pd.DataFrame:
    """The held-out signed error per scheme (rows) and P (columns), averaged over the
    folders: the bias ``simulator.pool`` reports, here over the new predictions; an
    emulated-cluster row is its own configuration, named by its link rate as there."""
    held = df[df["held_out"]]
    error = held["predicted_s"] / held["measured_s"] - 1
    rate = held["bandwidth_bits_per_s"]
    name = [s if pd.isna(b) else f"{s}-{int(b) // 10**6}mbit" for s, b in zip(held["scheme"], rate)]
    return error.groupby([pd.Series(name, index=held.index, name="scheme"),
                          held["workers"]]).mean().unstack("workers")


def folder_list(names) -> str:
    """``phantom-1, -2, -6`` or ``phantom-1 to -10``: the folders' names, their shared stem
    written once and three or more numbers in a row as a range."""
    names = sorted(set(names))
    stem = names[0].rpartition("-")[0] + "-" if names else ""
    if stem == "-" or not all(n.startswith(stem) and n[len(stem):].isdigit() for n in names):
        return ", ".join(names)
    numbers = sorted(int(n[len(stem):]) for n in names)
    runs = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    parts = [f"-{a} to -{b}" if b - a >= 2 else ", ".join(f"-{i}" for i in range(a, b + 1))
             for a, b in runs]
    return stem[:-1] + ", ".join(parts)


def pooled(df: pd.DataFrame, goal_median: float, goal_worst: float) -> pd.DataFrame:
    """The held-out rows of every folder, pooled per scheme (and ``all``): median and worst
    |error| (fractions), points, the folders they come from, and which part of the goal
    (median at most ``goal_median``, worst at most ``goal_worst``, fractions) they meet."""
    held = df[df["held_out"].astype(bool)]
    held = held.assign(rel_error=held["predicted_s"] / held["measured_s"] - 1)
    everyone, *schemes = scheme_sets(held)
    rows = []
    for scheme, g in [*schemes, everyone]:
        median, worst = median_worst(g["rel_error"])
        met = {(True, True): "yes", (True, False): "median, not worst",
               (False, True): "worst, not median", (False, False): "no"}[
            (median <= goal_median, worst <= goal_worst)]
        rows.append({"scheme": scheme, "held-out median": median, "worst": worst,
                     "points": len(g), "validations": folder_list(g["folder"]),
                     "goal met": met})
    return pd.DataFrame(rows)


def markdown_pool(table: pd.DataFrame) -> str:
    """``pooled``'s table as the docs give it (errors to a tenth of a percent)."""
    lines = ["| " + " | ".join(table.columns) + " |", "|---|---:|---:|---:|---|---|"]
    for r in table.itertuples(index=False):
        lines.append(f"| {r[0]} | {100 * r[1]:.1f}% | {100 * r[2]:.1f}% | {r[3]} | {r[4]} | "
                     f"{r[5]} |")
    return "\n".join(lines)


def train_sizes(items: list[str], prog: str) -> dict[str, int] | None:
    sizes = {}
    for item in items:
        name, _, n = item.partition("=")
        if not name or not n.isdigit() or int(n) < 1:
            cli.usage_error(prog, f"--train-size {item!r}: give FOLDER=N, N a whole number "
                                  "above 0")
            return None
        sizes[name] = int(n)
    return sizes


def build_parser() -> cli.Parser:
    ap = cli.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=cli.input_folder,
                    help="validation folders (docs/results/...)")
    ap.add_argument("--out", type=cli.output_file(".csv"), required=True, help="CSV to write")
    ap.add_argument("--train-size", action="append", default=[], metavar="FOLDER=N",
                    help="training samples of an emulated-cluster validation's runs where "
                         f"they were not {CLUSTER_SAMPLES} (FOLDER: the folder's name)")
    ap.add_argument("--against", type=cli.input_file, metavar="CSV",
                    help="this command's CSV from another commit: print the held-out errors "
                         "of the schemes that moved, there against here")
    ap.add_argument("--loop-ms", type=cli.nonnegative_float, default=0.0, metavar="MS",
                    help="the training loop's Python a step (Profile.loop_s_per_step, ms) for "
                         "profiles that have none (benchmarks/outside_rows.py measures it)")
    ap.add_argument("--server-probe", type=cli.input_folder, metavar="WORKDIR",
                    help="a server probe's workdir (server_update.csv): the real server's "
                         "update per model, for profiles that have none")
    ap.add_argument("--copy-probe", type=cli.input_file, metavar="CSV",
                    help="a copy probe's CSV (python -m calibrate.copy_probe): the host's "
                         "copies of a flat vector, for profiles that have none")
    ap.add_argument("--cpu-per-message", type=cli.nonnegative_float, metavar="US",
                    help="the emulated links' CPU a gloo message, microseconds, instead of each "
                         "folder's calibrated cpu_per_message: the predictions at either end "
                         "of the calibrations' spread")
    ap.add_argument("--pool", action="store_true",
                    help="print the held-out rows of all the folders pooled per scheme: "
                         "median and worst |error|, points, folders, goal met")
    ap.add_argument("--goal-median", type=cli.positive_float, default=5.0, metavar="PCT",
                    help="--pool's goal for the held-out median |error|, percent")
    ap.add_argument("--goal-worst", type=cli.positive_float, default=12.0, metavar="PCT",
                    help="--pool's goal for the worst held-out |error|, percent")
    return ap


def run(a) -> int:
    sizes = train_sizes(a.train_size, PROG)
    if sizes is None:
        return 2
    folders = [Path(f) for f in a.folders]
    for f in folders:
        if not (f / "compare.csv").is_file():
            return cli.usage_error(PROG, f"{f} has no compare.csv: give a validation folder "
                                         "under docs/results")
    server_rows = []
    if a.server_probe:
        table = Path(a.server_probe) / "server_update.csv"
        if not table.is_file():
            return cli.usage_error(PROG, f"{a.server_probe} has no server_update.csv: run "
                                         "python -m calibrate.probe --part server there")
        server_rows = pd.read_csv(table).to_dict("records")
    copy_rows = []
    if a.copy_probe:
        from calibrate.probes.copy_probe import fit, read_rows
        try:
            copy_rows = read_rows(a.copy_probe)
            fit(copy_rows)
        except ValueError as e:
            return cli.usage_error(PROG, f"--copy-probe {e}")
    frames, tables = [], []
    cpu_s = None if a.cpu_per_message is None else a.cpu_per_message / 1e6
    for f in folders:
        if not is_phantom(f):
            frames.append(repredict(f, sizes.get(f.name, CLUSTER_SAMPLES), server_rows,
                                     a.loop_ms / 1e3, copy_rows, cpu_s))
            continue
        try:
            rows, table = repredict_phantom(f, server_rows, copy_rows, cpu_s)
        except ValueError as e:
            return cli.usage_error(PROG, f"{e}")
        frames.append(rows)
        tables += [f"{f}: its errors, predicted again (as its table.md gives them)", table, ""]
    df = pd.concat(frames, ignore_index=True)
    try:       # (cli.one_line_io_errors is younger than the commits this runs against)
        atomic_write_text(a.out, df.to_csv(index=False))
    except OSError as e:
        print(f"{PROG}: error: {a.out}: {e.strerror or e}", file=sys.stderr)
        return 1
    cli.print_out(*tables)
    pct = {"float_format": lambda x: f"{100 * x:+.1f}%"}
    unsigned = {c: lambda x: f"{100 * x:.1f}%" for c in ("median |e| before", "median |e| after")}
    if a.against:
        table = moved(pd.read_csv(a.against), df)
        cli.print_out("held-out error of the schemes whose predictions moved, "
                      f"{a.against} -> this checkout",
                      table.to_string(formatters=unsigned, **pct) if len(table) else "(none moved)")
    else:
        df["error"] = df["predicted_s"] / df["measured_s"] - 1
        held = df[df["held_out"]].groupby(["folder", "scheme"])["error"]
        cli.print_out(held.agg(["mean", "median", "count"]).to_string(**pct))
        if len(folders) > 1:
            cli.print_out("bias over the folders (mean signed held-out error, by P)",
                          bias(df).to_string(**pct))
    if a.pool:
        cli.print_out(f"held-out |error| pooled over the folders (goal: median at most "
                      f"{a.goal_median:g}%, worst at most {a.goal_worst:g}%)",
                      markdown_pool(pooled(df, a.goal_median / 100, a.goal_worst / 100)))
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
