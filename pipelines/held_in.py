"""What a phantom comparison calibrates from its own held-in records.

A phantom validation (``pipelines.validate_phantom``) holds in the runs at P up to
``--calibrate-workers`` at the link's calibrated rate, and predicts the rest. Two costs are
measured there, on the link, rather than by the one-host probes of ``calibrate``:

* ``held_in_loop_s``: the training loop's Python a step (``Profile.loop_s_per_step``), for
  a profile without it;
* ``held_in_allreduce_step_s``: gloo's allreduce latency a ring step beyond its ping-pong
  (``Transport.collective_alpha_s["allreduce"]``), from the held-in per-tensor
  ``allreduce`` runs. The one-host probe times it in a tight loop of calls on one host,
  and over the phantom validations' profiles it came out anywhere from 54 to 711 µs a step,
  while the held-in runs give 357-802 µs (phantom-13, -16 to -22): training's calls, each
  handed to ProcessGroupGloo's worker thread and waited on, over the link. It is
  ``calibrate.fits.fit_comm.run_allreduce_alpha`` measured where the link is, fitted in
  relative error over the held-in points (``relative_fit``): a large model's epoch at the
  calibrated rate is mostly bytes and cannot resolve it (phantom-27, VGG-11 alone at 200
  Mbit/s: 52 µs; phantom-28, the same points with the CNN's held in beside them: 413 µs),
  so a validation of a large model holds in a small one's runs too (``--workloads cnn,...``).

Imports: calibrate.fits.runs, contracts.record, simulator.compare.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

STEP_PROBE_S = 1e-3       # the second latency a step the model prices the runs at


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


def with_allreduce_step_s(profile, step_s: float):
    """``profile`` with gloo's allreduce latency a ring step ``step_s`` beyond its
    ping-pong's alpha (``Transport.step_extra_s``)."""
    transports = tuple(
        replace(t, collective_alpha_s={**t.collective_alpha_s, "allreduce": t.alpha_s + step_s})
        if t.backend == "gloo" else t for t in profile.transports)
    return replace(profile, transports=transports)


def held_in_allreduce_step_s(runs: Path, profile, link, calibrate_workers: int,
                             workloads=()) -> float | None:
    """gloo's allreduce latency a ring step beyond its ping-pong's alpha, from the held-in
    per-tensor ``allreduce`` runs where each rank has a core of the machine's (P up to
    ``calibrate_workers`` and ``profile.cores``, at the link's calibrated rate: the model
    adds the ranks' sharing of cores itself, ``comm.gloo.cpu_share``), all else priced as
    calibrated (``profile``, ``link``). The model waits that latency once a ring step of
    every call and spends no CPU on it (``Comm._extra_s``), so each point's epoch is a line
    in it: two predictions, at 0 and ``STEP_PROBE_S``, give its slope. The latency is the
    least-squares fit of those lines to the measured epochs in relative terms (the error
    the validation judges), at least 0: ``relative_fit``. A point's weight is the share of
    its epoch the latency moves, so a small model's runs, whose epoch is mostly ring
    steps, decide it, and a large model's at a low rate (2% of VGG-11's epoch at 200
    Mbit/s and 500 us a step, inside the bytes' own error) barely move it. None where no
    such run was held in (the profile's one-host probe then stands)."""
    from simulator.compare import compare

    def held_in(key) -> bool:
        scheme, workers, _workload, bits_per_s, _hosts = key
        return (scheme.name == "allreduce" and workers <= min(calibrate_workers, profile.cores)
                and bits_per_s is not None and abs(bits_per_s - link.shaped_bits_per_s) < 1)
    epochs = []
    for step_s in (0.0, STEP_PROBE_S):
        df = compare(runs, with_allreduce_step_s(profile, step_s), link=link,
                     workloads=list(workloads), keep=("phantom",), only=held_in)
        if df.empty:
            return None
        epochs.append(df.set_index(["model", "workers"]).sort_index())
    at_0, at_probe = epochs
    per_step_s = (at_probe["predicted_s"] - at_0["predicted_s"]) / STEP_PROBE_S
    return relative_fit(at_0["measured_s"].to_numpy(float), at_0["predicted_s"].to_numpy(float),
                        per_step_s.to_numpy(float))


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


def step_note(step_s: float | None, profile) -> str:
    """One line on where gloo's allreduce latency a ring step came from, for a table."""
    gloo = next((t for t in profile.transports if t.backend == "gloo"), None)
    probe = "" if gloo is None else f"{gloo.step_extra_s('allreduce') * 1e6:.0f} µs"
    if step_s is None:
        return (f"gloo's allreduce latency a ring step: the profile's one-host probe, {probe} "
                "(no allreduce run held in)")
    return (f"gloo's allreduce latency a ring step: {step_s * 1e6:.0f} µs from the held-in "
            f"allreduce runs (the profile's one-host probe: {probe})")
