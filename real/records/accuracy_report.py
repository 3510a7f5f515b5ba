"""Measured accuracy over time, from run records: time to a target, final accuracy, curves.

``curves(runs_dir)`` reads every completed record's curve (``results.curve``,
see ``real.records.curve``); ``time_to_target_table`` gives one row per run with the
training time at which it first reached the target accuracy (None: "not
reached in E epochs"); ``report`` writes ``OUT/time_to_target.csv`` and
``OUT/accuracy-time.png`` (accuracy against wall time, one panel per
scheme, one line per P) and returns the table as text.

Imports: pandas, contracts.curve, contracts.files, contracts.record, report.accuracy.
"""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from contracts import curve as curves_mod
from contracts import record
from contracts.files import atomic_write_text


def completed_runs(runs_dir: str | os.PathLike) -> list[tuple[Path, dict]]:
    """(folder, record) of every completed run with a curve, each record read once."""
    runs = []
    for d in record.find_runs(runs_dir):
        try:
            rec = record.read(d)
        except record.RecordError:
            continue
        if rec["status"] == "completed" and rec["results"].get("curve"):
            runs.append((d, rec))
    return runs


def curves(runs_dir: str | os.PathLike, only: set[str] | None = None) -> list[dict]:
    """scheme, workers, seed, repeat, epochs, run_id and points of every completed record
    with a curve (``only``: of these run ids)."""
    out = []
    for _, rec in completed_runs(runs_dir):
        if only is not None and rec["run_id"] not in only:
            continue
        res, cfg = rec["results"], rec["config"]
        out.append({"run_id": rec["run_id"], "scheme": cfg.get("algorithm"),
                    "workers": rec["environment"].get("workers"), "seed": cfg.get("seed"),
                    "repeat": cfg.get("repeat", 0), "epochs": cfg.get("epochs"),
                    "curve_model": res.get("curve_model"), "points": res["curve"]})
    return out


def time_to_target_table(runs: list[dict], target: float) -> pd.DataFrame:
    rows = [{"run_id": r["run_id"], "algorithm": r["scheme"], "workers": r["workers"],
             "seed": r["seed"], "repeat": r["repeat"], "epochs": r["epochs"],
             "final_accuracy": r["points"][-1]["test_accuracy"],
             "time_to_target_s": curves_mod.time_to_target(r["points"], target)}
            for r in runs]
    return pd.DataFrame(rows, columns=["run_id", "algorithm", "workers", "seed", "repeat",
                                       "epochs", "final_accuracy", "time_to_target_s"])


def format_table(df: pd.DataFrame, target: float) -> str:
    lines = [f"{'Method':<15}{'P':>3}{'runs':>5}{'Accuracy':>10}  Time to {target:g} (s)"]
    for (alg, p), g in df.groupby(["algorithm", "workers"]):
        times = g["time_to_target_s"]
        if times.isna().any():
            reached = int(times.notna().sum())
            text = curves_mod.describe_time(None, float(g["epochs"].max()))
            text += f" ({reached} of {len(g)} runs reached it)" if reached else ""
        else:
            text = curves_mod.describe_time(float(times.mean()), 0)
        lines.append(f"{alg:<15}{p:>3}{len(g):>5}{g['final_accuracy'].mean():>10.4f}  {text}")
    return "\n".join(lines)


def report(out: Path, target: float | None, only: set[str] | None = None) -> str:
    """Write the curves figure (and with a target, time_to_target.csv); the table as text
    (``only``: of these run ids)."""
    runs = curves(out, only)
    if not runs:
        return ""
    from report.accuracy import accuracy_time_plot
    accuracy_time_plot(runs, out / "accuracy-time.png",
                       "Measured test accuracy against training time")
    if target is None:
        return f"wrote {out / 'accuracy-time.png'}"
    df = time_to_target_table(runs, target)
    atomic_write_text(out / "time_to_target.csv", df.to_csv(index=False))
    return (format_table(df, target) + f"\nwrote {out / 'time_to_target.csv'}, "
            f"{out / 'accuracy-time.png'}")
