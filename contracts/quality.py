"""The bar a profile's fits must pass before its predictions are to be trusted.

The bar (``BAR``), and why:

* **compute step lines** (per model and thread count): R² of the line through the
  per-batch median steps at least 0.98, and the per-sample cost's 95% CI within
  ±10% of it. The step line is the largest cost in every CPU-bound prediction; a
  line of R² 0.95, fitted while other jobs ran, put held-out errors at 33% where a
  clean one gave 17%.
* **core sharing** at k <= cores: k single-thread processes on k or more cores barely
  slow each other, so a slowdown above 1.25 there means something else ran (a
  slowdown of 1.95 at k = 2 on 2 cores over-predicted compute twice over).

``profile_checks`` judges a profile's own fits (any profile, an older one included);
``calibrate.fits.quality`` adds the communication fits it reports and decides what to
measure again. A profile written below the bar (``--force``) says so in its
provenance (``bar``, ``below_bar``); ``below_bar`` reads the mark, or judges a profile
written before the mark existed, and ``used_by`` tells which of its weak fits a
prediction of one model uses (its step lines and core sharing).

Imports: the standard library only (it reads a contracts.profile.Profile).
"""
from __future__ import annotations

from dataclasses import dataclass

BAR = {"step_r2_min": 0.98, "step_slope_rel_ci_max": 0.10, "sharing_max_at_k_le_cores": 1.25}
BAR_TEXT = (f"step lines: R² >= {BAR['step_r2_min']} and per-sample cost known within "
            f"±{BAR['step_slope_rel_ci_max']:.0%} (95% CI); core sharing at k <= cores: slowdown "
            f"<= {BAR['sharing_max_at_k_le_cores']}")


# Run-to-run spread: the coefficient of variation (std / mean) of the repeated timings of
# one point. On the quiet 2-core VM (2026-11-27, python -m calibrate --quick) the compute
# probe's points had a median of 5% (worst 14%), sharing 10-20%, the comm probe 20%
# (tiny messages up to 200%): a median above a quarter means the machine was not quiet.
SPREAD_LIMIT_CV = 0.25
# A step line is "steady" when its single steps vary by at most this much: the per-batch
# medians (5 or more steps each) are then good to about 1-2%, so a line that misses them by
# more is not noise but a step that is no line in the batch (ps_cnn's, R² 0.91-0.95 from
# steps of 3.5-5% spread on the quiet VM), and measuring again cannot change it.
STEADY_CV = 0.05


@dataclass(frozen=True)
class Check:
    fit: str                 # what was fitted, e.g. "step cnn threads=1"
    figures: str             # its quality in words and numbers
    ok: bool | None          # None: reported, not barred
    probe: str               # the probe part that measures it (compute, sharing, comm)
    steady: bool = False     # its timings were steady: measuring again would not change it

    def line(self) -> str:
        return f"{self.fit} ({self.figures})"


def profile_checks(profile, cores: int) -> list[Check]:
    """The profile's step lines and core sharing against the bar."""
    out = []
    for m in profile.models:
        for s in m.steps:
            rel = s.slope_ci_s / s.step_s_per_sample if s.step_s_per_sample > 0 else float("inf")
            ok = s.r2 >= BAR["step_r2_min"] and rel <= BAR["step_slope_rel_ci_max"]
            out.append(Check(f"step {m.model} threads={s.threads}",
                             f"R² {s.r2:.4f}, per-sample {s.step_s_per_sample * 1e3:.4g} ms "
                             f"± {rel:.1%}, spread CV {s.spread_cv:.3f}", ok, "compute",
                             steady=s.spread_cv <= STEADY_CV))
    for k, slow in sorted(profile.sharing_slowdown.items()):
        if 1 < k <= cores:
            out.append(Check(f"sharing k={k} on {cores} cores", f"slowdown {slow:.2f}",
                             slow <= BAR["sharing_max_at_k_le_cores"], "sharing"))
    return out


def failing(found: list[Check]) -> list[Check]:
    return [c for c in found if c.ok is False]


def marked(profile, found: list[Check]):
    """``profile`` with its judgement in its provenance: the bar, and each fit below it."""
    from dataclasses import replace
    prov = replace(profile.provenance, bar=BAR_TEXT,
                   below_bar=tuple(c.line() for c in failing(found)))
    return replace(profile, provenance=prov)


def below_bar(profile) -> tuple[str, ...]:
    """The fits of ``profile`` below the bar, each as a line: as the file marks them, or
    judged now where a profile was written before the mark."""
    prov = profile.provenance
    if prov.bar:
        return tuple(prov.below_bar)
    return tuple(c.line() for c in failing(profile_checks(profile, profile.cores)))


def used_by(lines: tuple[str, ...], model: str) -> tuple[str, ...]:
    """Of the weak fits ``lines``, those a prediction of ``model`` uses."""
    return tuple(ln for ln in lines if ln.startswith((f"step {model} ", "sharing ")))


def warning(profile, model: str) -> str:
    """One line for the header of a prediction of ``model`` ("" for a profile that passes
    its bar): a WARNING where the prediction uses a weak fit, a note where it does not."""
    weak = below_bar(profile)
    if not weak:
        return ""
    used = used_by(weak, model)
    if used:
        return (f"WARNING: the profile is below its quality bar in fits this prediction uses: "
                f"{'; '.join(used)}; its times are not to be trusted (calibrate on a quiet "
                "machine; calibrate.fit --show lists every fit).")
    return (f"Note: the profile is below its quality bar only in fits this prediction does "
            f"not use ({'; '.join(w.split(' (')[0] for w in weak)}).")
