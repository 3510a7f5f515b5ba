"""Predicted against measured: every (scheme, P) of a folder of run records.

    python -m simulator.compare RUNS_DIR [--profile PROFILE.json] [--out DIR] [--link cluster.toml]

For each group of completed records with the same scheme, worker count and
configuration, the simulator predicts exactly that run (same model, per-worker
batch, training samples, epochs, threads per rank, host cores, averaging period,
MPI algorithm) and the table shows

    scheme | workers | measured (mean ± 95% CI) | predicted | relative error %

per epoch, with the median and worst error per scheme, on all points and on
the held-out ones (worker counts the profile's calibration did not see, from
its provenance). Records of the emulated cluster (``environment.cluster``) are
predicted on that cluster: its hosts with their own links at the record's
shaped rate, sharing the machine's cores (``Cluster.shared_cores``); with
``--link`` (a cluster TOML of ``python -m calibrate.link``) a message also pays
the calibrated latency and sees the calibrated payload share of the rate. A figure per scheme shows measured speedup with error bars,
the predicted curve and the ideal line, and below it the relative error.
"""
from __future__ import annotations

import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from . import profile as profiles
from .config import Cluster, ConfigError, Link, SchemeConfig, Workload, calibrated_cluster

PROG = "python -m simulator.compare"


def workload_of(rec: dict) -> Workload:
    cfg, env, res = rec["config"], rec["environment"], rec["results"]
    workers = int(env.get("workers", env.get("ranks", 1)))
    batch = cfg.get("batch_size", 64)
    if cfg.get("global_batch"):
        batch = cfg["global_batch"] // workers
    return Workload(model=cfg.get("model", "cnn"), batch_per_worker=int(batch),
                    dataset_samples=int(res["train_samples"]), epochs=float(cfg.get("epochs", 1)),
                    threads_per_worker=int(env.get("threads_per_rank", 1)))


def scheme_of(rec: dict) -> SchemeConfig:
    cfg = rec["config"]
    algorithm = cfg.get("mpi_allreduce") or "auto"
    return SchemeConfig(name=cfg["algorithm"], avg_every=int(cfg.get("average_every") or 0),
                        algorithm=algorithm)


@dataclass(frozen=True)
class LinkCalibration:
    """What ``python -m calibrate.link`` measured on one emulated link, for links at any rate.

    A record names the rate tc shaped its links to; the payload rate a message
    sees is ``payload_efficiency`` of it (the shaper counts headers too), and a
    message pays ``latency_s`` more. Both are measured at one shaped rate and
    applied at every other: ``t(n) = latency_s + n / (payload_efficiency * shaped)``.
    """
    latency_s: float
    payload_efficiency: float
    shaped_bits_per_s: float            # the rate it was measured at
    source: str = ""


def load_link_calibration(path: str | Path) -> LinkCalibration:
    """Read the cluster TOML of ``calibrate.link`` (needs link.shaped_bandwidth)."""
    from .config import load_cluster
    from .units import parse_bandwidth
    cluster = load_cluster(path)
    raw = tomllib.loads(Path(path).read_text())
    shaped = raw.get("link", {}).get("shaped_bandwidth")
    if cluster.link is None or shaped is None:
        raise ConfigError(f"cluster file {path}: value link.shaped_bandwidth is missing "
                          f"(write the file with python -m calibrate.link)")
    try:
        shaped_bytes = parse_bandwidth(shaped)
    except ValueError as e:
        raise ConfigError(f"cluster file {path}: link.shaped_bandwidth: {e}") from None
    return LinkCalibration(latency_s=cluster.link.latency_s,
                           payload_efficiency=cluster.link.bandwidth_bytes_per_s / shaped_bytes,
                           shaped_bits_per_s=8 * shaped_bytes, source=str(path))


def cluster_of(rec: dict, link: LinkCalibration | None = None) -> Cluster:
    """The machine of the record: the calibrated host, or the emulated cluster it names
    (its shaped rate; with ``link``, the calibrated payload share and latency of a link)."""
    env = rec["environment"]
    emu = env.get("cluster")
    if not emu:
        return calibrated_cluster(int(env.get("cores", 1)))
    bandwidth, latency = emu["bandwidth_bits_per_s"] / 8, emu.get("latency_s", 0.0)
    if link is not None:
        bandwidth, latency = bandwidth * link.payload_efficiency, link.latency_s
    link = Link(bandwidth_bytes_per_s=bandwidth, latency_s=latency)
    # the hosts are namespaces of one machine: their own links, but one pool of its cores
    return Cluster(hosts=len(emu["namespaces"]), cores_per_host=int(env.get("cores", 1)), link=link,
                   shared_cores=True)


def _key(rec: dict) -> tuple:
    w, s, c = workload_of(rec), scheme_of(rec), rec["environment"].get("cluster") or {}
    return (s, int(rec["environment"].get("workers", 1)), w, c.get("bandwidth_bits_per_s"),
            len(c.get("namespaces", ())))


def compare(runs_dir, profile: profiles.Profile, seed: int = 0,
            link: LinkCalibration | None = None) -> pd.DataFrame:
    """One row per (configuration, P): measured mean ± CI, predicted, relative error."""
    from real import record
    from real.timing import mean_ci95
    from .simulate import simulate
    groups: dict[tuple, list[dict]] = {}
    for d in record.find_runs(runs_dir):
        try:
            rec = record.read(d)
        except record.RecordError:
            continue
        if rec["status"] == "completed":
            groups.setdefault(_key(rec), []).append(rec)
    seen = set(profile.provenance.workers_seen)
    rows = []
    for (scheme, workers, workload, bw, hosts), recs in groups.items():
        per_epoch = [r["timings"]["train_wall_s"] / workload.epochs for r in recs]
        mean, ci = mean_ci95(per_epoch)
        pred = simulate(scheme, workers, workload, cluster_of(recs[0], link), profile, seed)
        rows.append({"scheme": scheme.name, "workers": workers, "runs": len(recs),
                     "model": workload.model, "batch_per_worker": workload.batch_per_worker,
                     "threads": workload.threads_per_worker, "hosts": hosts or 1,
                     "bandwidth_bits_per_s": bw, "measured_s": mean, "measured_ci_s": ci,
                     "predicted_s": pred.epoch_s, "predicted_compute_s": pred.compute_s,
                     "predicted_comm_s": pred.comm_s, "predicted_wait_s": pred.wait_s,
                     "rel_error": (pred.epoch_s - mean) / mean,
                     "held_out": bool(seen) and workers not in seen})
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    return df.sort_values(["scheme", "hosts", "bandwidth_bits_per_s", "workers"],
                          na_position="first").reset_index(drop=True)


def error_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Median and worst |relative error| per scheme, on all points and on held-out ones."""
    out = []
    for scheme, g in df.groupby("scheme"):
        err, held = g["rel_error"].abs(), g[g["held_out"]]["rel_error"].abs()
        out.append({"scheme": scheme, "points": len(g), "median_error": err.median(),
                    "worst_error": err.max(), "held_out_points": len(held),
                    "held_out_median_error": held.median() if len(held) else np.nan,
                    "held_out_worst_error": held.max() if len(held) else np.nan})
    return pd.DataFrame(out)


def format_table(df: pd.DataFrame) -> str:
    lines = [f"{'scheme':<15}{'P':>3}{'hosts':>6}  {'measured (s/epoch)':>20}{'predicted':>11}"
             f"{'error':>9}  held out"]
    for _, r in df.iterrows():
        meas = f"{r.measured_s:.3f} ± {r.measured_ci_s:.3f}"
        lines.append(f"{r.scheme:<15}{r.workers:>3}{r.hosts:>6}  {meas:>20}{r.predicted_s:>11.3f}"
                     f"{100 * r.rel_error:>8.1f}%  {'yes' if r.held_out else ''}")
    return "\n".join(lines)


def format_errors(summary: pd.DataFrame) -> str:
    def pct(x):
        return "-" if pd.isna(x) else f"{100 * x:.1f}%"
    lines = [f"{'scheme':<15}{'median':>8}{'worst':>8}{'held-out median':>17}{'held-out worst':>16}"]
    for _, r in summary.iterrows():
        lines.append(f"{r.scheme:<15}{pct(r.median_error):>8}{pct(r.worst_error):>8}"
                     f"{pct(r.held_out_median_error):>17}{pct(r.held_out_worst_error):>16}")
    return "\n".join(lines)


def cluster_suffix(hosts: int, bandwidth_bits_per_s: float) -> str:
    """What names an emulated cluster's rows apart (figures, pooled schemes); "" on one host."""
    return "" if hosts == 1 else f"-{hosts}hosts-{int(bandwidth_bits_per_s) // 10**6}mbit"


def write_outputs(df: pd.DataFrame, out: Path) -> list[Path]:
    from .plot_compare import comparison_plot
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / ".compare.csv.tmp"
    df.to_csv(tmp, index=False)
    tmp.replace(out / "compare.csv")
    paths = [out / "compare.csv"]
    for (scheme, hosts, bw), g in df.groupby(["scheme", "hosts", "bandwidth_bits_per_s"],
                                            dropna=False):
        paths.append(comparison_plot(g, out / f"compare-{scheme}{cluster_suffix(hosts, bw)}.png"))
    return paths


def build_parser():
    from real.cli import Parser
    p = Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("runs", help="folder of run records (real.train / real.sweep --out)")
    p.add_argument("--profile", default=None, help="profile JSON (default: the embedded one)")
    p.add_argument("--out", default=None, help="folder for compare.csv and figures (default: RUNS)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--link", default=None,
                   help="cluster TOML of python -m calibrate.link: emulated-cluster records use its "
                        "latency and payload share of their own shaped rate")
    return p


def main(argv=None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    from real.cli import usage_error
    if not Path(args.runs).is_dir():
        return usage_error(PROG, f"{args.runs} is not a folder of run records")
    try:
        prof = profiles.load(args.profile) if args.profile else profiles.load_default()
        link = load_link_calibration(args.link) if args.link else None
        df = compare(args.runs, prof, args.seed, link)
    except (profiles.ProfileError, ConfigError) as e:
        return usage_error(PROG, str(e))
    if df.empty:
        return usage_error(PROG, f"no completed run records in {args.runs}")
    print(format_table(df))
    print()
    print(format_errors(error_summary(df)))
    paths = write_outputs(df, Path(args.out or args.runs))
    print(f"\nwrote {', '.join(str(p) for p in paths)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
