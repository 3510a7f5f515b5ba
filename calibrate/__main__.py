"""``python -m calibrate``: probe this machine and fit its profile, in one command.

    python -m calibrate --quick --out /tmp/quick_profile.json          # about a minute
    python -m calibrate --out simulator/data/default_profile.json      # the shipped default

Runs every probe as a subprocess with a timeout (``mpirun -n P`` for the
communication probes, one per P and MPI allreduce algorithm, with the venv's
``bin`` first on PATH), then ``calibrate.fit`` in this process. Raw tables,
fit tables, ``fits.png`` and ``timings.json`` (seconds per step) go to
``--workdir``; the profile is written once, atomically, at the very end, so a
failed or interrupted calibration leaves any earlier profile untouched.
"""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from real.record import RecordError
from simulator.profile import ProfileError

from . import plan as planmod
from .probe import add_plan_args, build_plan
from .rawio import CalibrationError, write_json

REPO_ROOT = Path(__file__).resolve().parents[1]
OWN_FILES = ("comm_P*_*.csv", "comm_P*_*.json", "compute_*.csv", "*_meta.json", "sharing.csv",
             "server.csv", "scheduler.csv", "balance.csv", "wake.csv", "models.json",
             "fit_table.csv", "fits.png", "timings.json")


class StepFailed(RuntimeError):
    """A probe subprocess failed or ran out of time (exit code 1, not a usage error)."""


def forwarded_plan_argv(args: argparse.Namespace, plan: planmod.ProbePlan) -> list[str]:
    """The plan as explicit flags, so every subprocess measures exactly this plan."""
    j = lambda xs: ",".join(str(x) for x in xs)  # noqa: E731
    argv = ["--models", j(plan.models), "--batches", j(plan.batches), "--threads", j(plan.threads),
            "--sharing", j(plan.sharing_ks), "--server-params", j(plan.server_params),
            "--sizes", j(plan.comm_sizes_bytes), "--workers", j(plan.comm_workers),
            "--algorithms", j(plan.comm_algorithms), "--timeout-s", str(plan.timeout_s)]
    if args.quick:
        argv.insert(0, "--quick")
    if getattr(args, "repeats", None):
        argv += ["--repeats", str(args.repeats)]
    return argv


def probe_steps(plan: planmod.ProbePlan, workdir: Path, plan_argv: list[str]) -> list[tuple]:
    """(label, argv) per subprocess; argv starts with 'mpirun' for the comm probes."""
    probe = ["python", "-m", "calibrate.probe", "--workdir", str(workdir)]
    steps = [(f"{part} probe", probe + ["--part", part] + plan_argv)
             for part in ("compute", "sharing", "server", "scheduler")]
    for workers in plan.comm_workers:
        for alg in plan.comm_algorithms:
            extra = [] if alg == "auto" else ["--allreduce-only", "--no-gloo"]
            steps.append((f"comm P={workers} {alg}",
                          ["mpirun", "-n", str(workers)] + probe
                          + ["--part", "comm", "--algorithm", alg] + extra + plan_argv))
    return steps


def run_step(argv: list[str], timeout_s: float) -> None:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = f"{REPO_ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}".rstrip(os.pathsep)
    env.pop(planmod.ALGORITHM_ENV, None)          # the probe sets it per algorithm
    real_argv = [sys.executable if a == "python" else a for a in argv]
    try:
        done = subprocess.run(real_argv, cwd=REPO_ROOT, env=env, timeout=timeout_s,
                              capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        raise StepFailed(f"`{shlex.join(argv)}` did not finish within {timeout_s:.0f} s") from None
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise StepFailed(f"`{shlex.join(argv)}` failed (exit {done.returncode}): {tail}")


def clear_workdir(workdir: Path) -> None:
    """Remove our own files of an earlier calibration so the fit sees only this one."""
    for pattern in OWN_FILES:
        for f in workdir.glob(pattern):
            f.unlink()


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m calibrate", description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", default="calibration/profile.json", help="profile to write")
    p.add_argument("--workdir", default="calibration",
                   help="raw measurements, fit tables and plot")
    p.add_argument("--runs", help="also fit step times from the run records below this folder")
    p.add_argument("--max-workers", type=int,
                   help="measure and fit only what runs with at most K processes")
    add_plan_args(p)
    return p.parse_args(argv)


def trimmed_plan(plan: planmod.ProbePlan, max_workers: int | None) -> planmod.ProbePlan:
    if max_workers is None:
        return plan
    if max_workers < 1:
        raise CalibrationError(f"--max-workers must be at least 1, got {max_workers}")
    return replace(plan, comm_workers=tuple(p for p in plan.comm_workers if p <= max_workers),
                   sharing_ks=tuple(k for k in plan.sharing_ks if k <= max_workers) or (1,))


def calibrate(args, argv) -> dict[str, float]:
    from tqdm import tqdm
    from . import fit
    plan = trimmed_plan(build_plan(args), args.max_workers)
    workdir, out = Path(args.workdir).resolve(), Path(args.out)
    if out.suffix != ".json":
        raise CalibrationError(f"--out {out} must end in .json")
    if args.runs and not Path(args.runs).is_dir():
        raise CalibrationError(f"--runs {args.runs} is not a directory")
    load = os.getloadavg()[0]
    if load > 0.5 * planmod.host_cores():
        print(f"calibrate: warning: the host is busy (load average {load:.1f} on "
              f"{planmod.host_cores()} cores): timings will be inflated", file=sys.stderr)
    workdir.mkdir(parents=True, exist_ok=True)
    clear_workdir(workdir)
    steps = probe_steps(plan, workdir, forwarded_plan_argv(args, plan))
    timings: dict[str, float] = {}
    t_start = time.monotonic()
    with tqdm(total=len(steps) + 1, desc="calibrate", unit="step", file=sys.stderr) as bar:
        for label, step_argv in steps:
            bar.set_postfix_str(label)
            t0 = time.monotonic()
            run_step(step_argv, plan.timeout_s)
            timings[label] = time.monotonic() - t0
            bar.update()
        bar.set_postfix_str("fit")
        t0 = time.monotonic()
        result = fit.build(workdir, args.runs, args.max_workers,
                           ("python -m calibrate " + shlex.join(argv),))
        fit.write_outputs(result, workdir, out)
        timings["fit"] = time.monotonic() - t0
        bar.update()
    timings["total"] = time.monotonic() - t_start
    write_json(workdir / "timings.json", timings)
    return timings


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    try:
        timings = calibrate(args, argv)
    except (CalibrationError, ProfileError, RecordError) as e:
        print(f"calibrate: error: {e}", file=sys.stderr)
        return 2
    except StepFailed as e:
        print(f"calibrate: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("calibrate: interrupted; no profile written", file=sys.stderr)
        return 130
    print(f"profile written to {args.out} in {timings['total']:.0f} s "
          f"(raw data, fit tables and fits.png in {args.workdir})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
