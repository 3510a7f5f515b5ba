"""Predict the training times of a shipped time-to-accuracy check again with this checkout's model.

    python -m benchmarks.repredict_accuracy docs/results/accuracy-cluster8 \
        docs/results/accuracy-cluster8-seed3 \
        --profile docs/results/ps-async-order-cluster8/profile.json --out after.csv

A ``pipelines.validate_accuracy --cluster-rate`` folder keeps ``accuracy_validation.csv``
(per scheme and P: the measured and predicted training time, the last point of each curve,
mean over the seeds) and the link calibrated on the emulated cluster (``link.toml``), but
neither its run records nor its compute profile. This predicts each row's training time
again on the folder's cluster (``link.toml``: its hosts, one rank a host, the machine's cores
shared, its shapers' token buckets, its messages' CPU on those cores) with the compute
profile given (made by the check's own command,
``python -m calibrate --threads 1 --models cnn --max-workers 2 --quick``, on the same
machine), for the seeds the folder's report names, and splits the prediction into its
compute, communication and waiting (per worker, mean over the workers). The training times
of the schemes whose order of updates the scheme fixes are their times to a target too
(docs/results/accuracy-evidence.md, "Emulated cluster, P = 8"), so the training-time error
is the time-to-accuracy check's time error.

With ``--against`` this command's CSV from another commit (run there by path, with a
worktree of it on ``PYTHONPATH``, as ``benchmarks.repredict``), the error there and here per
scheme: with the profile held fixed, what moved is the model's communication (the commits
between changed nothing else a CPU point uses).

    git worktree add ../before 4bfe5d2
    PYTHONPATH=../before python benchmarks/repredict_accuracy.py FOLDERS... --profile P \
        --out before.csv
    python -m benchmarks.repredict_accuracy FOLDERS... --profile P --out after.csv \
        --against before.csv

It reads the model of whichever checkout is first on ``PYTHONPATH``, so it asks that
model's names only where every such commit has them (``ranks``, ``with_buckets``), and its
``main`` parses and reports its errors itself rather than through ``cli.command``: run
against another commit, ``cli`` is that commit's where it has one, and commits before
5f5247a have no ``cli.command``.

Imports: pandas, simulator.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pandas as pd

try:
    import cli
    from contracts import profile as profiles
    from contracts.cluster import load_cluster, load_link_calibration
    from contracts.files import atomic_write_text
    from contracts.workload import Workload
except ImportError:        # a commit before contracts/ moved out of simulator/ (the check's)
    from simulator.contracts import cli
    from simulator.contracts import profile as profiles
    from simulator.contracts.cluster import load_cluster, load_link_calibration
    from simulator.contracts.files import atomic_write_text
    from simulator.contracts.workload import Workload
from simulator.engine import simulate
from simulator.model.config import SchemeConfig
from simulator.model.schemes import SCHEMES

PROG = "python -m benchmarks.repredict_accuracy"


def seeds_of(folder: Path) -> list[int]:
    """The seeds the folder's report names ('... epochs, seeds 1, 2, target ...')."""
    report = folder / "report.md"
    text = report.read_text() if report.is_file() else ""
    m = re.search(r"seeds? ([\d, ]+?)(?:,? target|\n|;)", text)
    return [int(s) for s in re.findall(r"\d+", m.group(1))] if m else [1]


def with_buckets(cluster, link_toml: Path):
    """The cluster with its shapers' token buckets (``[fit] burst_bytes`` of the
    calibration, in payload bytes), where this checkout's model has them."""
    import dataclasses

    import tomllib
    burst = tomllib.loads(link_toml.read_text()).get("fit", {}).get("burst_bytes", 0)
    link = cluster.link
    if not burst or link is None or not hasattr(link, "burst_bytes"):
        return cluster
    share = load_link_calibration(link_toml).payload_efficiency
    return dataclasses.replace(cluster, link=dataclasses.replace(link, burst_bytes=burst * share))


def with_shared_cpu(cluster):
    """The cluster whose messages' CPU (the calibration's per message and byte) runs on the
    machine's cores that every namespace shares (``Link.cpu_shared_cores``), as
    ``simulator.compare`` gives a record of the emulated cluster, where this checkout's model
    has it (gloo's CPU on the ring's path)."""
    import dataclasses
    link = cluster.link
    if link is None or not hasattr(link, "cpu_shared_cores") or not cluster.shared_cores \
            or not (link.cpu_s_per_message or link.cpu_s_per_byte):
        return cluster
    return dataclasses.replace(cluster, link=dataclasses.replace(
        link, cpu_shared_cores=cluster.cores_per_host))


def ranks(scheme: str, workers: int) -> int:
    """The processes of ``scheme`` at P workers (a commit before ``Scheme.ranks``, 95613ca,
    says ``extra_rank`` for the parameter server's)."""
    spec = SCHEMES[scheme]
    return spec.ranks(workers) if hasattr(spec, "ranks") else workers + spec.extra_rank


def repredict(folder: Path, prof, work: Workload) -> pd.DataFrame:
    """One row per row of the folder's ``accuracy_validation.csv``, predicted again."""
    cluster = with_shared_cpu(with_buckets(load_cluster(folder / "link.toml"),
                                           folder / "link.toml"))
    seeds = seeds_of(folder)
    rows = []
    for _, r in pd.read_csv(folder / "accuracy_validation.csv").iterrows():
        p = int(r["workers"])
        on = cluster.at(ranks(r["scheme"], p)) if hasattr(cluster, "at") else cluster
        runs = [simulate(SchemeConfig(r["scheme"], engine="des"), p, work, on, prof, s)
                for s in seeds]
        mean = {f: sum(getattr(x, f) for x in runs) / len(runs)
                for f in ("time_s", "compute_s", "comm_s", "wait_s")}
        rows.append({"folder": folder.name, "scheme": r["scheme"], "workers": p,
                     "seeds": ",".join(map(str, seeds)),
                     "measured_s": r["training_measured_s"],
                     "shipped_s": r["training_predicted_s"], "predicted_s": mean["time_s"],
                     "compute_s": mean["compute_s"], "comm_s": mean["comm_s"],
                     "wait_s": mean["wait_s"]})
    return pd.DataFrame(rows)


def against(before: pd.DataFrame, after: pd.DataFrame) -> pd.DataFrame:
    """Per folder and scheme: measured, the error shipped, before and after, as fractions."""
    key = ["folder", "scheme", "workers"]
    m = after.merge(before[key + ["predicted_s"]], on=key, suffixes=("", "_before"))
    return pd.DataFrame({
        "folder": m["folder"], "scheme": m["scheme"], "P": m["workers"],
        "measured s": m["measured_s"],
        "shipped": m["shipped_s"] / m["measured_s"] - 1,
        "before": m["predicted_s_before"] / m["measured_s"] - 1,
        "after": m["predicted_s"] / m["measured_s"] - 1,
        "comm+wait share after": (m["comm_s"] + m["wait_s"]) / m["predicted_s"]})


def summary(table: pd.DataFrame, cols) -> str:
    """Median and worst |error| over every row, per column."""
    return "\n".join(f"{c}: median |error| {100 * table[c].abs().median():.1f}%, worst "
                     f"{100 * table[c].abs().max():.1f}%" for c in cols)


def main(argv=None) -> int:
    ap = cli.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=cli.input_folder,
                    help="validate_accuracy --cluster-rate folders (docs/results/...)")
    ap.add_argument("--profile", type=cli.input_file, required=True,
                    help="compute profile to predict with (the check's folders have none)")
    ap.add_argument("--out", type=cli.output_file(".csv"), required=True, help="CSV to write")
    ap.add_argument("--model", default="cnn", help="the check's model")
    ap.add_argument("--epochs", type=float, default=3.0, help="the check's epochs")
    ap.add_argument("--batch-size", type=int, default=64, help="per worker, as the check's")
    ap.add_argument("--train-size", type=int, default=60000, help="training samples")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--against", type=cli.input_file, metavar="CSV",
                    help="this command's CSV from another commit: errors there and here")
    a = ap.parse_args(argv)
    folders = [Path(f) for f in a.folders]
    for f in folders:
        if not (f / "accuracy_validation.csv").is_file() or not (f / "link.toml").is_file():
            return cli.usage_error(PROG, f"{f} has no accuracy_validation.csv and link.toml: "
                                         "give a validate_accuracy --cluster-rate folder")
    prof = profiles.load(a.profile)
    work = Workload(model=a.model, batch_per_worker=a.batch_size, dataset_samples=a.train_size,
                    epochs=a.epochs, threads_per_worker=a.threads)
    df = pd.concat([repredict(f, prof, work) for f in folders], ignore_index=True)
    try:
        atomic_write_text(a.out, df.to_csv(index=False))
    except OSError as e:
        print(f"{PROG}: error: {a.out}: {e.strerror or e}", file=sys.stderr)
        return 1
    pct = lambda x: f"{100 * x:+.1f}%"
    if a.against:
        t = against(pd.read_csv(a.against), df)
        print(t.to_string(index=False, formatters={c: pct for c in
                                                   ("shipped", "before", "after")}
                          | {"comm+wait share after": lambda x: f"{100 * x:.0f}%",
                             "measured s": lambda x: f"{x:.1f}"}))
        print(summary(t, ("shipped", "before", "after")))
        return 0
    df["shipped"] = df["shipped_s"] / df["measured_s"] - 1
    df["error"] = df["predicted_s"] / df["measured_s"] - 1
    print(df[["folder", "scheme", "workers", "measured_s", "predicted_s", "compute_s",
              "comm_s", "wait_s", "shipped", "error"]].to_string(
        index=False, formatters={"shipped": pct, "error": pct}, float_format="{:.2f}".format))
    print(summary(df, ("shipped", "error")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
