"""Is a calibration good enough to predict with? Each fit against a stated bar.

The bar (``BAR``), and why:

* **compute step lines** (per model and thread count): R² of the line through the
  per-batch median steps at least 0.98, and the per-sample cost's 95% CI within
  ±10% of it. The step line is the largest cost in every CPU-bound prediction; a
  line of R² 0.95, fitted while other jobs ran, put held-out errors at 33% where a
  clean one gave 17%.
* **core sharing** at k <= cores: k single-thread processes on k or more cores barely
  slow each other, so a slowdown above 1.25 there means something else ran (a
  slowdown of 1.95 at k = 2 on 2 cores over-predicted compute twice over).

Communication fits are reported with their spread (the ping-pong lines' relative CI
and the collectives' median relative error) but not barred: on a shared virtual
machine they scatter by tens of percent with or without other load, and the
message model uses the point-to-point line, which a scheme's many messages average.

``checks`` lists every fit with its figures; ``probes_to_repeat`` names the probe
parts whose fits fail, so ``python -m calibrate`` can measure them again on a quieter
machine; ``refusal`` is the one-line reason not to write the profile (``--force``
writes it anyway, and the quality goes with it into ``quality.json``).

Imports: the standard library only (it reads a calibrate.fit.FitResult and its tables).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

BAR = {"step_r2_min": 0.98, "step_slope_rel_ci_max": 0.10, "sharing_max_at_k_le_cores": 1.25}
BAR_TEXT = (f"step lines: R² >= {BAR['step_r2_min']} and per-sample cost known within "
            f"±{BAR['step_slope_rel_ci_max']:.0%} (95% CI); core sharing at k <= cores: slowdown "
            f"<= {BAR['sharing_max_at_k_le_cores']}")


@dataclass(frozen=True)
class Check:
    fit: str                 # what was fitted, e.g. "step cnn threads=1"
    figures: str             # its quality in words and numbers
    ok: bool | None          # None: reported, not barred
    probe: str               # the probe part that measures it (compute, sharing, comm)


def checks(result, cores: int) -> list[Check]:
    """Every fit of a ``calibrate.fit.FitResult`` against the bar."""
    out = []
    for m in result.profile.models:
        for s in m.steps:
            rel = s.slope_ci_s / s.step_s_per_sample if s.step_s_per_sample > 0 else float("inf")
            ok = s.r2 >= BAR["step_r2_min"] and rel <= BAR["step_slope_rel_ci_max"]
            out.append(Check(f"step {m.model} threads={s.threads}",
                             f"R² {s.r2:.4f}, per-sample {s.step_s_per_sample * 1e3:.4g} ms "
                             f"± {rel:.1%}, spread CV {s.spread_cv:.3f}", ok, "compute"))
    for k, slow in sorted(result.profile.sharing_slowdown.items()):
        if 1 < k <= cores:
            out.append(Check(f"sharing k={k} on {cores} cores", f"slowdown {slow:.2f}",
                             slow <= BAR["sharing_max_at_k_le_cores"], "sharing"))
    out += _comm_checks(result.comm_table)
    return out


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


def failing(found: list[Check]) -> list[Check]:
    return [c for c in found if c.ok is False]


def probes_to_repeat(found: list[Check]) -> list[str]:
    return sorted({c.probe for c in failing(found)})


def refusal(found: list[Check]) -> str:
    bad = failing(found)
    names = "; ".join(f"{c.fit} ({c.figures})" for c in bad[:3])
    more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
    return (f"{len(bad)} fit(s) below the bar ({BAR_TEXT}): {names}{more}; "
            "calibrate on a quiet machine, or --force to write the profile anyway")


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
