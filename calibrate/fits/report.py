"""Tables of a profile for people: Markdown for docs/calibration.md and ``fit --show``.

Imports: pandas, calibrate.fits.fit_comm, contracts (profile, quality).
"""
from __future__ import annotations

import math

import pandas as pd

from contracts import profile as prof
from contracts import quality

from calibrate.fits.fit_comm import fit_table


def _cell(v, digits: int) -> str:
    if isinstance(v, float):
        return "inf" if math.isinf(v) else f"{v:.{digits}g}"
    return str(v)


def markdown(df: pd.DataFrame, digits: int = 4) -> str:
    """A pipe table (no dependency on ``tabulate``)."""
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(_cell(v, digits) for v in row) + " |")
    return "\n".join(lines)


def compute_rows(p: prof.Profile) -> pd.DataFrame:
    weak = {w.split(" (")[0] for w in quality.below_bar(p)}
    return pd.DataFrame([{"model": m.model, "params": m.param_count, "threads": s.threads,
                          "intercept_ms": s.step_intercept_s * 1e3,
                          "intercept_ci_ms": s.intercept_ci_s * 1e3,
                          "ms_per_sample": s.step_s_per_sample * 1e3,
                          "ms_per_sample_ci": s.slope_ci_s * 1e3, "r2": s.r2,
                          "spread_cv": s.spread_cv, "batches": "/".join(map(str, s.batches)),
                          "backward_fraction": m.backward_fraction,
                          "bar": ("**BELOW**" if f"step {m.model} threads={s.threads}" in weak
                                  else "ok")}
                         for m in p.models for s in m.steps])


def quality_line(p: prof.Profile) -> str:
    """Whether the profile passes its quality bar, and which fits do not."""
    weak = quality.below_bar(p)
    how = "as its file marks it" if p.provenance.bar else "judged now, the file has no mark"
    if not weak:
        return f"quality: every fit passes the bar, {how} (bar: {quality.BAR_TEXT})"
    return (f"quality: BELOW THE BAR in {len(weak)} fit(s), {how}: " + "; ".join(weak)
            + f". Bar: {quality.BAR_TEXT}. Predictions from this profile say so; calibrate on "
            "a quiet machine")


def comm_rows(p: prof.Profile) -> pd.DataFrame:
    table = fit_table(list(p.collectives))
    if not len(table):
        return table
    keep = ["backend", "op", "algorithm", "workers", "min_bytes", "max_bytes", "alpha_us",
            "alpha_ci_us", "beta_ns_per_byte", "beta_ci_ns_per_byte", "r2", "n_points",
            "median_rel_error", "worst_rel_error"]
    return table[keep]


def show(path: str) -> str:
    p = prof.load(path)
    transports = pd.DataFrame([{"backend": t.backend, "alpha_us": t.alpha_s * 1e6,
                                "beta_ns_per_byte": t.beta_s_per_byte * 1e9,
                                "gamma_ns_per_byte": t.gamma_s_per_byte * 1e9,
                                "eager_max_bytes": t.eager_max_bytes,
                                "cpu_fraction": t.cpu_fraction,
                                **{f"{op}_alpha_us_per_step": a * 1e6
                                   for op, a in sorted(t.collective_alpha_s.items())}}
                               for t in p.transports])
    weak = {w.split(" (")[0] for w in quality.below_bar(p)}
    sharing = ", ".join(f"k={k}: {v:.2f}" + (" (**BELOW** the bar)" if
                                              f"sharing k={k} on {p.cores} cores" in weak else "")
                        for k, v in sorted(p.sharing_slowdown.items()))
    return "\n\n".join([
        f"profile {path}: host {p.provenance.host}, {p.cores} cores, {p.provenance.created_utc}; "
        f"workers seen {list(p.provenance.workers_seen)}; runs seen {len(p.provenance.runs_seen)}",
        quality_line(p),
        "compute, t_step(batch) = intercept + per_sample * batch:\n" + markdown(compute_rows(p)),
        "collectives, t(n) = alpha + beta * n per segment:\n" + markdown(comm_rows(p)),
        "transports (point to point) + gamma (per byte reduced):\n" + markdown(transports),
        f"sharing slowdown: {sharing}",
        f"scheduler quantum: {p.scheduler_quantum_s * 1e3:.2f} ms"
        + (" (not measured)" if p.scheduler_quantum_s <= 0 else ""),
        f"balance delay: {p.balance_delay_s * 1e3:.1f} ms"
        + (f" (median of {len(p.balance_delays_s)} tries, {min(p.balance_delays_s) * 1e3:.0f}-"
           f"{max(p.balance_delays_s) * 1e3:.0f} ms)" if p.balance_delays_s else "")
        + (" (not measured: cores shared as a fluid)" if p.balance_delay_s <= 0 else ""),
        f"wake wait: {p.wake_wait_s * 1e3:.2f} ms"
        + (" (not measured: woken ranks start at once)" if p.wake_wait_s <= 0 else ""),
        f"server: t_update(params) = {p.server.update_intercept_s * 1e6:.3g} us + "
        f"{p.server.update_s_per_param * 1e9:.3g} ns * params (R^2 {p.server.r2:.3f})",
        "server's update as the real server runs it: " + (", ".join(
            f"{m.model} {m.server_update_s * 1e3:.3f} ms" for m in p.models if m.server_update_s)
            or "not measured (the line prices it)")])
