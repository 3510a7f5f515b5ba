"""Measured against predicted, part by part, at every point of a one-host validation.

    python -m benchmarks.onehost_parts docs/results/validation-5 [--schemes hogwild,psgd] \
        [--held-out] [--loop-ms MS] [--out parts.csv]

What ``benchmarks.phantom_parts`` does for phantom runs, on a one-host validation that keeps
its records (``pipelines.validate``'s ``OUT/runs``, or a shipped folder's
``records.tar.xz``): its points are predicted again by ``simulator.compare`` with the
folder's profile (``holdout_profile.json``, else ``profile.json``) and each point's measured
figure, ``simulator.compare.steady_epoch_s``, is split as ``benchmarks.ddp_breakdown``
splits it (``epoch_parts``, ms an epoch scaled by n / (n - 1)): *outside* (setup and the
first rows' skew) and the *steps* (rank 0's rows after its first and its loop's Python).
A step is then set beside the model's, part by part, over the workers (a server's rank 0
left out):

* *compute*: the workers' compute row and rank 0's loop's Python a step (its ``epoch_s``
  less its rows, ``real.records.timing.window_parts``; the server's loop in the server
  schemes), against the model's compute a step, which holds the step fit and the profile's
  loop (``Profile.loop_s_per_step``, shown apart: the model charges it inside the step's
  CPU job, shared as the step is where cores are crowded);
* *comm*: the workers' communication and waiting a step against the model's (ddp's compute
  row holds its bucket all-reduces: there the whole gap is *comm*).

The gap, predicted less measured (ms an epoch), is *outside* + *compute* + *comm*, *comm*
the rest. Also a rank's *CPU a step* (all its threads, the mean over the ranks:
``benchmarks.ddp_breakdown.cpu_per_step_s``) and, for gloo's per-tensor allreduce, the CPU
the model gives a rank's calls a step (``simulator.model.comm.base.call_cpu_s`` over the
model's tensors): beside a scheme without calls at the same P (psgd), what the calls cost
the cores. *where*: the part that holds most of it. ``--loop-ms`` predicts with that loop
instead of the profile's (0: none), to show what the loop moves. Reads records only; the
records ``simulator.compare`` leaves out (disturbed) are left out here.

Imports: pandas, cli, contracts, simulator.compare, benchmarks.phantom_parts.
"""
from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd

import cli

PROG = "python -m benchmarks.onehost_parts"


def step_count(it: pd.DataFrame, server: bool) -> int:
    """The steps of a record's busiest worker (its rows of iteration 0 and up; a server's
    rows, one a push, are not steps)."""
    workers = it[it["rank"] > 0] if server else it
    return int(workers[workers["iteration"] >= 0].groupby("rank").size().max())


def calls_cpu_s(prof, scheme: str, workers: int, model: str) -> float:
    """The CPU the model gives one rank's collective calls a step where the scheme is
    gloo's per-tensor allreduce (``call_cpu_s`` of each tensor's ring); NaN elsewhere."""
    from simulator.model.comm.base import call_cpu_s
    from simulator.model.schemes import SCHEMES as MODEL_SCHEMES
    if MODEL_SCHEMES[scheme].exchange != "per_tensor" or workers < 2:
        return float("nan")
    t = prof.transport("gloo")
    return sum(call_cpu_s(t, "allreduce", workers, 4.0 * c, "gloo_ring", False)
               for c in prof.model(model).tensor_counts)


def point_parts(parts: list[dict], pred: dict, loop_s: float, overlaps: bool) -> dict:
    """A point's parts (ms an epoch, ms a step), measured (the mean over its records'
    ``record_parts`` with ``workers_steps``, a worker's steps) against ``pred`` (its
    ``simulator.compare`` row), ``loop_s`` the loop a step the model charged; where the gap
    lies. With ``overlaps`` (DDP) the compute row holds communication: no compute gap."""
    m = {k: statistics.fmean(p[k] for p in parts) for k in parts[0]}
    n = m["workers_steps"]
    outside = m["setup_s"] + m["skew_s"]
    steps = m["loop_s"] + m["rows_s"]
    loop_step = m["loop_s"] / m["steps"]
    pred_compute = pred["predicted_compute_s"] / n
    gap = {"outside": -outside,
           "compute": 0.0 if overlaps else (pred_compute - m["compute_s"] - loop_step) * n}
    gap["comm"] = pred["predicted_s"] - steps - gap["compute"]
    return {"measured_ms": pred["measured_s"] * 1e3, "predicted_ms": pred["predicted_s"] * 1e3,
            "error": pred["predicted_s"] / pred["measured_s"] - 1,
            "steps_error": pred["predicted_s"] / steps - 1, "outside_ms": outside * 1e3,
            "compute_step_ms": m["compute_s"] * 1e3, "loop_step_ms": loop_step * 1e3,
            "predicted_compute_step_ms": pred_compute * 1e3, "predicted_loop_ms": loop_s * 1e3,
            "comm_wait_step_ms": m["comm_wait_s"] * 1e3,
            "predicted_comm_wait_step_ms": (pred["predicted_comm_s"]
                                            + pred["predicted_wait_s"]) / n * 1e3,
            "cpu_step_ms": m["cpu_s"] * 1e3,
            "where": max(gap, key=lambda k: abs(gap[k])),
            **{f"gap_{k}_ms": v * 1e3 for k, v in gap.items()}, "steps": n,
            "runs": len(parts)}


def profile_of(folder: Path):
    from contracts import profile as profiles
    for name in ("holdout_profile.json", "profile.json"):
        if (folder / name).is_file():
            return profiles.load(folder / name)
    raise ValueError(f"{folder}: no holdout_profile.json or profile.json (not a one-host "
                     "validation)")


def folder_parts(folder: Path, schemes: set[str] | None, loop_ms: float | None) -> pd.DataFrame:
    """Every point of one one-host validation (of ``schemes``, all where None), a row each;
    ValueError with one line where the folder cannot be read."""
    from benchmarks.ddp_breakdown import cpu_per_step_s
    from benchmarks.phantom_parts import record_parts
    from contracts import record_archive
    from real.schemes import SCHEMES
    from simulator.compare import compare, iterations_of, usable_records
    from simulator.model.schemes import SCHEMES as MODEL_SCHEMES
    prof = profile_of(folder)
    if loop_ms is not None:
        prof = replace(prof, loop_s_per_step=loop_ms / 1e3)
    out = []
    try:
        with record_archive.unpacked(folder) as runs:
            df = compare(runs, prof)
            groups, _ = usable_records(runs)
            for (scheme, workers, wl, _, _), recs in groups.items():
                if schemes and scheme.name not in schemes:
                    continue
                pred = df[(df["scheme"] == scheme.name) & (df["workers"] == workers)
                          & (df["model"] == wl.model)]
                if pred.empty:
                    continue
                server = SCHEMES[scheme.name].server
                parts = []
                for r in recs:
                    it = iterations_of(r)
                    n = step_count(it, server)
                    parts.append({**record_parts(r, it, server), "workers_steps": n,
                                  "cpu_s": cpu_per_step_s(r, n)})
                out.append({"folder": folder.name, "scheme": scheme.name, "workers": workers,
                            "held_out": bool(pred.iloc[0]["held_out"]),
                            **point_parts(parts, pred.iloc[0].to_dict(), prof.loop_s_per_step,
                                          MODEL_SCHEMES[scheme.name].overlaps_backward),
                            "predicted_calls_cpu_step_ms": 1e3 * calls_cpu_s(
                                prof, scheme.name, workers, wl.model)})
    except record_archive.ArchiveError as e:
        raise ValueError(str(e)) from None
    return pd.DataFrame(out)


COLUMNS = {"scheme": "scheme", "workers": "P", "held_out": "held out", "error": "error",
           "steps_error": "steps only", "outside_ms": "outside (ms)",
           "gap_outside_ms": "gap: outside", "gap_compute_ms": "compute", "gap_comm_ms": "comm",
           "compute_step_ms": "compute row a step", "loop_step_ms": "loop a step",
           "predicted_compute_step_ms": "predicted compute a step",
           "predicted_loop_ms": "of which loop", "comm_wait_step_ms": "comm+wait a step",
           "predicted_comm_wait_step_ms": "predicted", "cpu_step_ms": "CPU a step",
           "predicted_calls_cpu_step_ms": "model's calls' CPU", "where": "where"}


def markdown(df: pd.DataFrame) -> str:
    """The points as a markdown table (errors in percent, times in ms)."""
    def cell(k, v):
        if k in ("error", "steps_error"):
            return f"{100 * v:+.1f}%"
        if k == "held_out":
            return "yes" if v else ""
        if isinstance(v, float) and v != v:
            return "-"
        if k in ("compute_step_ms", "loop_step_ms", "predicted_compute_step_ms",
                 "predicted_loop_ms", "comm_wait_step_ms", "predicted_comm_wait_step_ms",
                 "cpu_step_ms", "predicted_calls_cpu_step_ms"):
            return f"{v:.2f}"
        return f"{v:.0f}" if isinstance(v, float) else str(v)
    lines = ["| " + " | ".join(COLUMNS.values()) + " |", "|" + "---|" * len(COLUMNS)]
    for r in df.to_dict("records"):
        lines.append("| " + " | ".join(cell(k, r[k]) for k in COLUMNS) + " |")
    return "\n".join(lines)


def build_parser() -> cli.Parser:
    ap = cli.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=cli.input_folder,
                    help="one-host validations with their records (OUT of pipelines.validate, "
                         "or a docs/results folder with records.tar.xz)")
    ap.add_argument("--schemes", help="only these schemes, comma-separated (default: all)")
    ap.add_argument("--held-out", action="store_true", help="only the held-out points")
    ap.add_argument("--loop-ms", type=float, default=None,
                    help="the loop's Python a step to predict with, ms (default: the "
                         "profile's)")
    ap.add_argument("--out", type=cli.output_file(".csv"), help="CSV to write (default: none)")
    return ap


def run(a) -> int:
    from benchmarks.phantom_parts import print_parts
    if a.loop_ms is not None and a.loop_ms < 0:
        return cli.usage_error(PROG, f"--loop-ms {a.loop_ms}: give 0 or more")
    schemes = set(a.schemes.split(",")) if a.schemes else None
    frames = []
    for f in a.folders:
        try:
            frames.append(folder_parts(Path(f), schemes, a.loop_ms))
        except ValueError as e:
            return cli.usage_error(PROG, str(e))
    return print_parts(a, PROG, frames, ["scheme", "workers", "folder"],
                       "no point of those schemes in the folders given",
                       "gap = predicted - measured, ms an epoch; outside = before and after the "
                       "steps (setup and first-row skew); steps only = the error against the "
                       "steps; a step's parts in ms (compute: the workers' rows; loop: rank 0's)",
                       markdown)


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
