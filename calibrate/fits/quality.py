"""Is a calibration good enough to predict with? Each fit against a stated bar.

The bar and the checks of a profile's own fits (compute step lines, core sharing) are
``contracts.quality``'s: a prediction reads them from the profile too.

Communication fits are reported with their spread (the ping-pong lines' relative CI
and the collectives' median relative error) but not barred: on a shared virtual
machine they scatter by tens of percent with or without other load, and the
message model uses the point-to-point line, which a scheme's many messages average.

``checks`` lists every fit with its figures; ``probes_to_repeat`` names the probe parts whose
fits fail from noise, so ``python -m calibrate`` can measure them again on a quieter machine (a
fit that fails with steady timings is not measured again: the full calibration of the quiet
2-core VM, 2026-11-27, repeated its compute probe twice, 3 of its 7 minutes, for ps_cnn lines of
R² 0.91 from steps of 3.5% spread); ``refusal`` is the one-line reason not to write the profile,
with the command that writes it from the saved measurements anyway (``--force``: the profile is
then marked below the bar, ``contracts.quality.marked``, and every prediction says so).

Imports: contracts.quality (it reads a calibrate.fits.fit.FitResult and its tables).
"""
from __future__ import annotations

import shlex
from dataclasses import asdict

from contracts.quality import (
    BAR,
    BAR_TEXT,
    SPREAD_LIMIT_CV,
    STEADY_CV,
    Check,
    failing,
    marked,
    profile_checks,
)

__all__ = ["BAR", "BAR_TEXT", "SPREAD_LIMIT_CV", "Check", "checks", "failing", "marked",
           "probes_to_repeat", "refusal", "to_json", "markdown"]


def checks(result, cores: int) -> list[Check]:
    """Every fit of a ``calibrate.fits.fit.FitResult`` against the bar."""
    return profile_checks(result.profile, cores) + _comm_checks(result.comm_table)


def _comm_checks(table) -> list[Check]:
    if table is None or not len(table):
        return []
    out = []
    pingpong = table[table["op"] == "sendrecv"]
    for (backend, workers), g in pingpong.groupby(["backend", "workers"]):
        if workers != pingpong["workers"].min():
            continue
        s = g.iloc[-1]                 # the largest sizes' segment sets the bandwidth
        rel = s.beta_ci_ns_per_byte / s.beta_ns_per_byte if s.beta_ns_per_byte > 0 else float("inf")
        out.append(Check(f"ping-pong {backend} P={workers}",
                         f"bandwidth known within ±{rel:.0%}, median error "
                         f"{s.median_rel_error:.0%}", None, "comm"))
    return out


# With more ranks than cores the comm probe's ranks share cores, and time slices scatter its
# calls whatever else runs: 28-32% at P = 4 on the quiet 2-core VM (2026-11-27). Its limit:
OVERSUBSCRIBED_SPREAD_LIMIT_CV = 0.5
# part -> (its table, the columns that name a point, the timed column)
SPREAD_OF = {"compute": ("compute_steps.csv", ["model", "threads", "batch"], "step_s"),
             "sharing": ("sharing.csv", ["k"], "step_s"),
             "server": ("server.csv", ["params"], "update_s"),
             "comm": (None, ["backend", "op", "algorithm", "bytes"], "time_s")}


def spread(rows, part: str, oversubscribed: bool = False) -> dict:
    """The run-to-run spread of one probe part's rows (a DataFrame): per point the CV of its
    repeats (a collective's time: its slowest rank's, per repeat); the median over the
    points against ``SPREAD_LIMIT_CV`` (``OVERSUBSCRIBED_SPREAD_LIMIT_CV`` for a comm probe
    with more ranks than cores), and the worst point."""
    _, keys, column = SPREAD_OF[part]
    limit = OVERSUBSCRIBED_SPREAD_LIMIT_CV if oversubscribed else SPREAD_LIMIT_CV
    if part == "comm":
        rows = rows.groupby(keys + ["rep"])[column].max().reset_index()
    cv = rows.groupby(keys)[column].agg(lambda t: float(t.std(ddof=0) / t.mean())
                                        if t.mean() > 0 else 0.0)
    if cv.empty:
        return {}
    worst = cv.idxmax()
    worst = worst if isinstance(worst, tuple) else (worst,)
    return {"limit_cv": limit, "median_cv": round(float(cv.median()), 4),
            "worst_cv": round(float(cv.max()), 4), "points": int(len(cv)),
            "points_over": int((cv > limit).sum()),
            "worst_point": " ".join(f"{k}={v}" for k, v in zip(keys, worst)),
            "above_limit": bool(cv.median() > limit)}


def spread_warning(what: str, s: dict) -> str:
    """A line when the spread's median is above the limit ("" otherwise)."""
    if not s.get("above_limit"):
        return ""
    return (f"warning: {what}: run-to-run spread {s['median_cv']:.0%} (median CV of the "
            f"repeats of its {s['points']} points; {s['points_over']} above "
            f"{s['limit_cv']:.0%}, worst {s['worst_point']}: {s['worst_cv']:.0%}): the machine "
            "was not quiet, its timings are not this machine's alone")


def probes_to_repeat(found: list[Check]) -> list[str]:
    """The probes behind failing fits that measuring again could change: a step line whose
    single steps were steady (spread at most ``STEADY_CV``) but is no line in the batch
    stays below the bar however often it is measured."""
    return sorted({c.probe for c in failing(found) if not c.steady})


def refusal(found: list[Check], workdir=None, out=None) -> str:
    """Why the profile is not written, and how to write it from the saved measurements."""
    bad = failing(found)
    names = "; ".join(c.line() for c in bad[:3])
    more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
    steady = sum(c.steady for c in bad)
    if steady:
        more += (f" ({steady} with steady timings: that model's step is not a line in the "
                 "batch, measuring again would not change it)")
    refit = (f"; or write it from the measurements kept in {workdir}, marked below the bar, "
             f"in seconds: python -m calibrate.fit --workdir {shlex.quote(str(workdir))} --out "
             f"{shlex.quote(str(out))} --force" if workdir is not None else
             "; or --force to write it anyway (marked below the bar)")
    return (f"{len(bad)} fit(s) below the bar ({BAR_TEXT}): {names}{more}; calibrate on a "
            f"quiet machine{refit}")


def to_json(found: list[Check], wait: dict | None = None, repeats: dict | None = None,
            forced: bool = False) -> dict:
    """What ``quality.json`` holds: the bar, every check, how long calibration waited."""
    return {"bar": BAR, "bar_text": BAR_TEXT, "passed": not failing(found), "forced": forced,
            "checks": [asdict(c) for c in found], "quiet_wait": wait or {},
            "probe_repeats": repeats or {}}


def markdown(quality: dict) -> str:
    """The quality as a table for a report."""
    lines = ["| fit | quality | against the bar |", "|---|---|---|"]
    for c in quality["checks"]:
        verdict = {True: "ok", False: "**below**", None: "reported"}[c["ok"]]
        lines.append(f"| {c['fit']} | {c['figures']} | {verdict} |")
    return "\n".join(lines)
