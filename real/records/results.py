"""Run records -> one tidy table, and the per-(scheme, P) summary with speedup.

``collect`` is the only reader of many records at once; the sweep, the plots
and the comparison with the simulator all start from its DataFrame.

A point's time is the mean of its undisturbed runs (``real.records.load``); where every
run of a point was disturbed, of those, and the table marks it. An efficiency
above 1 never appears without a warning that says how it can happen.

Imports: numpy, pandas, real.records.load (the disturbed-run summary), real.schemes,
contracts.record, report.stats.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from contracts import record
from report.stats import mean_ci95

from real import schemes

COLUMNS = ("run_id", "algorithm", "compute", "workers", "repeat", "status", "failure", "model",
           "dataset", "batch_size", "epochs", "threads_per_rank", "cores", "train_wall_s", "epoch_s",
           "final_loss", "test_accuracy", "compute_s_per_iter", "comm_s_per_iter",
           "wait_s_per_iter", "bytes_sent_total", "cpu_util_percent", "peak_rss_mb",
           "disturbed", "cpu_served", "others_cores", "load_note", "digest", "table_digest")


def row_of(run_dir: Path) -> dict:
    """One run's row; RecordError if its record cannot be read whole or a field it needs is
    of the wrong kind."""
    try:
        return _row_of(run_dir)
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        if isinstance(e, record.RecordError):
            raise
        raise record.RecordError(f"a field is not what a run record holds ({type(e).__name__}: "
                                 f"{e})") from None


def _row_of(run_dir: Path) -> dict:
    rec = record.read(run_dir)
    cfg, env, t, res = rec["config"], rec["environment"], rec["timings"], rec["results"]
    row = {"run_id": rec["run_id"], "algorithm": cfg.get("algorithm"),
           "compute": compute_label(rec),
           "workers": env.get("workers", env.get("ranks")), "repeat": cfg.get("repeat", 0),
           "status": rec["status"], "failure": (rec.get("failure") or {}).get("cause", ""),
           "model": cfg.get("model"), "dataset": res.get("dataset", cfg.get("dataset")),
           "batch_size": cfg.get("batch_size"), "epochs": cfg.get("epochs"),
           "threads_per_rank": env.get("threads_per_rank"), "cores": env.get("cores"),
           "train_wall_s": t.get("train_wall_s"),
           "epoch_s": float(np.mean(t["epoch_s"])) if t.get("epoch_s") else np.nan,
           "final_loss": res.get("final_loss"), "test_accuracy": res.get("test_accuracy"),
           "bytes_sent_total": sum(rec["comm"].get("bytes_sent_per_rank", []) or [0]),
           "cpu_util_percent": _mean(rec["resources"].get("cpu_util_percent_per_rank")),
           "peak_rss_mb": _mean(rec["resources"].get("peak_rss_bytes_per_rank")) / 2**20,
           **_load_columns(rec), **_digests(rec)}
    if rec["status"] == "completed" and (run_dir / record.ITER_FILE).is_file():
        it = record.read_iterations(run_dir)
        steps = it[it["batch_size"] > 0]
        per_rank = it.groupby("rank")[["compute_s", "comm_s", "wait_s"]].sum()
        n_iter = max(1, steps.groupby("rank").size().max())
        for col in ("compute_s", "comm_s", "wait_s"):
            row[f"{col}_per_iter"] = float(per_rank[col].mean() / n_iter)
    return row


def _digests(rec: dict) -> dict:
    """The run's settings digest, and the one its table shares (scheme, P and threads aside;
    ``contracts.record``)."""
    from real.records.identity import record_digest
    return {"digest": record_digest(rec),
            "table_digest": record_digest(rec, record.PER_POINT_SETTINGS)}


def compute_label(rec: dict) -> str:
    """``real``, or ``phantom`` (with its time scale when not 1): runs of different compute
    are never averaged together."""
    if not record.is_phantom(rec):
        return "real"
    scale = rec["compute"].get("time_scale", 1.0)
    return "phantom" if scale == 1 else f"phantom x{scale:g}"


def _load_columns(rec: dict) -> dict:
    """Whether other processes disturbed the run, and the figures that say so."""
    load = rec.get("load")
    if not load or not load.get("machines"):
        return {"disturbed": rec.get("disturbed"), "cpu_served": np.nan,
                "others_cores": np.nan, "load_note": ""}
    from real.records.load import summary
    worst = min(load["machines"], key=lambda m: m["served"] / max(m["expected_served"], 1e-9))
    return {"disturbed": bool(rec.get("disturbed")), "cpu_served": worst["served"],
            "others_cores": worst["others_cores"], "load_note": summary(load)}


def collect(runs_dir: str | os.PathLike, warn=None) -> pd.DataFrame:
    """One row per run record below ``runs_dir``. A record that cannot be read whole is left
    out and named, with the reason, through ``warn(folder, reason)`` (default: a line on
    stderr): never half-loaded, never dropped silently."""
    rows = []
    for d in record.find_runs(runs_dir):
        try:
            rows.append(row_of(d))
        except record.RecordError as e:
            (warn or _warn)(d, str(e).replace(f"{d / record.RECORD_FILE}: ", ""))
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    return df.sort_values(["algorithm", "workers", "repeat"]).reset_index(drop=True)


def _warn(run_dir: Path, reason: str) -> None:
    print(f"real.records.results: skipped {run_dir}: {reason}", file=sys.stderr)


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """Mean ± 95% CI of time per (algorithm, workers); speedup against P = 1 of the same scheme.

    Where a scheme has no P = 1 run, the serial run is the baseline. Phantom runs are
    points of their own, named ``scheme (phantom)``: they measure no accuracy.
    """
    ok = df[df["status"] == "completed"].copy()
    compute = ok["compute"].fillna("real") if "compute" in ok else ["real"] * len(ok)
    ok["algorithm"] = [a if c == "real" else f"{a} ({c})"       # a phantom point apart
                       for a, c in zip(ok["algorithm"], compute)]
    out = []
    for (alg, p), g in ok.groupby(["algorithm", "workers"]):
        disturbed = g["disturbed"].fillna(False).astype(bool) if "disturbed" in g else \
            pd.Series(False, index=g.index)
        clean = g[~disturbed]
        used = clean if len(clean) else g
        t, ci = mean_ci95(used["train_wall_s"])
        g = used
        out.append({"algorithm": alg, "workers": int(p), "threads": _threads(g), "runs": len(g),
                    "disturbed_runs": int(disturbed.sum()), "disturbed": not len(clean),
                    "time_s": t,
                    "time_ci_s": ci, "final_loss": g["final_loss"].mean(),
                    "test_accuracy": g["test_accuracy"].mean(),
                    "cpu_util_percent": g["cpu_util_percent"].mean(),
                    "peak_rss_mb": g["peak_rss_mb"].mean()})
    s = pd.DataFrame(out)
    if s.empty:
        return s
    baselines = [a for a in s["algorithm"].unique()
                 if a in schemes.SCHEMES and schemes.SCHEMES[a].baseline]
    serial = s[s["algorithm"].isin(baselines) & (s["workers"] == 1)]["time_s"]

    def baseline(alg):
        own = s[(s["algorithm"] == alg) & (s["workers"] == 1)]["time_s"]
        return own.iloc[0] if len(own) else (serial.iloc[0] if len(serial) else np.nan)

    s["speedup"] = [baseline(a) / t for a, t in zip(s["algorithm"], s["time_s"])]
    s["efficiency"] = s["speedup"] / s["workers"]
    return s.sort_values(["algorithm", "workers"]).reset_index(drop=True)


def _threads(g: pd.DataFrame) -> str:
    """The torch threads per rank of a point's runs ("2", or "1-2" where they differ)."""
    if "threads_per_rank" not in g:
        return "-"
    seen = sorted({int(t) for t in g["threads_per_rank"].dropna()})
    return "-" if not seen else str(seen[0]) if len(seen) == 1 else f"{seen[0]}-{seen[-1]}"


def format_table(summary: pd.DataFrame) -> str:
    """The report table of the exercise sheets: P, threads per rank, time, loss, accuracy,
    speedup, efficiency."""
    w = max([15] + [len(a) + 1 for a in summary["algorithm"]])
    lines = [f"{'Method':<{w}}{'P':>3}{'Threads':>8}{'Time (s)':>18}{'Loss':>9}{'Accuracy':>10}"
             f"{'Speedup':>9}{'Eff.':>7}"]
    for _, r in summary.iterrows():
        t = f"{r.time_s:.2f} ± {r.time_ci_s:.2f}" if r.runs > 1 else f"{r.time_s:.2f}"
        t += " *" if r.get("disturbed", False) else ""
        lines.append(f"{r.algorithm:<{w}}{r.workers:>3}{r.get('threads', '-'):>8}{t:>18}"
                     f"{_f(r.final_loss):>9}{_f(r.test_accuracy):>10}{_f(r.speedup, 2):>9}"
                     f"{_f(r.efficiency, 2):>7}")
    threads = set(summary["threads"]) - {"-"} if "threads" in summary else set()
    note = ([f"threads per rank differ between points ({', '.join(sorted(threads))}): a "
             "speedup then compares thread counts as well as ranks"] if len(threads) > 1
            else [])
    if any("(phantom" in a for a in summary["algorithm"]):
        note.append("(phantom): every message real, the compute slept (real.phantom); no loss "
                    "or accuracy measured")
    return "\n".join(lines + note + warnings(summary))


def warnings(summary: pd.DataFrame) -> list[str]:
    """What a reader of the table must know: disturbed points, efficiencies above 1."""
    out = []
    marked = summary["disturbed"].astype(bool) if "disturbed" in summary else \
        pd.Series(False, index=summary.index)
    if marked.any():
        out.append("* every run of this point was disturbed: other processes took CPU its ranks "
                   "asked for (real.sweep --retry-disturbed N runs it again)")
    left = int(summary.loc[~marked, "disturbed_runs"].sum()) if "disturbed_runs" in summary else 0
    if left:
        out.append(f"{left} disturbed run(s) left out of points that also have undisturbed ones")
    for _, r in summary[summary["efficiency"] > 1.0].iterrows():
        base = summary[(summary["algorithm"] == r.algorithm) & (summary["workers"] == 1)]
        slowed = bool(len(base)) and bool(marked[base.index[0]])
        out.append(f"WARNING: efficiency {r.efficiency:.2f} > 1 for {r.algorithm} at P = "
                   f"{r.workers}: P ranks were more than P times as fast as P = 1. Usually the "
                   "P = 1 run was slowed" + (" (it was disturbed by other processes)" if slowed
                                            else "") + ": other processes took its CPU, or its "
                   "extra threads ran slower than one on a busy machine (real.sweep runs "
                   "every point at the same threads unless --threads per-point); a working "
                   "set that fits in cache at P > 1 adds a few percent at most.")
    return out


def _f(x, digits: int = 4) -> str:
    return "-" if x is None or pd.isna(x) else f"{x:.{digits}f}"


def _mean(values) -> float:
    values = [v for v in (values or []) if v is not None]
    return float(np.mean(values)) if values else float("nan")
