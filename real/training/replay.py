"""Train the real model in one process along a simulated update schedule.

    python -m real.replay --schedule OUT/schedules/psgd-P4-s1.jsonl --out OUT/replays/psgd-P4-s1

The schedule (``contracts.schedule``) says which worker applied the
gradient of which batch, computed on which version of the weights, to which
version, and when weights were averaged or mixed. The replay applies exactly
those updates, in that order, on the data of ``real.train`` (``real.training.batches``)
and evaluates the model a user would get at each evaluation point. Its curve
is predicted accuracy against *simulated* time (``replay.json``,
``contracts.curve``).

Cost: one forward and backward per update (the parts of a synchronous step
in one pass over their global batch), so about one serial run of the same
samples whatever P is. Weights are kept per version only while an update
still has to read them: at most one per worker in flight (reported as
``peak_versions_held``).

Imports: torch, real.training.batches, real.training.data, real.training.models,
real.training.replay_state, cli, contracts.curve, contracts.schedule.
"""
from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

import torch

from real.training.batches import BatchOrder, BatchOrderError
from real.training.replay_state import ReplayState
from contracts import curve
import cli
from contracts import schedule as schedules

PROG = "python -m real.replay"
RESULT_FILE = "replay.json"


def build_parser() -> cli.Parser:
    p = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--schedule", required=True, help="schedule file of the simulator (JSON lines)")
    p.add_argument("--out", required=True, type=cli.output_folder,
                   help=f"folder that receives {RESULT_FILE}")
    p.add_argument("--data-dir", default=None, type=cli.input_folder,
                   help="folder holding the dataset files")
    p.add_argument("--seed", type=int, default=1,
                   help="seed of the weights and the data order, as real.train's --seed")
    cli.add_sgd_flags(p)
    p.add_argument("--test-size", type=cli.positive_int, default=None,
                   help="evaluate on this many test samples (all by default)")
    p.add_argument("--threads", type=cli.positive_int, default=1,
                   help="torch threads; one is robust where the cores are shared (two threads "
                        "on a loaded 2-core machine ran 4-10x slower), more pays on a quiet one")
    w = p.add_argument_group("the workload this replay is for (refused if the schedule's differs)")
    w.add_argument("--model", default=None, help="model name")
    w.add_argument("--dataset", default=None, help="dataset name")
    w.add_argument("--train-size", type=cli.positive_int, default=None,
                   help="training samples the real runs used")
    return p


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


def run(args) -> int:
    try:
        sched = schedules.read(args.schedule)
        _check_workload(args, sched.header)
    except schedules.ScheduleError as e:
        return cli.usage_error(PROG, str(e))
    torch.set_num_threads(args.threads)
    from real.training.data import DataError, load_dataset
    wl = sched.header.workload
    try:
        data = load_dataset(wl["dataset"], args.data_dir, train_size=wl["train_size"],
                            test_size=args.test_size, seed=args.seed)
        if data.train_size != wl["train_samples"]:
            raise DataError(f"the schedule was simulated for {wl['train_samples']} training "
                            f"samples, the data has {data.train_size}")
        result = replay(sched, data, args)
    except (DataError, BatchOrderError) as e:
        return cli.usage_error(PROG, str(e))
    path = curve.write_replay(Path(args.out) / RESULT_FILE, result)
    last = result["points"][-1]
    print(f"replayed {result['cost']['updates']} updates in {result['cost']['wall_s']:.1f} s; "
          f"final test accuracy {last['test_accuracy']:.4f} at {last['train_s']:.2f} s simulated; "
          f"{path}", file=sys.stderr)
    return 0


def _check_workload(args, header) -> None:
    wl = header.workload
    asked = {"model": args.model, "dataset": args.dataset, "train_size": args.train_size}
    for key, value in asked.items():
        if value is not None and value != wl[key]:
            raise schedules.ScheduleError(
                f"{args.schedule} is a schedule of another workload: {key} {wl[key]!r}, "
                f"not {value!r}; simulate this workload first")


def replay(sched, data, settings) -> dict:
    """Replay ``sched`` on ``data``; returns the contents of ``replay.json``."""
    from real.training.models import build_model
    h = sched.header
    order = BatchOrder(h.scheme, h.workers, h.workload["batch_per_worker"], data.train_size,
                       settings.seed)
    order.check(h.iterations_per_epoch)
    torch.manual_seed(settings.seed)           # the weights every rank of real.train starts from
    model = build_model(h.workload["model"], data.input_shape, data.num_classes)
    state = ReplayState(h, model, data, order, settings)
    t0 = time.monotonic()
    state.run(sched.events)
    wall_s = time.monotonic() - t0
    return {"schedule": h.to_json(),
            "settings": {"seed": settings.seed, "lr": settings.lr,
                         "momentum": settings.momentum, "lr_decay": settings.lr_decay,
                         "test_size": getattr(settings, "test_size", None),
                         "test_samples": data.test_size, "data_source": data.source,
                         "threads": torch.get_num_threads()},
            "points": state.points, "update_losses": state.losses,
            "cost": {"wall_s": wall_s, "eval_s": state.eval_s, "updates": state.updates,
                     "forward_passes": state.forward_passes,
                     "peak_versions_held": state.peak_versions,
                     "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}}


if __name__ == "__main__":
    sys.exit(main())
