"""``python -m calibrate``: probe this machine and fit its profile, in one command.

    python -m calibrate --quick --out /tmp/quick_profile.json          # about a minute
    python -m calibrate --out simulator/data/default_profile.json      # ~4 min on 2 cores

Runs every probe as a subprocess with a timeout (``mpirun -n P`` for the
communication probes, one per P and MPI allreduce algorithm, with the venv's
``bin`` first on PATH), then ``calibrate.fit`` in this process. Raw tables,
fit tables, ``fits.png`` and ``timings.json`` (seconds per step) go to
``--workdir``; the profile is written once, atomically, at the very end, so a
failed or interrupted calibration leaves any earlier profile untouched.

It says what it does: before anything runs, its stages and their expected time on
this many cores (``calibrate.estimate``, from stage costs measured on a reference
machine), then a line as each stage starts, and what each probe warned of (its
run-to-run spread).

Timings taken while other jobs run are not this machine's: before probing, the
command waits (up to ``--quiet-wait`` seconds) until other processes use less than
a quarter core (``real.records.load.wait_for_quiet``), saying what it sees and how long it
will wait; after fitting, every fit is checked against a stated bar
(``calibrate.fits.quality``), the probes behind fits that fail from noise are run again,
after another wait, up to ``--repeat-noisy`` times, and a profile still below the
bar is not written unless ``--force`` (the refusal names the ``calibrate.fit``
command that writes it from the kept measurements; a forced profile is marked below
the bar, and every prediction from it says so). ``quality.json`` in the workdir
holds every check, the waits and the repeats.

Imports: calibrate (estimate, fit, plan, probe, quality, rawio), real.records.load, contracts
(cli, profile, record); the probes run as commands of their own in subprocesses.
"""
from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from real.launch.dist import isolated
import cli
from cli import Parser
from contracts.profile import ProfileError
from contracts.record import RecordError

from calibrate.probes import plan as planmod
from calibrate.fits import quality
from calibrate.probes.probe import add_plan_args, build_plan
from calibrate.probes.rawio import CalibrationError, write_json

REPO_ROOT = Path(__file__).resolve().parents[1]
OWN_FILES = ("comm_P*_*.csv", "comm_P*_*.json", "compute_*.csv", "*_meta.json", "sharing.csv",
             "server.csv", "server_update.csv", "scheduler.csv", "balance.csv", "wake.csv", "models.json",
             "fit_table.csv", "fits.png", "timings.json", "quality.json")


class StepFailed(RuntimeError):
    """A probe subprocess failed or ran out of time (exit code 1, not a usage error)."""


class BelowBar(RuntimeError):
    """The fits stayed below the quality bar; no profile written (exit code 1)."""


def forwarded_plan_argv(args: argparse.Namespace, plan: planmod.ProbePlan) -> list[str]:
    """The plan as explicit flags, so every subprocess measures exactly this plan."""
    j = lambda xs: ",".join(str(x) for x in xs)
    argv = ["--models", j(plan.models), "--batches", j(plan.batches), "--threads", j(plan.threads),
            "--sharing", j(plan.sharing_ks), "--server-params", j(plan.server_params),
            "--sizes", j(plan.comm_sizes_bytes), "--workers", cli.workers_flag(list(plan.comm_workers)),
            "--mpi-allreduce", j(plan.comm_algorithms), "--timeout-s", str(plan.timeout_s)]
    if args.quick:
        argv.insert(0, "--quick")
    if getattr(args, "repeats", None):
        argv += ["--repeats", str(args.repeats)]
    if getattr(args, "device", "cpu") != "cpu":
        argv += ["--device", args.device]
    return argv


def probe_steps(plan: planmod.ProbePlan, workdir: Path, plan_argv: list[str]) -> list[tuple]:
    """(label, argv) per subprocess; the comm probes run under mpirun, in a network of their
    own where the machine allows it (``real.launch.dist.isolated``)."""
    probe = ["python", "-m", "calibrate.probe", "--workdir", str(workdir)]
    steps = [(f"{part} probe", probe + ["--part", part] + plan_argv)
             for part in ("compute", "sharing", "server", "scheduler")]
    steps.append(("copy probe", ["python", "-m", "calibrate.copy_probe",
                                 "--out", str(workdir / "copies.csv")]))
    for workers in plan.comm_workers:
        for alg in plan.comm_algorithms:
            extra = [] if alg == "auto" else ["--allreduce-only", "--no-gloo"]
            steps.append((f"comm P={workers} {alg}",
                          isolated(["mpirun", "-n", str(workers)] + probe
                                   + ["--part", "comm", "--algorithm", alg] + extra
                                   + plan_argv)))
    return steps


def run_step(argv: list[str], timeout_s: float) -> None:
    """One probe as a subprocess in a session of its own; past ``timeout_s`` (or on Ctrl-C)
    it is stopped as a whole: SIGTERM to it (mpirun passes it to its ranks), then SIGKILL
    to its process group."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = f"{REPO_ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}".rstrip(os.pathsep)
    env.pop(planmod.ALGORITHM_ENV, None)          # the probe sets it per algorithm
    real_argv = [sys.executable if a == "python" else a for a in argv]
    proc = subprocess.Popen(real_argv, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _stop(proc)
        raise StepFailed(f"`{shlex.join(argv)}` did not finish within {timeout_s:.0f} s") from None
    except KeyboardInterrupt:
        _stop(proc)
        raise
    if proc.returncode != 0:
        tail = (err.strip().splitlines() or ["(no output)"])[-1]
        raise StepFailed(f"`{shlex.join(argv)}` failed (exit {proc.returncode}): {tail}")
    for line in err.splitlines():              # what the probe warned of (its spread)
        if "calibrate.probe: warning:" in line:
            print(line.replace("calibrate.probe: ", "calibrate: "), file=sys.stderr, flush=True)


def _stop(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig) if sig == signal.SIGKILL else proc.send_signal(sig)
            proc.communicate(timeout=grace_s)
            return
        except (ProcessLookupError, subprocess.TimeoutExpired):
            continue


def clear_workdir(workdir: Path) -> None:
    """Remove our own files of an earlier calibration so the fit sees only this one."""
    for pattern in OWN_FILES:
        for f in workdir.glob(pattern):
            f.unlink()


def build_parser() -> Parser:
    p = Parser(prog="python -m calibrate", description=__doc__.split("\n")[0])
    p.add_argument("--out", default="calibration/profile.json", type=cli.output_file(".json"),
                   help="profile to write")
    p.add_argument("--workdir", default="calibration", type=cli.output_folder,
                   help="raw measurements, fit tables and plot")
    p.add_argument("--runs", type=cli.input_folder,
                   help="also fit step times from the run records below this folder")
    p.add_argument("--max-workers", type=cli.int_in(1, cli.MAX_WORKERS),
                   help="measure and fit only what runs with at most K processes")
    p.add_argument("--quiet-wait", type=float, default=120.0,
                   help="seconds to wait for other processes to leave the machine before "
                        "probing, and before each repeat (0: do not wait)")
    p.add_argument("--repeat-noisy", type=int, default=2,
                   help="times to measure again the probes whose fits are below the bar")
    p.add_argument("--force", action="store_true",
                   help="write the profile even if fits stay below the bar (calibrate.fits.quality)")
    add_plan_args(p)
    return p


def parse_args(argv):
    return build_parser().parse_args(argv)


def trimmed_plan(plan: planmod.ProbePlan, max_workers: int | None) -> planmod.ProbePlan:
    if max_workers is None:
        return plan
    if max_workers < 1:
        raise CalibrationError(f"--max-workers must be at least 1, got {max_workers}")
    return replace(plan, comm_workers=tuple(p for p in plan.comm_workers if p <= max_workers),
                   sharing_ks=tuple(k for k in plan.sharing_ks if k <= max_workers) or (1,))


def calibrate(args, argv) -> dict[str, float]:
    from calibrate.fits import fit
    from calibrate.probes import estimate
    plan = trimmed_plan(build_plan(args), args.max_workers)
    workdir, out = Path(args.workdir).resolve(), Path(args.out)
    if out.suffix != ".json":
        raise CalibrationError(f"--out {out} must end in .json")
    if args.runs:
        from contracts.record import find_runs
        if not find_runs(args.runs):     # refuse now, not after the probes
            raise CalibrationError(f"--runs {args.runs} holds no run record (no */record.json)")
    if args.quiet_wait < 0 or args.repeat_noisy < 0:
        raise CalibrationError("--quiet-wait and --repeat-noisy must not be negative")
    workdir.mkdir(parents=True, exist_ok=True)
    clear_workdir(workdir)
    steps = probe_steps(plan, workdir, forwarded_plan_argv(args, plan))
    expected = estimate.expected_s(plan, [label for label, _ in steps], args.quick)
    say(estimate.summary(expected, planmod.host_cores(), args.quiet_wait, args.repeat_noisy))
    timings: dict[str, float] = {}
    t_start = time.monotonic()
    waits = [wait_quiet(args.quiet_wait, "before probing")]
    t_probes = time.monotonic()
    for i, (label, step_argv) in enumerate(steps + [("fit", None)], 1):
        say(estimate.stage_line(i, len(steps) + 1, label, expected,
                                time.monotonic() - t_probes))
        t0 = time.monotonic()
        if step_argv is None:
            result, found, repeats = fit_until_good(args, argv, plan, steps, workdir, waits)
        else:
            run_step(step_argv, plan.timeout_s)
        timings[label] = time.monotonic() - t0
    write_json(workdir / "quality.json", quality.to_json(found, {"waits": waits}, repeats,
                                                         forced=args.force))
    write_json(workdir / "timings.json", timings | {"total": time.monotonic() - t_start})
    if quality.failing(found) and not args.force:
        raise BelowBar(quality.refusal(found, args.workdir, args.out))
    fit.write_outputs(replace(result, profile=quality.marked(result.profile, found)), workdir,
                      out)
    timings["total"] = time.monotonic() - t_start
    write_json(workdir / "timings.json", timings)
    return timings


def wait_quiet(limit_s: float, when: str) -> dict:
    """Wait for other processes to leave the machine (``real.records.load``); say what it sees, how
    long it will wait, and what happened."""
    if limit_s <= 0:
        return {"when": when, "skipped": True}
    from real.records.load import QUIET_CORES, wait_for_quiet

    def busy(cores: float) -> None:
        say(f"{when}: other processes use {cores:.2f} cores (quiet: under {QUIET_CORES}); "
            f"waiting up to {limit_s:.0f} s for them to leave (--quiet-wait)")
    waited = wait_for_quiet(limit_s, said=busy)
    if not waited["quiet"]:
        say(f"warning: {when}: other processes still use {waited['busy_cores']} cores after "
            f"{waited['waited_s']:.0f} s; timings may be inflated")
    elif waited["waited_s"] > 5:
        say(f"{when}: quiet after {waited['waited_s']:.0f} s")
    return {"when": when, **waited}


def say(line: str) -> None:
    print(f"calibrate: {line}", file=sys.stderr, flush=True)


def fit_until_good(args, argv, plan, steps, workdir: Path, waits: list[dict]):
    """Fit; while fits are below the bar, measure their probes again (after a quiet wait)."""
    from calibrate.fits import fit
    command = ("python -m calibrate " + shlex.join(argv),)
    repeats: dict[str, int] = {}
    for attempt in range(args.repeat_noisy + 1):
        result = fit.build(workdir, args.runs, args.max_workers, command)
        found = quality.checks(result, planmod.host_cores())
        again = quality.probes_to_repeat(found)
        if not again or attempt == args.repeat_noisy:
            return result, found, repeats
        waits.append(wait_quiet(args.quiet_wait, f"before repeating {', '.join(again)}"))
        for label, step_argv in steps:
            if label.split()[0] in again:
                run_step(step_argv, plan.timeout_s)
                repeats[label] = repeats.get(label, 0) + 1
    return result, found, repeats


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return cli.command("python -m calibrate", parse_args, lambda args: run(args, argv), argv,
                       (CalibrationError, ProfileError, RecordError))


def run(args, argv: list[str]) -> int:
    try:
        timings = calibrate(args, argv)
    except (StepFailed, BelowBar) as e:
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
