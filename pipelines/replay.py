"""``python -m pipelines.replay``: predicted accuracy against predicted time, per scheme and P.

    python -m pipelines.replay --schemes psgd,async_avg,ps_async --workers 1-5 --epochs 3 \\
        --target-accuracy 0.80 --out replay/

For every scheme, P and seed it simulates the run with its update schedule,
replays the schedule on the real model and data in one process
(``python -m real.replay``, which needs torch and the dataset) and reads test
accuracy against simulated training time (``pipelines.accuracy``). Prints the
accuracy after 1, 3 and 10 epochs (those trained), the final accuracy and the
time to ``--target-accuracy`` ("not reached in E epochs" when the curve never
gets there); writes ``OUT/replay.csv`` (one row per seed), ``OUT/summary.csv``,
``OUT/curves.json`` and ``OUT/accuracy-time.png``.

The cluster is described, and the question resolved, as for ``simulator.predict``
(``simulator.question``; default: hosts like the profile's, growing with P; ``--hosts 1``:
the machine it was measured on, as the one-host validations replay). Bad input: one line on
stderr, exit code 2. It trains the real model, so it is a pipeline (issue 42); ``python -m
simulator.replay`` runs it, for a release.

Imports: pandas, tqdm, cli, contracts (files, profile), pipelines.accuracy, report.accuracy,
simulator (predict, question), simulator.engine.sweep, simulator.model.schemes.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import cli
from contracts import profile as profile_mod
from contracts.files import atomic_write_text
from pipelines import accuracy
from simulator import predict, question
from simulator.engine.placement import runnable
from simulator.engine.sweep import Sweep, check_request, counts_of, points_of
from simulator.model.schemes import SCHEMES
from simulator.describe import DATASETS

# python -m simulator.replay where that old path handed over (the program typed)
PROG = cli.program("python -m pipelines.replay")


def build_parser() -> cli.Parser:
    p = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--schemes", "--algorithm", dest="schemes", type=cli.choice_list(tuple(SCHEMES)),
                   default=list(SCHEMES), metavar="NAMES",
                   help=f"comma-separated, or all: {', '.join(SCHEMES)} (--algorithm: its old "
                        "name; default: all)")
    p.add_argument("--workers", type=cli.worker_counts, default=[1, 2, 3, 4, 5], metavar="P",
                   help=f"{cli.WORKERS_HELP} (default: 1-5)")
    p.add_argument("--seeds", type=cli.number_list, default=[1], metavar="S",
                   help="seeds, e.g. 1-3: each is the training seed (weights, data order) and "
                        "the simulation's")
    p.add_argument("--epochs", type=cli.positive_float, default=1.0,
                   help="epochs to train (E: the most a target may take)")
    p.add_argument("--target-accuracy", type=cli.accuracy, default=None,
                   help="report the predicted training time to this test accuracy")
    p.add_argument("--eval-every", type=cli.nonnegative_int, default=0,
                   help="evaluation points every N iterations at P = 1 (N/P at P workers: the "
                        "same samples between points), besides every epoch end")
    w = p.add_argument_group("workload and training (as real.train's flags)")
    w.add_argument("--profile", type=cli.input_file, help="profile JSON (default: the one shipped)")
    w.add_argument("--model", default="cnn")
    w.add_argument("--dataset", default="fashion-mnist", choices=sorted(DATASETS) + ["synthetic"])
    w.add_argument("--train-size", type=cli.positive_int, default=None,
                   help="train on this many samples (a seeded subset, as real.train)")
    w.add_argument("--test-size", type=cli.positive_int, default=None)
    w.add_argument("--data-dir", default=None, type=cli.input_folder,
                   help="folder holding the dataset files")
    w.add_argument("--batch-size", type=cli.positive_int, default=64, help="per worker")
    cli.add_sgd_flags(w)
    predict.add_average_every(w)
    w.add_argument("--exchange-every", type=cli.nonnegative_int, default=None, metavar="K",
                   help="async_avg alone: exchange every K steps (default: --average-every)")
    w.add_argument("--threads", type=cli.positive_int, default=None,
                   help="threads per simulated worker (default: cores // ranks per host)")
    w.add_argument("--replay-threads", type=cli.positive_int, default=1,
                   help="torch threads of each replay (python -m real.replay --threads)")
    predict.add_cluster_args(p.add_argument_group(
        "cluster (as simulator.predict; default: hosts like the profile's, growing with P)"))
    p.add_argument("--out", default="replay", type=cli.output_folder,
                   help="folder for schedules, replays, tables, figure")
    return p


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv,
                       (profile_mod.ProfileError, ValueError))


def run(args) -> int:
    job = resolve(args)
    settings = accuracy.ReplaySettings(lr=args.lr, momentum=args.momentum,
                                       lr_decay=args.lr_decay, test_size=args.test_size,
                                       data_dir=args.data_dir, threads=args.replay_threads)
    rows = replay_all(job, args.seeds, args.dataset, args.train_size, args.eval_every, settings,
                      Path(args.out))
    table = [accuracy.with_target(r, args.target_accuracy) for r in rows]
    summary = accuracy.summarize(table, args.epochs)
    write_outputs(Path(args.out), rows, table, summary)
    print(accuracy.format_table(
        summary, args.target_accuracy, args.epochs,
        f"predicted (simulator + replay) | model {args.model}, {args.dataset}, batch "
        f"{args.batch_size}/worker, {args.epochs:g} epochs, seeds {args.seeds}"))
    return 0


def resolve(args) -> Sweep:
    """What the replays simulate, resolved as ``simulator.predict`` resolves its question
    (``simulator.question``: the profile on the cluster's hardware, the workload, the
    schemes that can run there, each configured as predict configures it), before any
    replay: each scheme at each P asked on the cluster its ranks take, serial at P = 1
    alone, a scheme that needs one host only where its ranks fit on one; a sweep predict
    would refuse as too long (over all seeds) is refused here too."""
    given = question.read_inputs(args, args.train_size)
    profile, workload = given.machine.profile, given.workload
    cfgs = runnable(question.configs(with_predict_defaults(args), args.schemes),
                    given.setting, args.schemes != list(SCHEMES), max(args.workers))
    plan = [(cfg, [p for p in counts_of(given.setting, cfg, args.workers) if p in args.workers])
            for cfg in cfgs]
    check_request(plan, given.setting, workload, len(args.seeds))
    return Sweep(points_of(given.setting, plan), workload, profile)


def with_predict_defaults(args) -> argparse.Namespace:
    """The replay's flags over ``simulator.predict``'s defaults: the scheme knobs the
    replay has no flag for (allreduce algorithm, buckets, fidelity, engine, library
    settings) are predict's, so a replay's schedule is the run predict predicts."""
    return argparse.Namespace(**{**vars(predict.build_parser().parse_args([])),
                                 **vars(args)})


def replay_all(job: Sweep, seeds, dataset, train_size, eval_every_at_1, settings,
               out: Path) -> list[dict]:
    """Every point of ``job`` at every seed: simulate, replay, curve."""
    from dataclasses import replace

    from tqdm import tqdm
    todo = [(pt, s) for s in seeds for pt in job.points]
    done, rows = {}, []
    for pt, seed in tqdm(todo, desc="replay", unit="run", disable=None, leave=False):
        rows.append(accuracy.replay_point(
            pt, job.workload, dataset, train_size, job.profile, seed,
            accuracy.eval_every_at(eval_every_at_1, pt.workers), replace(settings, seed=seed),
            out, done, job.heterogeneity))
    return rows


def write_outputs(out: Path, rows: list[dict], table: list[dict], summary: list[dict]) -> None:
    import pandas as pd
    atomic_write_text(out / "replay.csv", pd.DataFrame(table).to_csv(index=False))
    atomic_write_text(out / "summary.csv", pd.DataFrame(summary).to_csv(index=False))
    atomic_write_text(out / "curves.json", json.dumps(
        [{k: r[k] for k in ("scheme", "workers", "seed", "points")} for r in rows]))
    from report.accuracy import accuracy_time_plot
    path = accuracy_time_plot(rows, out / "accuracy-time.png",
                              "Predicted test accuracy against predicted training time")
    print(f"wrote {out / 'replay.csv'}, {out / 'summary.csv'}, {path}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
