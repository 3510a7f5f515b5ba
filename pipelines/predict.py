"""``python -m pipelines.predict --target-accuracy 0.8``: ``simulator.predict``'s prediction,
then the training time to a test accuracy on each scheme and P.

The prediction is ``simulator.predict``'s, the same flags, files and outputs. With
``--target-accuracy`` it then replays every predicted schedule on the real model and data
(``pipelines.accuracy``: ``python -m real.replay`` in a subprocess, one training run per
point unless an earlier one of the same updates serves it), says first how many training
runs that takes and about how long, and prints the time per epoch and the time to the
target per scheme and P; ``--dry-run`` lists the training runs and trains none.
``python -m simulator.predict --target-accuracy`` hands its command line over to this one
(the old path, kept for a release). Bad input: one line on stderr, exit code 2.

Imports: cli, contracts (profile, units), pipelines.accuracy, simulator (predict,
output.predictions).
"""
from __future__ import annotations

import sys
from pathlib import Path

import cli
from contracts import profile as profile_mod
from contracts.units import format_duration
from pipelines.accuracy import (REPLAY_START_S, ReplaySettings, eval_every_at, format_table,
                                replay_plan, replay_point, summarize, with_target)
from simulator import predict
from simulator.output.predictions import baseline_of

PROG = "python -m pipelines.predict"


def main(argv: list[str] | None = None) -> int:
    prog = cli.program(PROG)                     # simulator.predict where it handed over
    return cli.command(prog, predict.build_parser(prog).parse_args, run, argv,
                       (profile_mod.ProfileError, ValueError))


def run(args) -> int:
    q, rows = predict.predict(args)
    if args.target_accuracy is not None:
        singles = [r["time_s"] for r in rows if r["workers"] == 1]
        print_time_to_accuracy(
            args, q.sweep, q.dataset,
            min(singles) if singles else baseline_of(rows, args.baseline)["time_s"]
            * args.baseline)
    if args.trace:
        predict.write_trace(args, q)
    return 0


def print_time_to_accuracy(args, job, dataset: str, single_run_s: float) -> None:
    """Replay every point of a prediction's sweep (``engine.sweep.Sweep``) on ``dataset``;
    print time per epoch and time to target.
    Says first how many training runs it makes and about how long they take (each about
    ``single_run_s``, a single worker's predicted run), then each as it starts; with
    ``args.dry_run`` lists them and trains none."""
    target = args.target_accuracy
    out = Path(args.out) / "accuracy"
    plan = replay_plan(job.points)
    runs = [(pt.scheme.name, pt.workers) for pt, trains in plan if trains]
    each_s = single_run_s + REPLAY_START_S
    print(f"predict: time to {target:g}: {len(runs)} training runs of the real model "
          f"({len(plan) - len(runs)} more points retime one of them), each about a single "
          f"worker's run and the start of torch ({format_duration(each_s)}): about "
          f"{format_duration(len(runs) * each_s)} on the profile's machine "
          f"(replays already in {out} are reused)", file=sys.stderr)
    if args.dry_run:
        print(f"\ntraining runs for time to {target:g} (--dry-run: none made):")
        for i, (name, p) in enumerate(runs, 1):
            print(f"  {i:3d}. {name} at P = {p}: about {format_duration(each_s)}")
        return
    done, rows, made = {}, [], 0
    for pt, trains in plan:
        if trains:
            made += 1
            print(f"predict: training run {made} of {len(runs)}: {pt.scheme.name} at "
                  f"P = {pt.workers} (about "
                  f"{format_duration((len(runs) - made + 1) * each_s)} left)",
                  file=sys.stderr, flush=True)
        row = replay_point(pt, job.workload, dataset, args.dataset_size, job.profile,
                           job.seed, eval_every_at(args.eval_every, pt.workers),
                           ReplaySettings(seed=1), out, done, job.heterogeneity)
        rows.append(with_target(row, target))
    print()
    epochs = job.workload.epochs
    print(format_table(summarize(rows, epochs), target, epochs,
                       f"time to {target:g} test accuracy (simulator + replay of the real model, "
                       f"training seed 1; schedules and replays in {out})"))


if __name__ == "__main__":
    sys.exit(main())
