"""Time to accuracy, predicted against measured: every scheme, P, seed; tables and figures.

    python -m pipelines.validate_accuracy --workers 1-5 --seeds 1-3 --epochs 3 \\
        --target-accuracy 0.80 --eval-every 40 --out validation-accuracy/

1. measured: ``real.sweep`` once per seed (``OUT/runs/seed-S``), every run
   recording test accuracy against training time (``--eval-every``);
2. calibrated: ``calibrate`` probes the machine and fits a profile from the
   probes and the runs with at most ``--calibrate-workers`` processes
   (``OUT/profile.json``), after waiting for the sweep's load to fade, as
   ``pipelines.validate`` does: the machine's speed drifts from one day to the
   next (7.0 ms against 5.9 ms an iteration of the serial cnn on two days on
   the project's VM), so a profile from another day would put that drift into
   the time to target. ``--profile`` uses a given profile instead;
3. predicted: ``pipelines.replay`` for the same schemes, P and seeds
   (``OUT/predicted``): each run simulated with its schedule and replayed on
   the real model and data;
4. compared: per scheme and P, the final test accuracy (mean over seeds,
   absolute error in accuracy points) and the training time to the target
   (mean over seeds, relative error); a point whose target some seed does not
   reach is reported as such, never as a time. The summary is given for every
   point and for the held-out ones (P above ``--calibrate-workers``);
5. the measured order: every ps_async run that recorded the order its server
   applied the pushes in is replayed along that order as well
   (``simulator.measured_schedule``, ``OUT/measured-order``). Where that replay
   gives the run's accuracy and the prediction does not, the miss is the
   predicted order's (the time model's), not the replay's.

``--cluster-rate 200mbit`` (as root) runs the real points on the emulated
cluster instead: ``real.cluster up`` with max P + 1 hosts at that rate,
``calibrate.link`` there (``OUT/link.toml``), every sweep with ``--cluster`` (one
rank and one thread per host), the cluster torn down however the block ends;
the compute profile comes from the plain machine's probes at one thread, and the
replay predicts on the calibrated link (``--cluster OUT/link.toml``).

Writes ``OUT/accuracy_validation.csv``, ``OUT/report.md`` and the figures
``time-to-target.png`` (time to the target against P, one line per scheme,
predicted and measured), ``final-accuracy.png`` and ``accuracy-time.png``
(curves, predicted solid and measured dashed). Each stage is a subprocess of
the project's own command, logged in ``OUT/<stage>.log``;
``--skip-sweep`` / ``--skip-calibrate`` / ``--skip-replay`` reuse what OUT holds.

Imports: numpy, pandas, pipelines.accuracy (the replay of a measured order),
cli, contracts.curve, contracts.checks,
contracts.files, contracts.schedule, real.records.accuracy_report (the completed runs),
simulator.measured_schedule, simulator.model.schemes, report.accuracy,
simulator.pool_accuracy (the goals), pipelines.validate (the calibration stage, the wait
for a quiet machine), pipelines.validate_cluster (the emulated cluster's rate and lifetime).
"""
from __future__ import annotations

import json
import os
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np

import cli
from contracts import curve as curves
from contracts import schedule as schedules
from contracts.checks import ConfigError
from cli import (
    Parser,
    accuracy,
    choice_list,
    number_list,
    positive_int,
    usage_error,
    worker_counts,
)
from contracts.files import atomic_write_text
from simulator.measured_schedule import SCHEME as ORDERED_SCHEME
from simulator.measured_schedule import MeasuredError
from simulator.measured_schedule import measured as measured_schedule
from simulator.model.schemes import SCHEMES
from pipelines.accuracy import ReplaySettings, run_replay
from pipelines.validate import calibrate_command, wait_for_low_load
from real.records.accuracy_report import completed_runs
from simulator.pool_accuracy import GOAL_POINTS, GOAL_RELATIVE
from pipelines.validate_cluster import cluster_tools_missing, cluster_up, tc_rate

# python -m simulator.validate_accuracy where that old path handed over (the program typed)
PROG = cli.program("python -m pipelines.validate_accuracy")


def build_parser() -> Parser:
    p = Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--schemes", "--algorithm", dest="schemes", metavar="NAMES",
                   type=choice_list(tuple(SCHEMES)), default=list(SCHEMES),
                   help=f"comma-separated, or all: {', '.join(SCHEMES)} (default: all)")
    p.add_argument("--workers", type=worker_counts, default=[1, 2, 3, 4, 5], metavar="P",
                   help=f"{cli.WORKERS_HELP} (default: 1-5)")
    p.add_argument("--seeds", type=number_list, default=[1, 2, 3], metavar="S",
                   help="seeds, a list 1,2,3 or a range 1-3; one real run and one replay "
                        "per scheme, P and seed (default: 1-3)")
    p.add_argument("--epochs", type=positive_int, default=3,
                   help="epochs every run and replay trains (default: 3)")
    p.add_argument("--target-accuracy", type=accuracy, default=0.80, metavar="ACC",
                   help="test accuracy whose time is compared, between 0 and 1 (default: 0.80)")
    p.add_argument("--eval-every", type=positive_int, default=40,
                   help="evaluation points every N iterations at P = 1 (N/P at P workers)")
    p.add_argument("--model", default="cnn", help="built-in model (default: cnn, the seed "
                   "sheets' network)")
    p.add_argument("--dataset", default="fashion-mnist",
                   help="as real.train's --dataset (default: fashion-mnist)")
    p.add_argument("--train-size", type=positive_int, default=None,
                   help="training samples per epoch (default: the whole training set)")
    p.add_argument("--test-size", type=positive_int, default=None,
                   help="test samples of each evaluation (default: the whole test set)")
    p.add_argument("--profile", default=None, type=cli.input_file,
                   help="profile JSON to predict with (default: calibrate one after the sweep)")
    p.add_argument("--calibrate-workers", type=cli.int_in(1, 64), default=2,
                   help="calibration sees only probes and runs with at most this many processes")
    p.add_argument("--quick", action="store_true", help="quick calibration (about a minute)")
    p.add_argument("--force", action="store_true",
                   help="keep a calibration whose fits are below calibrate's quality bar")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per real run")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="torch threads per worker in the real runs and the simulation "
                        "(default: cores // ranks per host, as real.train)")
    p.add_argument("--replay-threads", type=positive_int, default=1,
                   help="torch threads of each replay (the real runs use real.train's default)")
    p.add_argument("--out", default="validation-accuracy", type=cli.output_folder,
                   help="folder for the runs, the replays and the comparison")
    p.add_argument("--cluster-rate", default=None, type=tc_rate, metavar="RATE",
                   help="run the real points on the emulated cluster, its links shaped to RATE "
                        "(tc units: 200mbit): max P + 1 hosts, one rank and one thread each, "
                        "the link calibrated there (OUT/link.toml) and predicted on it; "
                        "needs root")
    p.add_argument("--skip-sweep", action="store_true",
                   help="reuse OUT/runs (and OUT/link.toml)")
    p.add_argument("--skip-calibrate", action="store_true", help="reuse OUT/profile.json")
    p.add_argument("--skip-replay", action="store_true", help="reuse OUT/predicted")
    return p


def stage_commands(args, out: Path) -> list[tuple[str, list[str]]]:
    py = [sys.executable, "-m"]
    # no --target-accuracy for the runs: they would stop there, and the final accuracy
    # after --epochs is half of the comparison (the time to the target comes from the curve)
    common = ["--model", args.model, "--dataset", args.dataset, "--eval-every",
              str(args.eval_every)]
    sizes = [arg for k, v in (("train-size", args.train_size), ("test-size", args.test_size))
             if v for arg in (f"--{k}", str(v))]
    workers = cli.workers_flag(args.workers)
    emulated = args.cluster_rate is not None
    thread_count = args.threads or (1 if emulated else None)
    threads = ["--threads", str(thread_count)] if thread_count else []
    link = out / "link.toml"
    stages = [("link", py + ["calibrate.link", "--out", str(link),
                             "--workdir", str(out / "link")])] if emulated else []
    stages += [(f"sweep-seed-{s}", py + [
        "real.sweep", "--schemes", ",".join(args.schemes), "--workers", workers,
        "--epochs", str(args.epochs), "--timeout", str(args.timeout),
        *(["--cluster"] if emulated else []),
        "--out", str(out / "runs" / f"seed-{s}"), *common, *sizes, "--", "--seed", str(s),
        *threads])
        for s in args.seeds]
    profile = args.profile or str(out / "profile.json")
    if not args.profile:       # emulated: the plain machine's probes, not the cluster's runs
        stages.append(("calibrate", calibrate_command(args, out, runs=not emulated,
                                                      threads=1 if emulated else None)))
    stages.append(("replay", py + [
        "pipelines.replay", "--schemes", ",".join(args.schemes), "--workers", workers,
        "--seeds", ",".join(map(str, args.seeds)), "--epochs", str(args.epochs),
        "--out", str(out / "predicted"), "--replay-threads", str(args.replay_threads),
        "--target-accuracy", repr(args.target_accuracy), *common, *sizes, *threads,
        *(["--cluster", str(link)] if emulated else ["--hosts", "1"]), "--profile", profile]))
    return stages


def on_cluster(name: str) -> bool:
    """Whether a stage runs on the emulated cluster (while it is up)."""
    return name == "link" or name.startswith("sweep")


def measured_rows(runs: list[tuple[Path, dict]]) -> list[dict]:
    """One row per run: scheme, workers, seed, points."""
    return [{"scheme": rec["config"]["algorithm"], "workers": rec["environment"]["workers"],
             "seed": rec["config"].get("seed"), "points": rec["results"]["curve"]}
            for _d, rec in runs]


def measured_order_rows(runs: list[tuple[Path, dict]], out: Path, args) -> list[dict]:
    """ps_async runs that recorded their push order, replayed along it (one row per run, as
    the predicted rows: scheme, workers, seed, points); each next to the simulator's
    schedule of the same point, whose header it takes (``simulator.measured_schedule``)."""
    rows = []
    for d, rec in runs:
        cfg = rec["config"]
        if cfg["algorithm"] != ORDERED_SCHEME or "push_order" not in rec.get("extra", {}):
            continue
        p, seed = rec["environment"]["workers"], cfg["seed"]
        name = f"{ORDERED_SCHEME}-P{p}-s{seed}"
        like = out / "predicted" / "schedules" / f"{name}.jsonl"
        if not like.is_file():
            continue
        sched_like = schedules.read(like)
        sched = measured_schedule(rec, sched_like, str(d))
        path = schedules.write(out / "measured-order" / "schedules" / f"{name}.jsonl", sched)
        print(f"{PROG}: replaying {name} along its measured push order", file=sys.stderr)
        # the run's own torch threads: the same sums in the same order, so the replay
        # repeats the run's floats (with other threads it drifts, by up to 1.5 points of
        # accuracy at P = 8)
        threads = rec["environment"].get("threads_per_rank") or args.replay_threads
        settings = ReplaySettings(seed=seed, lr=cfg["lr"], momentum=cfg["momentum"],
                                  lr_decay=cfg["lr_decay"], test_size=args.test_size,
                                  threads=threads)
        replayed = run_replay(path, out / "measured-order" / "replays" / name, sched, settings)
        rows.append({"scheme": ORDERED_SCHEME, "workers": p, "seed": seed,
                     "points": replayed["points"],
                     "run_accuracy": rec["results"]["curve"][-1]["test_accuracy"],
                     "staleness_run": staleness([a - r for a, r in
                                                 enumerate(rec["extra"]["push_order"]["read"])], p),
                     "staleness_predicted": staleness([e["applied"] - e["read"] for e in
                                                       sched_like.updates()], p)})
    return rows


def staleness(values: list[int], workers: int) -> tuple[float, float, float]:
    """Mean, standard deviation and share at P - 1 of an order's staleness."""
    return (float(np.mean(values)), float(np.std(values)),
            sum(v == workers - 1 for v in values) / len(values))


def per_point(rows: list[dict], target: float) -> dict[tuple, dict]:
    """(scheme, P) -> final accuracy, time to target and training time, mean over seeds."""
    groups: dict[tuple, list] = {}
    for r in rows:
        groups.setdefault((r["scheme"], r["workers"]), []).append(r["points"])
    out = {}
    for key, pts in groups.items():
        times = [curves.time_to_target(p, target) for p in pts]
        out[key] = {"seeds": len(pts),
                    "final_accuracy": float(np.mean([p[-1]["test_accuracy"] for p in pts])),
                    "time_to_target_s": None if None in times else float(np.mean(times)),
                    "training_s": float(np.mean([p[-1]["train_s"] for p in pts])),
                    "reached": sum(t is not None for t in times)}
    return out


def compare(measured: list[dict], predicted: list[dict], target: float,
            ordered: list[dict] = ()) -> list[dict]:
    """Per (scheme, P) measured beside predicted; with ``ordered`` (the replays of measured
    push orders), their mean final accuracy too, over the seeds that have one."""
    meas, pred = per_point(measured, target), per_point(predicted, target)
    order = per_point(list(ordered), target)
    rows = []
    for key in sorted(set(meas) & set(pred), key=lambda k: (list(SCHEMES).index(k[0]), k[1])):
        m, p = meas[key], pred[key]
        acc_err = 100 * (p["final_accuracy"] - m["final_accuracy"])
        tm, tp = m["time_to_target_s"], p["time_to_target_s"]
        rel = (tp - tm) / tm if tm and tp is not None else None
        rows.append({"scheme": key[0], "workers": key[1], "seeds_measured": m["seeds"],
                     "seeds_predicted": p["seeds"],
                     "final_accuracy_measured": m["final_accuracy"],
                     "final_accuracy_predicted": p["final_accuracy"],
                     "final_accuracy_error_points": acc_err,
                     "time_to_target_measured_s": tm, "time_to_target_predicted_s": tp,
                     "time_to_target_error": rel,
                     "target_reached_measured": m["reached"],
                     "target_reached_predicted": p["reached"],
                     "training_measured_s": m["training_s"],
                     "training_predicted_s": p["training_s"],
                     "training_error": (p["training_s"] - m["training_s"]) / m["training_s"]
                     if m["training_s"] else None,
                     "final_accuracy_measured_order": order[key]["final_accuracy"]
                     if key in order else None,
                     "seeds_measured_order": order[key]["seeds"] if key in order else 0})
    return rows


def order_lines(rows: list[dict]) -> list[str]:
    """The replays of the measured push orders beside the run and the prediction."""
    have = [r for r in rows if r.get("final_accuracy_measured_order") is not None]
    if not have:
        return []
    lines = ["", f"{ORDERED_SCHEME} replayed along the measured push order (the run's own "
                 "order; predicted: the simulator's):",
             f"{'scheme':<15}{'P':>3}{'acc meas':>10}{'acc order':>11}{'err pt':>8}"
             f"{'acc pred':>10}{'err pt':>8}{'seeds':>7}"]
    for r in have:
        m, o = r["final_accuracy_measured"], r["final_accuracy_measured_order"]
        lines.append(f"{r['scheme']:<15}{r['workers']:>3}{m:>10.4f}{o:>11.4f}"
                     f"{100 * (o - m):>+8.2f}{r['final_accuracy_predicted']:>10.4f}"
                     f"{r['final_accuracy_error_points']:>+8.2f}"
                     f"{r['seeds_measured_order']:>4}/{r['seeds_measured']}")
    return lines


def summary_lines(rows: list[dict], target: float, label: str) -> list[str]:
    """The error summary of ``rows``: final accuracy in points, time to target relative."""
    lines = []
    errs = [abs(r["final_accuracy_error_points"]) for r in rows]
    rels = [abs(r["time_to_target_error"]) for r in rows if r["time_to_target_error"] is not None]
    signed = [r["time_to_target_error"] for r in rows if r["time_to_target_error"] is not None]
    if errs:
        lines.append(f"{label}final accuracy: mean |error| {np.mean(errs):.2f} points, worst "
                     f"{max(errs):.2f}; within {GOAL_POINTS:g} point: "
                     f"{sum(e <= GOAL_POINTS for e in errs)} of {len(errs)}")
    if rels:
        lines.append(f"{label}time to {target:g}: median |error| {100 * np.median(rels):.1f}%, "
                     f"mean signed {100 * np.mean(signed):+.1f}%, worst {100 * max(rels):.1f}%; "
                     f"within {100 * GOAL_RELATIVE:g}%: {sum(e <= GOAL_RELATIVE for e in rels)} "
                     f"of {len(rels)} (points reached on both sides)")
    return lines


def order_run_lines(ordered: list[dict], predicted: list[dict]) -> list[str]:
    """Per run: its accuracy, the replay of its order, the prediction of the same seed, and
    the staleness (mean, sd, share at P - 1) of the run's order and of the predicted one."""
    if not ordered:
        return []
    pred = {(r["scheme"], r["workers"], r["seed"]): r["points"][-1]["test_accuracy"]
            for r in predicted}
    lines = ["", "per run (staleness: mean, standard deviation, share at P - 1):",
             f"{'P':>12}{'seed':>6}{'acc run':>9}{'acc order':>11}{'acc pred':>10}"
                 f"{'staleness run':>22}{'predicted':>20}"]
    for r in sorted(ordered, key=lambda r: (r["workers"], r["seed"])):
        acc = pred.get((r["scheme"], r["workers"], r["seed"]))
        run, sim = (" ".join(f"{v:.2f}" for v in r[k])
                    for k in ("staleness_run", "staleness_predicted"))
        lines.append(f"{r['workers']:>12}{r['seed']:>6}{r['run_accuracy']:>9.4f}"
                     f"{r['points'][-1]['test_accuracy']:>11.4f}"
                     f"{acc if acc is not None else float('nan'):>10.4f}{run:>22}{sim:>20}")
    return lines


def format_table(rows: list[dict], target: float, epochs: int, held_out_above: int = 0,
                 ordered: list[dict] = (), predicted_rows: list[dict] = ()) -> str:
    lines = [(f"{'scheme':<15}{'P':>3}{'acc meas':>10}{'acc pred':>10}{'err pt':>8}"
              f"{f'to {target:g} meas':>25}{f'to {target:g} pred':>25}{'err':>8}")]
    for r in rows:
        def t(v, reached, n):
            return curves.describe_time(v, epochs) + ("" if v is not None or not reached
                                                      else f" ({reached}/{n})")
        err = (f"{100 * r['time_to_target_error']:+.1f}%"
               if r["time_to_target_error"] is not None else "-")
        measured = t(r["time_to_target_measured_s"], r["target_reached_measured"],
                     r["seeds_measured"])
        predicted = t(r["time_to_target_predicted_s"], r["target_reached_predicted"],
                      r["seeds_predicted"])
        lines.append(f"{r['scheme']:<15}{r['workers']:>3}{r['final_accuracy_measured']:>10.4f}"
                     f"{r['final_accuracy_predicted']:>10.4f}"
                     f"{r['final_accuracy_error_points']:>+8.2f}"
                     f"{measured:>25}{predicted:>25}"
                     f"{err:>8}")
    lines += summary_lines(rows, target, "")
    held = [r for r in rows if r["workers"] > held_out_above] if held_out_above else []
    if held:
        lines += summary_lines(held, target, f"held out (P > {held_out_above}), ")
    return "\n".join(lines + order_lines(rows) + order_run_lines(list(ordered), predicted_rows))


def report_commands(commands, skipped: set[str], out: Path) -> list[str]:
    """The stages' commands as a reader types them (``python -m``, the folder as OUT). A
    stage skipped this time (its results already in OUT) shows the command that made
    them, from the first line of its log, and is marked so."""
    def as_typed(tokens) -> str:
        home = str(out)
        return " ".join("python" if t == sys.executable else
                        "OUT" + t[len(home):] if t == home or t.startswith(home + os.sep) else t
                        for t in tokens)
    lines = []
    for name, cmd in commands:
        ran = _logged_command(out / f"{name}.log") if name in skipped else None
        text = as_typed(ran.split(" ") if ran else cmd)
        lines.append(f"{text}    # (not run this time: its results were in OUT)"
                     if name in skipped else text)
    return lines


def _logged_command(log: Path) -> str | None:
    """The command a stage's log starts with (``cli.run_stage`` writes it), or None."""
    try:
        with open(log, errors="replace") as f:
            first = f.readline().rstrip("\n")
    except OSError:
        return None
    return first[2:] if first.startswith("$ ") else None


def write_outputs(out: Path, rows, measured, predicted, args, commands,
                  skipped: set[str] = frozenset(), ordered: list[dict] = ()) -> str:
    import pandas as pd

    from report.accuracy import (
        accuracy_time_plot,
        final_accuracy_plot,
        time_to_target_plot,
    )
    atomic_write_text(out / "accuracy_validation.csv", pd.DataFrame(rows).to_csv(index=False))
    pred_s = [{"scheme": r["scheme"], "workers": r["workers"],
               "final_accuracy": r["final_accuracy_predicted"],
               "time_to_target_s": r["time_to_target_predicted_s"]} for r in rows]
    meas_s = [{"scheme": r["scheme"], "workers": r["workers"],
               "final_accuracy": r["final_accuracy_measured"],
               "time_to_target_s": r["time_to_target_measured_s"]} for r in rows]
    time_to_target_plot(pred_s, meas_s, args.target_accuracy, out / "time-to-target.png")
    final_accuracy_plot(pred_s, meas_s, out / "final-accuracy.png")
    accuracy_time_plot(predicted, out / "accuracy-time.png",
                       "Test accuracy against training time", measured=measured)
    table = format_table(rows, args.target_accuracy, args.epochs,
                         0 if args.profile else args.calibrate_workers, ordered, predicted)
    text = "\n".join([
        f"# Time to accuracy: predicted against measured ({args.model}, {args.dataset})", "",
        (f"{args.epochs} epochs, seeds {', '.join(map(str, args.seeds))}, target test accuracy "
         f"{args.target_accuracy:g}; measured by `real.sweep`, predicted by `pipelines.replay` "
         "(simulated schedule replayed on the real model). Errors: predicted minus measured."),
        *([f"Real runs on the emulated cluster, links shaped to {args.cluster_rate} (one rank "
           "and one torch thread per host, all hosts on this machine's cores); predicted on "
           "the link calibrated there (link.toml).", ""] if args.cluster_rate else []),
        "",
        "Commands:", "", "```", *report_commands(commands, skipped, out), "```", "",
        "```", table, "```", "",
        "![time to target](time-to-target.png)", "",
        "![final accuracy](final-accuracy.png)", "",
        "![accuracy against time](accuracy-time.png)", ""])
    atomic_write_text(out / "report.md", text)
    return table


def run_stages(stages: list[tuple[str, list[str]]], out: Path, args) -> int:
    """Each stage as a subprocess logged in OUT/<stage>.log; 0, or the exit code to return
    (2: a stage refused its flags). A failed real run still compares; any other stage stops."""
    for name, cmd in stages:
        if name == "calibrate" and not args.skip_sweep:     # the sweep's load fades first
            print(f"{PROG}: {wait_for_low_load((os.cpu_count() or 1) / 4, 300.0)}",
                  file=sys.stderr)
        t0 = time.monotonic()
        code, log = cli.run_stage(cmd, out / f"{name}.log")
        print(f"{name}: exit {code} in {time.monotonic() - t0:.0f} s (log {out / name}.log)",
              file=sys.stderr)
        if code == 2:
            return usage_error(PROG, f"stage {name}: {cli.last_line(log)}")
        if code != 0 and not name.startswith("sweep"):
            print(f"{PROG}: stage {name} failed (exit {code}): {cli.last_line(log)} "
                  f"(log {out / name}.log)", file=sys.stderr)
            return 1
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


def run(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    commands = stage_commands(args, out)
    skip = {n for n, _ in commands if (on_cluster(n) and args.skip_sweep)
            or (n == "calibrate" and args.skip_calibrate) or (n == "replay" and args.skip_replay)}
    todo = [(n, c) for n, c in commands if n not in skip]
    if args.cluster_rate and args.skip_sweep and not (out / "link.toml").is_file():
        return usage_error(PROG, f"--skip-sweep: {out / 'link.toml'} does not exist (run "
                                 "without --skip-sweep first)")
    emulated = [(n, c) for n, c in todo if on_cluster(n) and args.cluster_rate]
    missing = cluster_tools_missing() if emulated else None
    if missing:
        return usage_error(PROG, f"--cluster-rate: {missing}")
    try:
        with (cluster_up(max(args.workers) + 1, args.cluster_rate, out / "cluster-up.log", PROG)
              if emulated else nullcontext()):
            code = run_stages([(n, c) for n, c in todo if on_cluster(n)], out, args)
        if code == 0:
            code = run_stages([(n, c) for n, c in todo if not on_cluster(n)], out, args)
    except RuntimeError as e:                          # the cluster did not come up
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    if code:
        return code
    runs = completed_runs(out / "runs")
    measured = measured_rows(runs)
    try:
        predicted = json.loads((out / "predicted" / "curves.json").read_text())
    except (OSError, json.JSONDecodeError):
        return usage_error(PROG, f"no predicted curves in {out / 'predicted'}; run without "
                                 "--skip-replay")
    try:
        ordered = measured_order_rows(runs, out, args)
    except (schedules.ScheduleError, MeasuredError, ConfigError) as e:
        return usage_error(PROG, f"measured push order: {e}")
    rows = compare(measured, predicted, args.target_accuracy, ordered)
    if not rows:
        return usage_error(PROG, f"no (scheme, P) both measured in {out / 'runs'} and predicted")
    print(write_outputs(out, rows, measured, predicted, args, commands, skip, ordered))
    print(f"\nreport: {out / 'report.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
