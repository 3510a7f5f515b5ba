"""Communication fits: Hockney lines per collective, backend, algorithm and P.

From the raw rows (one per rank and repetition) to a profile entry:

1. per repetition, the max over ranks: the collective is over when the last rank is;
2. per message size, the *mean* over repetitions (with the median and p25/p75
   as the spread). A training run pays every call, so its time is the sum of
   the calls' costs, whose estimate is the mean: gloo calls here take 0.4 ms
   in most repetitions but a 4 ms scheduler tick in about one of four, which
   the median hides and the epoch time does not;
3. ``t(n_bytes) = alpha_s + beta_s_per_byte * n_bytes`` through the means,
   in 1-3 size segments (``linefit.fit_segments``: eager/rendezvous switches);
4. the point-to-point ``Transport`` of a backend is one line through its
   ping-pong (half round trip) means at the smallest P, plus ``gamma_s_per_byte``
   (the per-byte cost of adding one float32 buffer into another, measured apart)
   and ``cpu_fraction``: the CPU time of the calling process (all its threads)
   over the wall time of its collective calls at the smallest P.

Imports: numpy, pandas, calibrate.fits.linefit, contracts.profile, libraries.mpich,
simulator.model.comm.closed_forms.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from libraries.mpich import choose_allreduce
from simulator.model.comm.closed_forms import collective_s, steps
from contracts.profile import CollectiveFit, Segment, Transport

from calibrate.fits.linefit import Line, fit_line, fit_segments, predict_segments, relative_errors, segment_edges

KEY = ["backend", "op", "algorithm", "workers"]


def collective_points(raw: pd.DataFrame, max_workers: int | None = None) -> pd.DataFrame:
    """Mean over repetitions of the max over ranks, per (backend, op, algorithm, P, bytes)."""
    if max_workers is not None:
        raw = raw[raw["workers"] <= max_workers]
    per_rep = raw.groupby(KEY + ["bytes", "rep"], as_index=False)["time_s"].max()
    g = per_rep.groupby(KEY + ["bytes"])["time_s"]
    return pd.DataFrame({"time_s": g.mean(), "median_s": g.median(), "p25_s": g.quantile(0.25),
                         "p75_s": g.quantile(0.75), "reps": g.size()}).reset_index()


def to_segments(lines: tuple[Line, ...]) -> tuple[Segment, ...]:
    return tuple(Segment(min_bytes=lo, max_bytes=hi, alpha_s=ln.intercept,
                         beta_s_per_byte=ln.slope, alpha_ci_s=ln.intercept_ci,
                         beta_ci_s_per_byte=ln.slope_ci, r2=ln.r2, n_points=ln.n_points)
                 for ln, (lo, hi) in zip(lines, segment_edges(lines)))


def fit_collective(points: pd.DataFrame) -> tuple[CollectiveFit, tuple[Line, ...]]:
    """Segmented Hockney fit of one (backend, op, algorithm, P) group of median points."""
    first = points.iloc[0]
    x, y = points["bytes"].to_numpy(float), points["time_s"].to_numpy(float)
    lines = fit_segments(x, y) if len(np.unique(x)) >= 2 else (fit_line([0, x[0]], [y[0], y[0]]),)
    rel = relative_errors(predict_segments(lines, x), y)
    fit = CollectiveFit(backend=str(first["backend"]), op=str(first["op"]),
                        algorithm=str(first["algorithm"]), workers=int(first["workers"]),
                        segments=to_segments(lines), median_rel_error=float(np.median(rel)),
                        worst_rel_error=float(rel.max()))
    return fit, lines


def fit_collectives(points: pd.DataFrame) -> list[tuple[CollectiveFit, tuple[Line, ...]]]:
    return [fit_collective(group) for _, group in points.groupby(KEY, sort=True)]


def transports(points: pd.DataFrame, gamma_s_per_byte: float, eager_max_bytes: int = 0,
               cpu_fractions: dict[str, float] | None = None) -> tuple[Transport, ...]:
    """Per backend: one relative-error line through the ping-pong means at the smallest P,
    the latency per step of each collective (``collective_alphas``) and ``cpu_fractions``."""
    cpu_fractions = cpu_fractions or {}
    out = []
    for backend, group in points[points["op"] == "sendrecv"].groupby("backend"):
        at = group[group["workers"] == group["workers"].min()]
        if at["bytes"].nunique() < 2:
            continue
        line = fit_line(at["bytes"], at["time_s"])
        t = Transport(backend=str(backend), alpha_s=line.intercept,
                      beta_s_per_byte=line.slope, gamma_s_per_byte=gamma_s_per_byte)
        out.append(replace(t, collective_alpha_s=collective_alphas(
            points[points["backend"] == backend], t),
            eager_max_bytes=eager_max_bytes if backend == "mpi" else 0,
            cpu_fraction=cpu_fractions.get(str(backend), 0.0)))
    return tuple(out)


def cpu_fractions(raw: pd.DataFrame, max_workers: int | None = None) -> dict[str, float]:
    """Per backend: the CPU time its collective calls keep the caller on a core for, as a
    share of their wall time (all ranks and repetitions at the smallest P probed; the
    mean over ops and message sizes, each weighing the same). Rows without ``cpu_s``
    (older probes) give none. MPI comes out near 1 (it polls); gloo's threads sleep
    while they wait, but each call's own work (kernel TCP, wake-ups) is most of its time."""
    if "cpu_s" not in raw.columns:
        return {}
    if max_workers is not None:
        raw = raw[raw["workers"] <= max_workers]
    rows = raw[raw["op"].isin(STEP_OPS) & raw["cpu_s"].notna()]
    out = {}
    for backend, group in rows.groupby("backend"):
        at = group[group["workers"] == group["workers"].min()]
        sums = at.groupby(["op", "bytes"])[["cpu_s", "time_s"]].sum()
        sums = sums[sums["time_s"] > 0]
        if len(sums):
            share = float((sums["cpu_s"] / sums["time_s"]).mean())
            out[str(backend)] = min(1.0, max(0.0, share))
    return out


STEP_OPS = ("allreduce", "bcast", "gather", "scatter")
STEP_MAX_BYTES = 64 * 2**10      # where the latency, not the bytes, makes the time


def collective_alphas(points: pd.DataFrame, t: Transport) -> dict[str, float]:
    """Per collective: its latency per step, from messages up to 64 KiB at the smallest P
    probed: the mean of (measured time - what the bytes cost) / steps of the algorithm
    (``closed_form``). gloo's come out well above its ping-pong alpha: each call goes to
    a worker thread, and each step wakes threads, now and then a scheduler tick late."""
    out = {}
    for op in STEP_OPS:
        mine = points[(points["op"] == op) & (points["bytes"] <= STEP_MAX_BYTES)]
        if op == "allreduce" and t.backend == "mpi":
            mine = mine[mine["algorithm"] == "auto"]
        if mine.empty:
            continue
        mine = mine[mine["workers"] == mine["workers"].min()]
        per_step = []
        for r in mine.itertuples():               # the probe's ranks share this host
            algorithm = "gloo_ring" if t.backend != "mpi" else choose_allreduce(
                "auto", float(r.bytes), int(r.workers), hosts=1)
            per_step.append((r.time_s - collective_s(op, int(r.workers), float(r.bytes), 0.0,
                                                     t.beta_s_per_byte, t.gamma_s_per_byte,
                                                     algorithm))
                            / steps(op, int(r.workers), float(r.bytes), algorithm))
        out[op] = max(0.0, float(np.mean(per_step)))
    return out


def run_allreduce_alpha(comm: pd.DataFrame, tensor_counts: dict[str, tuple[int, ...]],
                        t: Transport) -> float | None:
    """gloo's latency per ring step inside training: per iteration of a per-tensor
    ``allreduce`` run, (comm_s - what the bytes cost) / (tensors x ring steps), the mean
    over iterations. None without such runs (or without the model's tensor counts)."""
    per_step = []
    for (model, p), group in comm.groupby(["model", "workers"]):
        counts = tensor_counts.get(model)
        if not counts or p < 2:
            continue
        bytes_s = sum(collective_s("allreduce", int(p), 4.0 * c, 0.0, t.beta_s_per_byte,
                                   t.gamma_s_per_byte, "gloo_ring") for c in counts)
        calls = len(counts) * steps("allreduce", int(p), 4.0, "gloo_ring")
        per_step += list((group["comm_s"].to_numpy(float) - bytes_s) / calls)
    return max(0.0, float(np.mean(per_step))) if per_step else None


def fit_table(fits: list[CollectiveFit]) -> pd.DataFrame:
    """One row per segment: the numbers docs/calibration.md shows."""
    rows = []
    for f in fits:
        for s in f.segments:
            rows.append({"backend": f.backend, "op": f.op, "algorithm": f.algorithm,
                         "workers": f.workers, "min_bytes": s.min_bytes, "max_bytes": s.max_bytes,
                         "alpha_us": s.alpha_s * 1e6, "alpha_ci_us": s.alpha_ci_s * 1e6,
                         "beta_ns_per_byte": s.beta_s_per_byte * 1e9,
                         "beta_ci_ns_per_byte": s.beta_ci_s_per_byte * 1e9,
                         "bandwidth_gb_per_s": (1e-9 / s.beta_s_per_byte
                                                if s.beta_s_per_byte > 0 else float("inf")),
                         "r2": s.r2, "n_points": s.n_points,
                         "median_rel_error": f.median_rel_error,
                         "worst_rel_error": f.worst_rel_error})
    return pd.DataFrame(rows)
