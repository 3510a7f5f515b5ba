"""What a calibration will cost, said before it starts: each stage's expected seconds.

The estimate scales stage costs measured on a quiet reference machine (``REFERENCE``:
``python -m calibrate`` and ``--quick`` on it, each stage's seconds from the run's
``timings.json``; docs/calibration.md names the machine and the date) by how much
more or less the plan of this machine holds:

* compute probe: seconds per (model, batch, threads) point of that model, times the
  plan's points (threads 1..cores: more cores, more points); the points' own time and
  the probe's start spread over them;
* sharing probe: seconds per k (its window plus starting k processes), times the ks;
* server and scheduler probes, and one fit: as measured (they do not grow with cores);
* comm probe at P ranks: a line a + b P through the reference's runs at P = 2..2 cores,
  carried to this plan's P; one line for the runs of MPI's default algorithm (they also
  time gloo and the other operations) and one for the runs of one allreduce algorithm.

It is the time on a quiet machine like the reference; a busy or slower one takes longer
(the progress lines say how the stages actually go), and each repeat of a probe whose fits
fall below the bar (``--repeat-noisy``) adds that probe's time again.

``python -m calibrate.estimate WORKDIR [--quick]`` derives the reference's figures from a
finished calibration's workdir (``timings.json``, ``quality.json``, the compute probe's
steps): the numbers in ``REFERENCE`` came from it.

Imports: pandas (``derive`` only), calibrate (plan, rawio), cli.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

# Measured on the reference machine: python -m calibrate [--quick] --force --workdir W, then
# python -m calibrate.estimate W [--quick] (seconds; docs/calibration.md).
REFERENCE = {
    "full": {"compute_s_per_point": {"cnn": 1.01, "linear": 0.643, "mlp": 0.655,
                                     "ps_cnn": 1.622, "vgg11": 4.827},
             "sharing_s_per_k": 6.71, "server_s": 2.34, "scheduler_s": 26.92, "fit_s": 1.24,
             "comm_s": {"auto": {"a": -2.93, "b": 5.88}, "one": {"a": 1.51, "b": 0.5}}},
    "quick": {"compute_s_per_point": {"cnn": 0.397, "linear": 0.341, "mlp": 0.343,
                                      "ps_cnn": 0.559, "vgg11": 1.335},
              # scheduler_s: the quick plan's smaller scheduler probe alone (python -m
              # calibrate.probe --part scheduler --quick, load 0.7-1.0, 2026-11-28; 26.4 s before)
              "sharing_s_per_k": 4.65, "server_s": 2.42, "scheduler_s": 16.8, "fit_s": 4.92,
              "comm_s": {"auto": {"a": 3.75, "b": 0.0}, "one": {"a": 2.01, "b": 0.0}}},
}
REFERENCE_MACHINE = "a 2-core VM (AMD EPYC), quiet, 2026-11-27"


def expected_s(plan, labels: list[str], quick: bool) -> dict[str, float]:
    """Expected seconds of every stage (``labels`` as ``python -m calibrate`` names them,
    and ``fit``)."""
    ref = REFERENCE["quick" if quick else "full"]
    per_point = ref["compute_s_per_point"]
    fallback = max(per_point.values())
    out = {}
    for label in labels + ["fit"]:
        if label == "compute probe":
            out[label] = sum(per_point.get(m, fallback) for m in plan.models) * len(
                plan.batches) * len(plan.threads)
        elif label == "sharing probe":
            out[label] = ref["sharing_s_per_k"] * len(plan.sharing_ks)
        elif label in ("server probe", "scheduler probe", "fit"):
            out[label] = ref[label.split()[0] + "_s"]
        elif label.startswith("comm P="):
            p = int(label.split()[1].removeprefix("P="))
            line = ref["comm_s"]["auto" if label.endswith(" auto") else "one"]
            out[label] = max(line["a"] + line["b"] * p, 0.0)
        else:
            out[label] = 0.0
    return out


def minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def summary(expected: dict[str, float], cores: int, quiet_wait_s: float,
            repeats: int = 2) -> str:
    """The line said before anything runs: stages, expected time, the wait before them."""
    comm = [k for k in expected if k.startswith("comm P=")]
    parts = [f"{k.removesuffix(' probe')} {minutes(v)}" for k, v in expected.items()
             if not k.startswith("comm P=")]
    parts.insert(-1, f"comm ({len(comm)} runs) {minutes(sum(expected[k] for k in comm))}")
    wait = (f"; first up to {quiet_wait_s:.0f} s waiting for a quiet machine (--quiet-wait)"
            if quiet_wait_s > 0 else "")
    if repeats:
        wait += (f"; a probe whose fits fall below the bar from noise runs again, up to "
                 f"{repeats} times (--repeat-noisy)")
    return (f"{len(expected)} stages on {cores} cores, about {minutes(sum(expected.values()))} "
            f"on a quiet machine ({', '.join(parts)}; estimated from stage costs measured on "
            f"{REFERENCE_MACHINE}){wait}")


def stage_line(i: int, n: int, label: str, expected: dict[str, float], elapsed_s: float) -> str:
    """The line said as a stage starts: which, its expected time, how far along."""
    return (f"[{i}/{n}] {label}, expected {minutes(expected.get(label, 0.0))} "
            f"({minutes(elapsed_s)} of about {minutes(sum(expected.values()))} so far)")


def derive(workdir: str | Path, plan) -> dict:
    """The reference figures of one finished calibration with ``plan``: per-stage seconds
    (``timings.json``) split into per-point, per-k and per-run costs. The fit's time has
    the probes it repeated and the waits before them taken out (``quality.json``)."""
    import numpy as np
    import pandas as pd
    workdir = Path(workdir)
    t = json.loads((workdir / "timings.json").read_text())
    q = json.loads((workdir / "quality.json").read_text())
    steps = pd.read_csv(workdir / "compute_steps.csv")
    points = steps.groupby("model")[["batch", "threads"]].apply(
        lambda g: len(g.drop_duplicates()))
    overhead = (t["compute probe"] - steps["step_s"].sum()) / points.sum()
    per_point = {m: round(float(steps[steps.model == m]["step_s"].sum() / points[m] + overhead), 3)
                 for m in points.index}
    repeated = sum(t.get(label, 0.0) * n for label, n in q.get("probe_repeats", {}).items())
    waited = sum(w.get("waited_s", 0.0) for w in q.get("quiet_wait", {}).get("waits", [])[1:])
    rounds = max(q.get("probe_repeats", {}).values(), default=0)    # fits after repeats
    comm = {}
    for kind in ("auto", "one"):
        runs = [(int(k.split()[1].removeprefix("P=")), v) for k, v in t.items()
                if k.startswith("comm P=") and (k.endswith(" auto") == (kind == "auto"))]
        if runs:
            ps, secs = np.array([p for p, _ in runs], float), np.array([v for _, v in runs])
            b, a = np.polyfit(ps, secs, 1) if len(set(ps)) > 1 else (0.0, float(secs.mean()))
            comm[kind] = {"a": round(float(a), 2), "b": round(float(b), 2)}
    return {"compute_s_per_point": per_point,
            "sharing_s_per_k": round(t["sharing probe"] / len(plan.sharing_ks), 2),
            "server_s": round(t["server probe"], 2), "scheduler_s": round(t["scheduler probe"], 2),
            "fit_s": round(max(t["fit"] - repeated - waited, 0.0) / (1 + rounds), 2),
            "comm_s": comm}


def main(argv=None) -> int:
    import cli
    p = cli.Parser(prog="python -m calibrate.estimate", description=__doc__.split("\n")[0])
    p.add_argument("workdir", type=cli.input_folder,
                   help="the workdir of a finished python -m calibrate (on this machine)")
    p.add_argument("--quick", action="store_true", help="it was a --quick calibration")
    return cli.command(p.prog, p.parse_args, run, argv)


def run(args) -> int:
    import cli

    from calibrate.probes.plan import full_plan, quick_plan
    try:
        ref = derive(args.workdir, quick_plan() if args.quick else full_plan())
    except (OSError, KeyError, ValueError) as e:
        return cli.usage_error("python -m calibrate.estimate", f"{args.workdir} is not a "
                               f"finished calibration's workdir ({type(e).__name__}: {e})")
    cli.print_out(json.dumps(ref, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
