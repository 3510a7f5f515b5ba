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
  ``calibrate.fits.fit_comm.run_allreduce_alpha`` measured where the link is.

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
    adds the ranks' sharing of cores itself, ``comm.gloo.cpu_share``): the latency at
    which the model's epoch of those runs equals their measured one, all else priced as
    calibrated (``profile``, ``link``). The model waits that latency
    once a ring step of every call and spends no CPU on it (``Comm._extra_s``), so its
    epoch is a line in it: two predictions, at 0 and ``STEP_PROBE_S``, give the slope, and
    the latency is the mean over the held-in points, at least 0. None where no such run
    was held in (the profile's one-host probe then stands)."""
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
    latency_s = (at_0["measured_s"] - at_0["predicted_s"]) / per_step_s
    return max(0.0, float(latency_s.mean()))


def step_note(step_s: float | None, profile) -> str:
    """One line on where gloo's allreduce latency a ring step came from, for a table."""
    gloo = next((t for t in profile.transports if t.backend == "gloo"), None)
    probe = "" if gloo is None else f"{gloo.step_extra_s('allreduce') * 1e6:.0f} µs"
    if step_s is None:
        return (f"gloo's allreduce latency a ring step: the profile's one-host probe, {probe} "
                "(no allreduce run held in)")
    return (f"gloo's allreduce latency a ring step: {step_s * 1e6:.0f} µs from the held-in "
            f"allreduce runs (the profile's one-host probe: {probe})")
