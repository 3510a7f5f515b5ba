"""The whole loop with a hold-out: sweep, calibrate on small P only, predict, compare.

    python -m pipelines.validate --workers 1-5 --out validation/

1. ``real.sweep`` measures every scheme for every P (``OUT/runs``);
2. ``calibrate`` probes the machine and fits a profile from probes and runs
   with at most ``--calibrate-workers`` processes (``OUT/profile.json``; its
   provenance lists the runs and worker counts it saw);
3. ``simulator.compare`` predicts every measured point with that profile and
   reports the error on all points and on the held-out ones (every model from
   a workload file: ``--workloads``, else the profile's model as one;
   ``--cluster`` describes the hosts).

``OUT/report.md`` holds the tables and links the figures. Each stage is a
subprocess of the project's own command, so the report is reproducible stage
by stage; ``--skip-sweep`` / ``--skip-calibrate`` reuse what OUT already holds.

Calibration right after the sweep would measure the sweep's own load: before
``calibrate`` the command waits until the 1-minute load average falls below
``--quiet-load`` (default: a quarter of the cores), at most ``--quiet-wait``
seconds, and the report says how long it waited and what the load was. The
report also shows the calibration's quality (``OUT/calibration/quality.json``:
each fit against the bar of ``calibrate.fits.quality``) and how many disturbed runs
the comparison left out. A calibration below the bar stops the validation (its
runs stay in OUT: ``--skip-sweep`` later, on a quiet machine) unless ``--force``.

Imports: tqdm, cli, contracts.profile; the stages run as the project's commands
in subprocesses, so it imports neither ``real`` nor ``calibrate``.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import cli
from cli import Parser, choice_list, positive_int, print_out, usage_error

# python -m simulator.validate where that old path handed over (the program typed)
PROG = cli.program("python -m pipelines.validate")
MAIN_SCHEMES = ("serial", "psgd", "gather_scatter", "allreduce", "ddp", "mpi_allreduce", "ps_sync",
                "ps_async", "async_avg", "hogwild")


def build_parser() -> Parser:
    p = Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=cli.worker_counts_up_to(MAX_RANKS), default=[1, 2, 3, 4, 5],
                   metavar="P", help=f"{cli.WORKERS_HELP}; the sweep's (default: 1-5)")
    p.add_argument("--schemes", "--algorithm", dest="schemes", metavar="NAMES",
                   type=choice_list(MAIN_SCHEMES), default=["psgd"],
                   help=f"comma-separated, or all: {', '.join(MAIN_SCHEMES)}")
    p.add_argument("--calibrate-workers", type=cli.int_in(1, MAX_RANKS), default=2,
                   help="calibration sees only probes and runs with at most this many processes")
    p.add_argument("--repeats", type=cli.int_in(1, 1000), default=3, help="runs per point")
    p.add_argument("--dataset", default="fashion-mnist", help="dataset of the sweep")
    p.add_argument("--model", default="cnn", help="model of the sweep and the calibration")
    p.add_argument("--epochs", type=positive_int, default=1, help="epochs per run")
    p.add_argument("--train-size", type=positive_int, default=None,
                   help="training samples per run (all by default)")
    p.add_argument("--quick", action="store_true", help="quick calibration (about a minute)")
    p.add_argument("--out", default="validation", type=cli.output_folder,
                   help="folder for runs, profile, comparison and report")
    p.add_argument("--skip-sweep", action="store_true", help="reuse OUT/runs")
    p.add_argument("--skip-calibrate", action="store_true", help="reuse OUT/profile.json")
    p.add_argument("--workloads", nargs="+", metavar="FILE_OR_DIR",
                   help="workload files for the compare stage (default: the profile's models, "
                        "as workload files)")
    p.add_argument("--cluster", type=cli.input_file, help="cluster TOML for the compare stage (default: each "
                                     "record's own environment)")
    p.add_argument("--quiet-load", type=float, default=None,
                   help="before calibrating, wait for the 1-minute load average to fall below "
                        "this (default: cores / 4)")
    p.add_argument("--quiet-wait", type=float, default=300.0,
                   help="seconds to wait for it at most")
    p.add_argument("--force", action="store_true",
                   help="go on with a calibration below the quality bar (calibrate --force)")
    return p


def skipped_stages(args) -> set[str]:
    return {name for name, skip in (("sweep", args.skip_sweep),
                                    ("calibrate", args.skip_calibrate)) if skip}


def stage_commands(args, out: Path) -> list[tuple[str, list[str]]]:
    """Every stage's command, whether it runs this time or not."""
    py = [sys.executable, "-m"]
    workers = cli.workers_flag(args.workers)
    sweep = py + ["real.sweep", "--schemes", ",".join(args.schemes), "--workers", workers,
                  "--repeats", str(args.repeats), "--dataset", args.dataset, "--model", args.model,
                  "--epochs", str(args.epochs), "--out", str(out / "runs")]
    if args.train_size:
        sweep += ["--train-size", str(args.train_size)]
    calibrate = calibrate_command(args, out)
    compare = py + ["simulator.compare", str(out / "runs"), "--profile", str(out / "profile.json"),
                    "--out", str(out)]
    if getattr(args, "workloads", None):
        compare += ["--workloads", *args.workloads]
    if getattr(args, "cluster", None):
        compare += ["--cluster", args.cluster]
    return [("sweep", sweep), ("calibrate", calibrate), ("compare", compare)]


MAX_RANKS = 4 * (os.cpu_count() or 1)       # as real.sweep: 4 ranks per core at most


def calibrate_command(args, out: Path, runs: bool = True,
                      threads: int | None = None) -> list[str]:
    """``calibrate`` on the probes and OUT/runs with at most ``--calibrate-workers``
    processes, into OUT/profile.json (``--quick``, ``--force`` passed on). ``runs=False``:
    the probes only; ``threads``: fit that torch thread count only."""
    return [sys.executable, "-m", "calibrate", "--out", str(out / "profile.json"),
            "--workdir", str(out / "calibration"),
            *(["--runs", str(out / "runs")] if runs else []),
            *(["--threads", str(threads)] if threads else []),
            "--models", args.model, "--max-workers", str(args.calibrate_workers)] \
        + (["--quick"] if args.quick else []) + (["--force"] if args.force else [])


def preflight(args, out: Path) -> str | None:
    """Why a stage would refuse its arguments, asked before anything runs: the sweep checks
    its flags (model, dataset, sizes) with ``--dry-run``; a reused profile must load."""
    if not args.skip_sweep:
        cmd = dict(stage_commands(args, out))["sweep"] + ["--dry-run"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            line = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            return line.split(": error: ", 1)[-1].replace("python -m real.sweep", PROG)
    elif not (out / "runs").is_dir():
        return f"--skip-sweep: {out / 'runs'} does not exist (run without --skip-sweep first)"
    if args.skip_calibrate:
        from contracts import profile as profiles
        try:
            profiles.load(out / "profile.json")
        except profiles.ProfileError as e:
            return f"--skip-calibrate: {e}"
    return None


def run_stage(name: str, cmd: list[str], out: Path) -> tuple[int, str]:
    return cli.run_stage(cmd, out / f"{name}.log")


def reused_commands(args, out: Path) -> list[str]:
    """The commands that made what a ``--skip-*`` stage reuses: the first line of its log
    in OUT when there is one (how it really ran), else the command this run would use."""
    lines = []
    for name, cmd in stage_commands(args, out):
        if name not in skipped_stages(args):
            continue
        log = out / f"{name}.log"
        first = log.read_text().split("\n", 1)[0] if log.is_file() else ""
        lines.append(first[2:] if first.startswith("$ ") else " ".join(cmd) + "   (log missing)")
    return lines


def wait_for_low_load(threshold: float, limit_s: float, poll_s: float = 5.0) -> str:
    """Wait until the 1-minute load average is below ``threshold`` (at most ``limit_s``);
    a sentence for the report on what happened."""
    import os
    start, t0 = os.getloadavg()[0], time.monotonic()
    load = start
    while load >= threshold and time.monotonic() - t0 < limit_s:
        time.sleep(min(poll_s, max(0.0, limit_s - (time.monotonic() - t0))))
        load = os.getloadavg()[0]
    waited = time.monotonic() - t0
    if load < threshold:
        return (f"Before calibrating, waited {waited:.0f} s for the 1-minute load average to fall "
                f"from {start:.2f} to {load:.2f} (below {threshold:.2f}).")
    return (f"Before calibrating, waited {waited:.0f} s (the limit) but the 1-minute load average "
            f"stayed at {load:.2f} (from {start:.2f}; bar {threshold:.2f}): the calibration ran on "
            "a busy machine; see its quality below.")


def quality_section(out: Path) -> list[str]:
    """The calibration's fits against the quality bar, from OUT/calibration/quality.json."""
    import json
    path = out / "calibration" / "quality.json"
    if not path.is_file():
        return ["Calibration quality: not recorded (a calibration made before quality.json)."]
    q = json.loads(path.read_text())
    waits = [w for w in q.get("quiet_wait", {}).get("waits", []) if not w.get("skipped")]
    lines = [f"Calibration quality (bar: {q['bar_text']}): "
             + ("every fit passes." if q["passed"] else
                "**some fits are below the bar**" + (" (written with --force)." if q.get("forced")
                                                      else "."))]
    for w in waits:
        lines.append(f"- {w['when']}: waited {w['waited_s']:.0f} s; other processes then used "
                     f"{w['busy_cores']} cores ({'quiet' if w['quiet'] else 'still busy'}).")
    for label, n in q.get("probe_repeats", {}).items():
        lines.append(f"- {label}: measured again {n} time(s) (its fits were below the bar).")
    table = ["| fit | quality | against the bar |", "|---|---|---|"] + [
        f"| {c['fit']} | {c['figures']} | "
        f"{ {True: 'ok', False: '**below**', None: 'reported'}[c['ok']] } |" for c in q["checks"]]
    return lines + [""] + table


def write_report(out: Path, commands: list[tuple[str, list[str]]], compare_log: str,
                 reused: list[str] = (), load_note: str = "") -> Path:
    from contracts import profile as profiles
    prof = profiles.load(out / "profile.json")
    figures = sorted(p.name for p in out.glob("compare-*.png"))
    table = compare_log.split("wrote ")[0].strip()
    text = "\n".join([
        "# Predicted vs measured (hold-out validation)", "",
        f"Profile `profile.json` made {prof.provenance.created_utc} on {prof.provenance.host} "
        f"({prof.cores} cores); calibration saw worker counts "
        f"{sorted(prof.provenance.workers_seen)} and {len(prof.provenance.runs_seen)} run records. "
        "Rows marked *held out* are worker counts it did not see.", "",
        "Commands:", "", "```", *(f"{c}   # reused, not run again" for c in reused),
        *(" ".join(c) for _, c in commands), "```", "",
        "Time per epoch, measured (mean ± 95% CI over repeats) and predicted; then the median "
        "and worst relative error per scheme:", "", "```", table, "```", "",
        *([load_note, ""] if load_note else []), *quality_section(out), "",
        *(f"![{f}]({f})" for f in figures), ""])
    path = out / "report.md"
    tmp = out / ".report.md.tmp"
    tmp.write_text(text)
    tmp.replace(path)
    return path


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


def run(args) -> int:
    out = Path(args.out)
    problem = preflight(args, out)
    if problem:
        return usage_error(PROG, problem)
    out.mkdir(parents=True, exist_ok=True)
    commands = [(n, c) for n, c in stage_commands(args, out) if n not in skipped_stages(args)]
    from tqdm import tqdm
    compare_log, load_note = "", ""
    for name, cmd in tqdm(commands, desc="validate", unit="stage", disable=None):
        if name == "calibrate" and "sweep" not in skipped_stages(args):
            load_note = wait_for_low_load(args.quiet_load or (os.cpu_count() or 1) / 4,
                                          args.quiet_wait)
            print(f"{PROG}: {load_note}", file=sys.stderr)
        t0 = time.monotonic()
        code, log = run_stage(name, cmd, out)
        if code != 2:
            print(f"{name}: exit {code} in {time.monotonic() - t0:.0f} s (log {out / name}.log)",
                  file=sys.stderr)
        if name == "compare":
            compare_log = log.split("\n", 1)[1]
        # A sweep with some failed points still gives a comparison of the others.
        if code != 0 and (name != "sweep" or code == 2):
            if name == "calibrate" and code == 1 and "below the bar" in log:
                print(f"{PROG}: the calibration is below the quality bar (see {out / name}.log); "
                      f"the runs are kept: run again with --skip-sweep on a quiet machine, or "
                      f"with --force", file=sys.stderr)
                return code
            said = cli.last_line(log)
            if code == 2:
                return usage_error(PROG, f"stage {name}: {said}")
            print(f"{PROG}: stage {name} failed (exit {code}): {said} (log {out / name}.log)",
                  file=sys.stderr)
            return 1
    if compare_log:
        report = write_report(out, commands, compare_log, reused_commands(args, out), load_note)
        print_out(compare_log.split("wrote ")[0].strip())       # the report is written first
        print(f"\nreport: {report}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
