"""What a phantom comparison calibrates from its own held-in records.

A phantom validation (``pipelines.validate_phantom``) holds in the runs at P up to
``--calibrate-workers`` at the link's calibrated rate, and predicts the rest. Two costs are
measured there, on the link, rather than by the one-host probes of ``calibrate``:

* ``held_in_loop_s``: the training loop's Python a step (``Profile.loop_s_per_step``), for
  a profile without it;
* ``held_in_steps``: gloo's allreduce latency a ring step beyond its ping-pong
  (``Transport.collective_alpha_s["allreduce"]``), from the held-in per-tensor
  ``allreduce`` runs. The one-host probe times it in a tight loop of calls on one host,
  and over the phantom validations' profiles it came out anywhere from 54 to 711 µs a step,
  while the held-in runs give 357-802 µs (phantom-13, -16 to -22): training's calls, each
  handed to ProcessGroupGloo's worker thread and waited on, over the link. It is
  ``calibrate.fits.fit_comm.run_allreduce_alpha`` measured where the link is, fitted in
  relative error over the held-in points (``relative_fit``): a large model's epoch at the
  calibrated rate is mostly bytes and cannot resolve it (phantom-27, VGG-11 alone at 200
  Mbit/s: 52 µs; phantom-28, the same points with the CNN's held in beside them: 413 µs),
  so a validation holds in a small model's runs too (``--latency-workload``, the CNN;
  phantom-31, VGG-11 given alone and the built-in CNN's runs beside it: 617 µs).
  The same fit over the held-in ``gather_scatter`` runs gives gloo's ``gather`` and
  ``scatter`` their latency a call (``HELD_IN_STEPS``): the probe's 1-405 µs left that
  scheme too fast at every point, its held-in ones too; the CNN's runs give 797-972 µs
  (phantom-14, -15, -26, -28) after 30.6 ms of sleep a step, 462-502 µs after 5.8 ms and
  1,043 µs after 122 ms (the allreduce's alike at every sleep): a cost once after the
  sleep that the model prices as a fixed latency a call, so the fit holds for compute a
  step like the held-in model's (docs/results/phantom.md#phantom-31). A point the
  latency barely moves takes no part (``RESOLVING_SHARE``).

Imports: calibrate.fits.runs, contracts.record, simulator.compare.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

STEP_PROBE_S = 1e-3       # the second latency a step the model prices the runs at
# a held-in point takes part in the fit where STEP_PROBE_S a step moves its epoch by at
# least this share: below, the latency is inside the runs' own spread (their repeats
# agree within 1-4%) and the fit would take up the bytes' error instead (VGG-11's
# gather_scatter at 200 Mbit/s, 24 calls in a 29 s epoch: 0.1%, and a fit of 28-34 ms a
# step; the CNN's 6%, VGG-11's per-tensor allreduce 4%)
RESOLVING_SHARE = 0.01


def held_in_loop_s(runs: Path, link, calibrate_workers: int) -> float:
    """``Profile.loop_s_per_step`` from the records the comparison holds in (P up to
    ``calibrate_workers`` at the link's calibrated rate; ``calibrate.fits.runs``: rank 0's
    loop outside its rows a step, the median), for a profile without it: the phantom
    ranks' own loop, measured where the link is. 0 where none holds it."""
    from calibrate.fits.runs import loop_per_step_s, loop_sample_s
    from contracts import record
    from simulator.compare import workers_of
    samples = []
    for d in record.find_runs(runs):
        try:
            rec = record.read(d)
            rate = rec["identity"]["settings"]["cluster"]["bandwidth_bits_per_s"]
            held_in = (workers_of(rec) <= calibrate_workers
                       and abs(rate - link.shaped_bits_per_s) < 1)
            loop = loop_sample_s(rec, record.read_iterations(d)) if held_in else None
        except (record.RecordError, KeyError, TypeError):
            continue
        if loop is not None:
            samples.append(loop)
    return loop_per_step_s(tuple(samples))


# gloo's collectives whose latency a step a scheme's held-in runs fit, by scheme: each
# scheme calls its own and no other's (ddp's buckets are allreduces: they take the
# allreduce runs' figure; its one broadcast keeps the probe's)
HELD_IN_STEPS = {"allreduce": ("allreduce",), "gather_scatter": ("gather", "scatter")}


def with_step_s(profile, step_s: float, ops=HELD_IN_STEPS["allreduce"]):
    """``profile`` with gloo's latency a step of each collective of ``ops`` ``step_s``
    beyond its ping-pong's alpha (``Transport.step_extra_s``)."""
    transports = tuple(
        replace(t, collective_alpha_s={**t.collective_alpha_s,
                                       **{op: t.alpha_s + step_s for op in ops}})
        if t.backend == "gloo" else t for t in profile.transports)
    return replace(profile, transports=transports)


def held_in_steps(runs: Path, profile, link, calibrate_workers: int,
                  workloads=()) -> dict[str, float | None]:
    """gloo's latency a step of each scheme's collectives (``HELD_IN_STEPS``) beyond its
    ping-pong's alpha, from the held-in runs of that scheme where each rank has a core of
    the machine's (P up to ``calibrate_workers`` and ``profile.cores``, at the link's
    calibrated rate: the model adds the ranks' sharing of cores itself,
    ``comm.gloo.cpu_share``), all else priced as calibrated (``profile``, ``link``). The
    model waits that latency once a step of every call and spends no CPU on it
    (``Comm._extra_s``), so each point's epoch is a line in it: two predictions, at 0 and
    ``STEP_PROBE_S``, give its slope (one pair for every scheme: no scheme calls
    another's collectives). The latency is the least-squares fit of those lines
    to the measured epochs in relative terms (the error the validation judges), at least
    0: ``relative_fit``. A point's weight is the share of its epoch the latency moves, so
    a small model's runs, whose epoch is mostly steps, decide it, and a large model's at
    a low rate (2% of VGG-11's epoch at 200 Mbit/s and 500 us a step, inside the bytes'
    own error) barely move it; a point where it moves less than ``RESOLVING_SHARE`` takes
    no part. None for a scheme where no such run was held in or none resolves it (the
    profile's one-host probe then stands)."""
    from simulator.compare import compare
    every_op = tuple(op for ops in HELD_IN_STEPS.values() for op in ops)

    def held_in(key) -> bool:
        kind, workers, _workload, bits_per_s, _hosts = key
        return (kind.name in HELD_IN_STEPS and workers <= min(calibrate_workers, profile.cores)
                and bits_per_s is not None and abs(bits_per_s - link.shaped_bits_per_s) < 1)
    epochs = []
    for step_s in (0.0, STEP_PROBE_S):
        df = compare(runs, with_step_s(profile, step_s, every_op), link=link,
                     workloads=list(workloads), keep=("phantom",), only=held_in)
        if df.empty:
            return dict.fromkeys(HELD_IN_STEPS)
        epochs.append(df.set_index(["scheme", "model", "workers"]).sort_index())
    at_0, at_probe = epochs
    per_step_s = (at_probe["predicted_s"] - at_0["predicted_s"]) / STEP_PROBE_S
    resolving = (per_step_s * STEP_PROBE_S / at_0["measured_s"]) >= RESOLVING_SHARE
    schemes = at_0.index.get_level_values("scheme")
    fitted = {}
    for scheme in HELD_IN_STEPS:
        use = resolving & (schemes == scheme)
        fitted[scheme] = (relative_fit(at_0.loc[use, "measured_s"].to_numpy(float),
                                       at_0.loc[use, "predicted_s"].to_numpy(float),
                                       per_step_s[use].to_numpy(float)) if use.any() else None)
    return fitted


def with_held_in_steps(runs: Path, profile, link, calibrate_workers: int, workloads=()):
    """(``profile`` with every latency a step the held-in runs fit, ``HELD_IN_STEPS``; one
    line per scheme on where its latency came from, ``step_note``)."""
    fitted = held_in_steps(runs, profile, link, calibrate_workers, workloads)
    notes = [step_note(scheme, step_s, profile) for scheme, step_s in fitted.items()]
    for scheme, step_s in fitted.items():
        if step_s is not None:
            profile = with_step_s(profile, step_s, HELD_IN_STEPS[scheme])
    return profile, notes


def relative_fit(measured_s, predicted_at_0_s, per_step_s) -> float:
    """The x >= 0 minimising sum(((predicted_at_0 + per_step * x) / measured - 1) ** 2):
    each point's epoch a line in the latency x, fitted in relative error, so a point
    counts by the share of its epoch x moves (``per_step / measured``). One point: the x
    at which its line meets its measurement."""
    import numpy as np
    lever = np.asarray(per_step_s, float) / np.asarray(measured_s, float)
    miss = 1.0 - np.asarray(predicted_at_0_s, float) / np.asarray(measured_s, float)
    denominator = float(np.sum(lever * lever))
    return max(0.0, float(np.sum(lever * miss)) / denominator) if denominator > 0 else 0.0


def step_note(scheme: str, step_s: float | None, profile) -> str:
    """One line on where gloo's latency a step of ``scheme``'s collectives came from, for a
    table."""
    ops = HELD_IN_STEPS[scheme]
    gloo = next((t for t in profile.transports if t.backend == "gloo"), None)
    probe = "" if gloo is None else " / ".join(f"{gloo.step_extra_s(op) * 1e6:.0f} µs"
                                               for op in ops)
    what = ("gloo's allreduce latency a ring step" if ops == ("allreduce",)
            else f"gloo's {' and '.join(ops)} latency a call")
    if step_s is None:
        return (f"{what}: the profile's one-host probe, {probe} (no held-in {scheme} run "
                "resolves it)")
    return (f"{what}: {step_s * 1e6:.0f} µs from the held-in {scheme} runs (the profile's "
            f"one-host probe: {probe})")
