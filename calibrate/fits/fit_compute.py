"""Compute-side fits: step time against batch size, core sharing, the server's update.

Cost models (as read by ``contracts.profile``) and where their numbers come from:

* ``t_step(batch) = step_intercept_s + step_s_per_sample * batch`` per model and
  thread count: non-negative least squares through the median step per batch,
  relative residuals, bootstrap CIs;
  ``spread_cv`` = median over batch sizes of std/mean of single steps.
* ``backward_fraction`` = median of backward_s / step_s over all probed steps.
* ``eval_s_per_sample``: median no-grad forward per sample at the most threads probed.
* ``sharing_slowdown[k]`` = median step of k single-thread processes at once
  / median step of one alone (same model, batch, thread count).
* ``t_update(params) = update_intercept_s + update_s_per_param * params``: the
  server's ``w -= lr * g``; the summing of m gradients is ``(m - 1) * gamma * 4 * params``
  with ``gamma_s_per_byte`` = slope of one timed add against bytes.
* ``server_update_s`` per model: the median of the real server's update of that model
  (``real.schemes.ps.server_update``, timed by the server probe back to back; with
  ``server_idle_s`` / ``server_update_after_idle_s`` its medians after each idle wait the
  probe timed, the cold update's curve); where present the
  simulator's server charges it instead of the line.

Imports: numpy, pandas, calibrate (linefit, rawio), contracts.profile.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from contracts.profile import ModelCost, ServerCost, StepFit

from calibrate.fits.linefit import fit_line


def _medians(samples: pd.DataFrame) -> pd.Series:
    return samples.groupby("batch")["step_s"].median()


def step_fit(samples: pd.DataFrame, threads: int, n_boot: int = 200, seed: int = 0) -> StepFit:
    """Fit the per-batch medians of single steps for one (model, threads).

    Medians keep a step slowed by another process on a shared host from pulling
    the line. The 95% CIs are bootstrap half-widths: resample the single steps
    within each batch size (seeded), refit the medians, take the 2.5..97.5 percentiles.
    """
    med = _medians(samples)
    line = fit_line(med.index, med.values)
    rng = np.random.default_rng(seed)
    groups = [g.to_numpy(float) for _, g in samples.groupby("batch")["step_s"]]
    boot = []
    for _ in range(n_boot):
        ys = [np.median(rng.choice(g, size=len(g))) for g in groups]
        b = fit_line(med.index, ys)
        boot.append((b.intercept, b.slope))
    lo, hi = np.percentile(np.array(boot), [2.5, 97.5], axis=0)
    by_batch = samples.groupby("batch")["step_s"]
    cv = (by_batch.std(ddof=1) / by_batch.mean()).dropna()
    return StepFit(threads=int(threads), step_intercept_s=line.intercept,
                   step_s_per_sample=line.slope, intercept_ci_s=float((hi[0] - lo[0]) / 2),
                   slope_ci_s=float((hi[1] - lo[1]) / 2), r2=line.r2,
                   spread_cv=float(cv.median()) if len(cv) else 0.0,
                   batches=tuple(int(b) for b in med.index))


def model_cost(name: str, shape: dict, steps: pd.DataFrame, evals: pd.DataFrame) -> ModelCost:
    """One model's compute cost; ``steps`` holds probe and run samples (model, threads, batch,
    step_s)."""
    mine = steps[steps["model"] == name]
    fits = []
    for threads, group in mine.groupby("threads"):
        if group["batch"].nunique() >= 2:
            fits.append(step_fit(group, int(threads)))
    if not fits:
        from calibrate.probes.rawio import CalibrationError
        raise CalibrationError(f"model {name}: no thread count has two batch sizes to fit a line")
    probed = mine.dropna(subset=["backward_s"]) if "backward_s" in mine else mine.iloc[:0]
    backward = float((probed["backward_s"] / probed["step_s"]).median()) if len(probed) else 0.6
    ev = evals[evals["model"] == name] if len(evals) else evals
    eval_per_sample = 0.0
    if len(ev):
        ev = ev[ev["threads"] == ev["threads"].max()]
        eval_per_sample = float(ev["eval_s_per_sample"].median())
    return ModelCost(model=name, param_count=int(shape["param_count"]),
                     layer_param_counts=tuple(int(c) for c in shape["layer_param_counts"]),
                     tensor_param_counts=tuple(int(c) for c in shape.get("tensor_param_counts", ())),
                     steps=tuple(fits), backward_fraction=backward,
                     eval_s_per_sample=eval_per_sample)


def sharing_slowdown(rows: pd.DataFrame, max_k: int | None = None,
                     alone_s: float | None = None) -> dict[int, float]:
    """k -> median step with k processes at once / the step alone.

    ``alone_s`` (the compute fit's step at the same model and batch) is the reference
    when given; otherwise the median of the k = 1 rows.
    """
    if rows is None or not len(rows):
        return {}
    med = rows.groupby("k")["step_s"].median()
    if alone_s is None:
        if 1 not in med.index:
            return {}
        alone_s = med[1]
    slow = {int(k): float(v / alone_s) for k, v in med.items()
            if max_k is None or k <= max_k}
    slow[1] = 1.0
    return dict(sorted(slow.items()))


def server_cost(rows: pd.DataFrame) -> tuple[ServerCost, float]:
    """(ServerCost of ``w -= lr * g``, gamma_s_per_byte of one gradient add)."""
    update = fit_line(rows["params"], rows["update_s"])
    per_add = rows["sum_s"] / rows["adds"].clip(lower=1)
    gamma = fit_line(4 * rows["params"], per_add)
    return (ServerCost(update_intercept_s=update.intercept, update_s_per_param=update.slope,
                       r2=update.r2), gamma.slope)


def with_server_updates(costs: tuple[ModelCost, ...], rows: list[dict]) -> tuple[ModelCost, ...]:
    """Each model with its ``server_update_s``: the median of the probe's rows of the real
    server's update (``server_update.csv``) back to back (``idle_s`` 0, or every row of a
    table without ``idle_s``), and where the probe timed it after more than one idle wait,
    the curve: the median at each ``idle_s``. A model without rows keeps 0 (the line)."""
    by_model: dict[str, dict[float, list[float]]] = {}
    for row in rows:
        idle = float(row.get("idle_s", 0.0) or 0.0)
        by_model.setdefault(str(row["model"]), {}).setdefault(idle, []).append(
            float(row["update_s"]))
    out = []
    for c in costs:
        by_idle = by_model.get(c.model)
        if not by_idle:
            out.append(c)
            continue
        idle_s = sorted(by_idle)
        medians = tuple(float(np.median(by_idle[i])) for i in idle_s)
        warm = medians[0] if idle_s[0] == 0.0 else float(np.median(sum(by_idle.values(), [])))
        curve = (tuple(idle_s), medians) if len(idle_s) > 1 else ((), ())
        out.append(replace(c, server_update_s=warm, server_idle_s=curve[0],
                           server_update_after_idle_s=curve[1]))
    return tuple(out)


def with_server_probe(prof, rows: list[dict]):
    """Profile ``prof`` whose models without a measured server update take a server probe's
    (``server_update.csv``'s rows: ``with_server_updates``, its curve with it): for a
    profile made before the probe timed the update, or before it timed it after idle waits.
    A probed model the profile lacks is added with its update alone (its parameters from the
    probe's ``params``, no step fit): a phantom's slept workload, whose steps its file gives,
    takes its server's update from the model it sleeps (``simulator.engine.machine``), and a
    profile calibrated on another model (the emulated cluster's, on the MLP) has none."""
    unmeasured = [m for m in prof.models if not m.server_update_s]
    known = {m.model for m in prof.models}
    params = {str(r["model"]): int(r["params"]) for r in rows if "params" in r}
    absent = tuple(ModelCost(model=name, param_count=n, layer_param_counts=(n,), steps=())
                   for name, n in sorted(params.items()) if name not in known)
    probed = {m.model: m for m in with_server_updates(tuple(unmeasured), rows)}
    added = with_server_updates(absent, rows)
    return replace(prof, models=tuple(probed.get(m.model, m) for m in prof.models) + added)


def step_errors(cost: ModelCost, steps: pd.DataFrame) -> pd.DataFrame:
    """Relative error of each fitted line against the median step per batch (for the docs)."""
    out = []
    mine = steps[steps["model"] == cost.model]
    for fit in cost.steps:
        med = _medians(mine[mine["threads"] == fit.threads])
        rel = np.abs(np.array([fit.step_s(b) for b in med.index]) - med.values) / med.values
        out.append({"model": cost.model, "threads": fit.threads,
                    "median_rel_error": float(np.median(rel)), "worst_rel_error": float(rel.max())})
    return pd.DataFrame(out)
