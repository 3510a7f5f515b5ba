"""The whole loop with a hold-out: sweep, calibrate on small P only, predict, compare.

    python -m simulator.validate --workers 1-5 --out validation/

1. ``real.sweep`` measures every scheme for every P (``OUT/runs``);
2. ``calibrate`` probes the machine and fits a profile from probes and runs
   with at most ``--calibrate-workers`` processes (``OUT/profile.json``; its
   provenance lists the runs and worker counts it saw);
3. ``simulator.compare`` predicts every measured point with that profile and
   reports the error on all points and on the held-out ones.

``OUT/report.md`` holds the tables and links the figures. Each stage is a
subprocess of the project's own command, so the report is reproducible stage
by stage; ``--skip-sweep`` / ``--skip-calibrate`` reuse what OUT already holds.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from real.cli import Parser, choice_list, positive_int, usage_error, worker_range

PROG = "python -m simulator.validate"
MAIN_SCHEMES = ("serial", "psgd", "gather_scatter", "allreduce", "ddp", "mpi_allreduce", "ps_sync",
                "ps_async", "async_avg", "hogwild")


def build_parser() -> Parser:
    p = Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=worker_range, default=[1, 2, 3, 4, 5])
    p.add_argument("--schemes", type=choice_list(MAIN_SCHEMES), default=["psgd"],
                   help=f"comma-separated, or all: {', '.join(MAIN_SCHEMES)}")
    p.add_argument("--calibrate-workers", type=positive_int, default=2,
                   help="calibration sees only probes and runs with at most this many processes")
    p.add_argument("--repeats", type=positive_int, default=3)
    p.add_argument("--dataset", default="fashion-mnist")
    p.add_argument("--model", default="cnn")
    p.add_argument("--epochs", type=positive_int, default=1)
    p.add_argument("--train-size", type=positive_int, default=None)
    p.add_argument("--quick", action="store_true", help="quick calibration (about a minute)")
    p.add_argument("--out", default="validation")
    p.add_argument("--skip-sweep", action="store_true", help="reuse OUT/runs")
    p.add_argument("--skip-calibrate", action="store_true", help="reuse OUT/profile.json")
    return p


def skipped_stages(args) -> set[str]:
    return {name for name, skip in (("sweep", args.skip_sweep),
                                    ("calibrate", args.skip_calibrate)) if skip}


def stage_commands(args, out: Path) -> list[tuple[str, list[str]]]:
    """Every stage's command, whether it runs this time or not."""
    py = [sys.executable, "-m"]
    workers = ",".join(map(str, args.workers))
    sweep = py + ["real.sweep", "--algorithm", ",".join(args.schemes), "--workers", workers,
                  "--repeats", str(args.repeats), "--dataset", args.dataset, "--model", args.model,
                  "--epochs", str(args.epochs), "--out", str(out / "runs")]
    if args.train_size:
        sweep += ["--train-size", str(args.train_size)]
    calibrate = py + ["calibrate", "--out", str(out / "profile.json"), "--workdir",
                      str(out / "calibration"), "--runs", str(out / "runs"), "--models", args.model,
                      "--max-workers", str(args.calibrate_workers)] + (["--quick"] if args.quick else [])
    compare = py + ["simulator.compare", str(out / "runs"), "--profile", str(out / "profile.json"),
                    "--out", str(out)]
    return [("sweep", sweep), ("calibrate", calibrate), ("compare", compare)]


def run_stage(name: str, cmd: list[str], out: Path) -> tuple[int, str]:
    log = out / f"{name}.log"
    with open(log, "w") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        code = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT)
    return code, log.read_text()


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


def write_report(out: Path, commands: list[tuple[str, list[str]]], compare_log: str,
                 reused: list[str] = ()) -> Path:
    from . import profile as profiles
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
        *(f"![{f}]({f})" for f in figures), ""])
    path = out / "report.md"
    tmp = out / ".report.md.tmp"
    tmp.write_text(text)
    tmp.replace(path)
    return path


def main(argv=None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    commands = [(n, c) for n, c in stage_commands(args, out) if n not in skipped_stages(args)]
    from tqdm import tqdm
    compare_log = ""
    for name, cmd in tqdm(commands, desc="validate", unit="stage", disable=None):
        t0 = time.monotonic()
        code, log = run_stage(name, cmd, out)
        print(f"{name}: exit {code} in {time.monotonic() - t0:.0f} s (log {out / name}.log)",
              file=sys.stderr)
        if name == "compare":
            compare_log = log.split("\n", 1)[1]
        # A sweep with some failed points still gives a comparison of the others.
        if code != 0 and name != "sweep":
            return usage_error(PROG, f"stage {name} failed (exit {code}); see {out / name}.log") \
                if code == 2 else code
    if compare_log:
        print(compare_log.split("wrote ")[0].strip())
        report = write_report(out, commands, compare_log, reused_commands(args, out))
        print(f"\nreport: {report}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
