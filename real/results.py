"""Run records -> one tidy table, and the per-(scheme, P) summary with speedup.

``collect`` is the only reader of many records at once; the sweep, the plots
and the comparison with the simulator all start from its DataFrame.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from . import record
from .timing import mean_ci95

COLUMNS = ("run_id", "algorithm", "workers", "repeat", "status", "failure", "model", "dataset",
           "batch_size", "epochs", "threads_per_rank", "cores", "train_wall_s", "epoch_s",
           "final_loss", "test_accuracy", "compute_s_per_iter", "comm_s_per_iter",
           "wait_s_per_iter", "bytes_sent_total", "cpu_util_percent", "peak_rss_mb")


def row_of(run_dir: Path) -> dict:
    rec = record.read(run_dir)
    cfg, env, t, res = rec["config"], rec["environment"], rec["timings"], rec["results"]
    row = {"run_id": rec["run_id"], "algorithm": cfg.get("algorithm"),
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
           "peak_rss_mb": _mean(rec["resources"].get("peak_rss_bytes_per_rank")) / 2**20}
    if rec["status"] == "completed" and (run_dir / record.ITER_FILE).is_file():
        it = record.read_iterations(run_dir)
        steps = it[it["batch_size"] > 0]
        per_rank = it.groupby("rank")[["compute_s", "comm_s", "wait_s"]].sum()
        n_iter = max(1, steps.groupby("rank").size().max())
        for col in ("compute_s", "comm_s", "wait_s"):
            row[f"{col}_per_iter"] = float(per_rank[col].mean() / n_iter)
    return row


def collect(runs_dir: str | os.PathLike) -> pd.DataFrame:
    """One row per run record below ``runs_dir`` (unreadable directories are skipped)."""
    rows = []
    for d in record.find_runs(runs_dir):
        try:
            rows.append(row_of(d))
        except record.RecordError:
            continue
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    return df.sort_values(["algorithm", "workers", "repeat"]).reset_index(drop=True)


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """Mean ± 95% CI of time per (algorithm, workers); speedup against P = 1 of the same scheme.

    Where a scheme has no P = 1 run, the serial run is the baseline.
    """
    ok = df[df["status"] == "completed"]
    out = []
    for (alg, p), g in ok.groupby(["algorithm", "workers"]):
        t, ci = mean_ci95(g["train_wall_s"])
        out.append({"algorithm": alg, "workers": int(p), "runs": len(g), "time_s": t,
                    "time_ci_s": ci, "final_loss": g["final_loss"].mean(),
                    "test_accuracy": g["test_accuracy"].mean(),
                    "cpu_util_percent": g["cpu_util_percent"].mean(),
                    "peak_rss_mb": g["peak_rss_mb"].mean()})
    s = pd.DataFrame(out)
    if s.empty:
        return s
    serial = s[(s["algorithm"] == "serial") & (s["workers"] == 1)]["time_s"]

    def baseline(alg):
        own = s[(s["algorithm"] == alg) & (s["workers"] == 1)]["time_s"]
        return own.iloc[0] if len(own) else (serial.iloc[0] if len(serial) else np.nan)

    s["speedup"] = [baseline(a) / t for a, t in zip(s["algorithm"], s["time_s"])]
    s["efficiency"] = s["speedup"] / s["workers"]
    return s.sort_values(["algorithm", "workers"]).reset_index(drop=True)


def format_table(summary: pd.DataFrame) -> str:
    """The report table of the exercise sheets: P, time, loss, accuracy, speedup, efficiency."""
    lines = [f"{'Method':<15}{'P':>3}{'Time (s)':>18}{'Loss':>9}{'Accuracy':>10}"
             f"{'Speedup':>9}{'Eff.':>7}"]
    for _, r in summary.iterrows():
        t = f"{r.time_s:.2f} ± {r.time_ci_s:.2f}" if r.runs > 1 else f"{r.time_s:.2f}"
        lines.append(f"{r.algorithm:<15}{r.workers:>3}{t:>18}{_f(r.final_loss):>9}"
                     f"{_f(r.test_accuracy):>10}{r.speedup:>9.2f}{r.efficiency:>7.2f}")
    return "\n".join(lines)


def _f(x) -> str:
    return "-" if x is None or pd.isna(x) else f"{x:.4f}"


def _mean(values) -> float:
    values = [v for v in (values or []) if v is not None]
    return float(np.mean(values)) if values else float("nan")
