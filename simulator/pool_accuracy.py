"""Time-to-accuracy validations pooled: one seed per validation, the mean over seeds.

``pipelines.validate_accuracy`` run on several days (one seed each, each calibrated
on its own sweep) leaves one ``accuracy_validation.csv`` per folder. Pooling them
gives what the time-to-accuracy goal is stated over: per scheme and P, the final
test accuracy measured and predicted as means over the seeds (error in points), and
the signed relative error of the time to the target, mean over the seeds that
reached it on both sides.

How far a measured time to target is itself uncertain comes from the runs: within
one validation, the runs the model predicts alike (serial SGD under several schemes'
launchers at P = 1) are repeats of one computation as far as the model can tell, and
the spread of their measured times is the spread of one measurement (``repeat_spread``).
A point's mean error over n seeds is then uncertain by that spread over sqrt(n); the
report names the points whose error is beyond 1.96 of it (95%). (A validation of several
seeds holds their means, whose spread is a mean's.)

``simulator.pool`` calls this when every folder it is given holds such a file::

    python -m simulator.pool docs/results/accuracy-1 docs/results/accuracy-2 \\
        docs/results/accuracy-3 --out docs/results/accuracy-pooled

Imports: pandas, numpy, contracts (tables, files), simulator.model.schemes
(the order of the schemes), simulator.output (plots).
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from contracts.tables import TableError, read_table
from simulator.model.schemes import SCHEMES

FILE = "accuracy_validation.csv"
GOAL_POINTS = 1.0      # final accuracy within 1 point (pipelines.validate_accuracy's too)
GOAL_RELATIVE = 0.10   # time to target within 10%
REPEATS_MIN = 3        # runs of one validation predicted alike that count as repeats
Z_95 = 1.96
NEEDED = {"scheme": "text", "workers": "positive_count",
          "final_accuracy_measured": "number", "final_accuracy_predicted": "number",
          "time_to_target_measured_s": "number?", "time_to_target_predicted_s": "number?"}


class AccuracyPoolError(ValueError):
    """A folder without a readable accuracy validation; one line, exit code 2."""


def is_accuracy_folder(folder) -> bool:
    return (Path(folder) / FILE).is_file() and not (Path(folder) / "compare.csv").is_file()


def target_of(folder: Path) -> float | None:
    """The target accuracy the validation's report names (None if it has no report)."""
    report = folder / "report.md"
    m = re.search(r"target test accuracy ([0-9.]+)", report.read_text()) \
        if report.is_file() else None
    return float(m.group(1).rstrip(".")) if m else None


def read_validations(folders, labels) -> tuple[pd.DataFrame, float]:
    """Every validation's rows with its label, and the one target they share."""
    frames, targets = [], set()
    for label, folder in zip(labels, map(Path, folders)):
        path = folder / FILE
        if not path.is_file():
            raise AccuracyPoolError(f"{folder} has no {FILE} (run python -m "
                                    "pipelines.validate_accuracy --out there first)")
        try:
            df = read_table(path, NEEDED)
        except TableError as e:
            raise AccuracyPoolError(str(e)) from None
        frames.append(df.assign(validation=label))
        targets.add(target_of(folder))
    if None in targets:
        raise AccuracyPoolError("a validation folder has no report.md naming its target "
                                "(the folders of pipelines.validate_accuracy --out have one)")
    if len(targets) > 1:
        raise AccuracyPoolError(f"the validations aim at different targets "
                                f"({', '.join(f'{t:g}' for t in sorted(targets))}); pool one target")
    return pd.concat(frames, ignore_index=True), targets.pop()


def pool(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (scheme, P): accuracy means and error over the validations; time to target
    means and mean signed error over the validations that reached it on both sides."""
    rows = rows.assign(
        acc_error=100 * (rows["final_accuracy_predicted"] - rows["final_accuracy_measured"]),
        both=rows["time_to_target_measured_s"].notna() & rows["time_to_target_predicted_s"].notna())
    rows = rows.assign(time_error=np.where(
        rows["both"], rows["time_to_target_predicted_s"] / rows["time_to_target_measured_s"] - 1,
        np.nan))
    reached = rows[rows["both"]]
    g, gr = rows.groupby(["scheme", "workers"]), reached.groupby(["scheme", "workers"])
    out = pd.DataFrame({
        "validations": g.size(),
        "final_accuracy_measured": g["final_accuracy_measured"].mean(),
        "final_accuracy_predicted": g["final_accuracy_predicted"].mean(),
        "final_accuracy_mean_abs_error_points": g["acc_error"].apply(lambda e: e.abs().mean()),
        "reached_both": gr.size(),
        "time_to_target_measured_s": gr["time_to_target_measured_s"].mean(),
        "time_to_target_predicted_s": gr["time_to_target_predicted_s"].mean(),
        "time_to_target_error": gr["time_error"].mean(),
        "time_to_target_error_min": gr["time_error"].min(),
        "time_to_target_error_max": gr["time_error"].max()}).reset_index()
    out["final_accuracy_error_points"] = 100 * (out["final_accuracy_predicted"]
                                                - out["final_accuracy_measured"])
    out["reached_both"] = out["reached_both"].fillna(0).astype(int)
    spread = repeat_spread(rows)
    if spread is not None:
        out["time_to_target_noise"] = spread[0] / np.sqrt(out["reached_both"].clip(lower=1))
        out["beyond_noise"] = out["time_to_target_error"].abs() > Z_95 * out[
            "time_to_target_noise"]
    order = {s: i for i, s in enumerate(SCHEMES)}
    out = out.sort_values(["scheme", "workers"], key=lambda c: c.map(order)
                          if c.name == "scheme" else c, ignore_index=True)
    out.attrs["repeat_spread"] = spread
    return out


def repeat_spread(rows: pd.DataFrame) -> tuple[float, int, int] | None:
    """(relative standard deviation of one measured time to target, runs, groups): the
    runs of each validation whose predicted times to target are equal (to the
    microsecond), at least ``REPEATS_MIN`` of them, each group about its own mean,
    pooled. Any real difference between those runs counts as spread here. None where
    no validation has such a group."""
    reached = rows.dropna(subset=["time_to_target_measured_s", "time_to_target_predicted_s"])
    key = reached["time_to_target_predicted_s"].round(6)
    squares, dof, runs, groups = 0.0, 0, 0, 0
    for _key, g in reached.groupby([reached["validation"], key]):
        if len(g) < REPEATS_MIN:
            continue
        rel = g["time_to_target_measured_s"] / g["time_to_target_measured_s"].mean() - 1
        squares += float((rel ** 2).sum())
        dof, runs, groups = dof + len(g) - 1, runs + len(g), groups + 1
    return ((squares / dof) ** 0.5, runs, groups) if dof else None


def summary_lines(pooled: pd.DataFrame, label: str = "") -> list[str]:
    acc = pooled["final_accuracy_error_points"].abs()
    rel = pooled["time_to_target_error"].dropna()
    lines = [f"{label}final accuracy, mean over seeds: mean |error| {acc.mean():.2f} points, "
             f"worst {acc.max():.2f}; within {GOAL_POINTS:g} point: "
             f"{int((acc <= GOAL_POINTS).sum())} of {len(acc)}"]
    if len(rel):
        lines.append(f"{label}time to target, mean signed error over seeds: median |error| "
                     f"{100 * rel.abs().median():.1f}%, worst {100 * rel.abs().max():.1f}%, "
                     f"mean {100 * rel.mean():+.1f}%; within {100 * GOAL_RELATIVE:g}%: "
                     f"{int((rel.abs() <= GOAL_RELATIVE).sum())} of {len(rel)}")
    spread = pooled.attrs.get("repeat_spread")
    if len(rel) and spread is not None:
        beyond = pooled[pooled["beyond_noise"]]
        names = ", ".join(f"{r.scheme} P={r.workers} {100 * r.time_to_target_error:+.0f}%"
                          for r in beyond.itertuples())
        lines.append(f"{label}time to target, measurement spread: one run "
                     f"{100 * spread[0]:.1f}% (sd over {spread[1]} runs in {spread[2]} groups "
                     f"predicted alike), a mean over n seeds that over sqrt(n); beyond "
                     f"{Z_95:g} of it: {len(beyond)} of {len(rel)}" + (f" ({names})"
                                                                       if names else ""))
    return lines


def _secs(v) -> str:
    return "-" if pd.isna(v) else f"{v:.2f} s"


def _pct(v) -> str:
    return "-" if pd.isna(v) else f"{100 * v:+.1f}%"


def format_table(pooled: pd.DataFrame, n: int, target: float, held_out_above: int = 0) -> str:
    to = f"to {target:g}"
    lines = [f"{n} validation(s); errors: predicted minus measured",
             f"{'scheme':<15}{'P':>3}{'acc meas':>10}{'acc pred':>10}{'err pt':>8}{'|err| pt':>9}"
             f"{to + ' meas':>14}{to + ' pred':>14}{'err':>8}{'min':>8}{'max':>8}{'seeds':>6}"]
    for _, r in pooled.iterrows():
        lines.append(f"{r.scheme:<15}{r.workers:>3}{r.final_accuracy_measured:>10.4f}"
                     f"{r.final_accuracy_predicted:>10.4f}{r.final_accuracy_error_points:>+8.2f}"
                     f"{r.final_accuracy_mean_abs_error_points:>9.2f}"
                     f"{_secs(r.time_to_target_measured_s):>14}"
                     f"{_secs(r.time_to_target_predicted_s):>14}{_pct(r.time_to_target_error):>8}"
                     f"{_pct(r.time_to_target_error_min):>8}{_pct(r.time_to_target_error_max):>8}"
                     f"{r.reached_both:>3}/{r.validations}")
    lines += summary_lines(pooled)
    if held_out_above:
        lines += summary_lines(pooled[pooled["workers"] > held_out_above],
                               f"P > {held_out_above}, ")
    return "\n".join(lines)


def write_outputs(pooled: pd.DataFrame, target: float, out: Path) -> list[Path]:
    from contracts.files import atomic_write_text
    from report.accuracy import time_to_target_plot

    def side(which):
        return [{"scheme": r.scheme, "workers": r.workers,
                 "time_to_target_s": getattr(r, f"time_to_target_{which}_s")}
                for r in pooled.itertuples() if not pd.isna(r.time_to_target_measured_s)]
    return [atomic_write_text(out / "pooled_accuracy.csv", pooled.to_csv(index=False)),
            time_to_target_plot(side("predicted"), side("measured"), target,
                                out / "time-to-target.png")]
