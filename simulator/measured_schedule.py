"""The measured order of a real ps_async run as a schedule the replay trains on.

    python -m simulator.measured_schedule RUN --like OUT/schedules/ps_async-P8-s1.jsonl \\
        --out measured/ps_async-P8-s1.jsonl
    python -m real.replay --schedule measured/ps_async-P8-s1.jsonl --seed 1 --out ...

An asynchronous parameter server applies the pushes in the order they arrive,
which the timing of the run decides. ``pipelines.replay`` replays the order the
simulator predicts; the real server records the order it saw (``push_order``
in the record: per update the worker, the version its gradient was computed on
and the training time). Replaying *that* order on the same model, data and seed
separates the two parts of an accuracy prediction: where the replay of the
measured order reproduces the run's accuracy, a miss of the prediction is the
predicted order's (the time model's), not the replay's.

``--like`` is the simulator's schedule of the same scheme, P and workload: its
header (workload, epoch length, evaluation spacing) is kept, its evaluation
points move to the measured times of the same update counts, and its updates
are replaced by the measured ones (worker w's k-th push: batch k mod E of its
epoch k div E, on its own shard). The output says where it came from in
``source``.

Bad input (not a ps_async run, a record without ``push_order``, a schedule of
another scheme, P or model): one line on stderr, exit code 2.

Imports: cli, contracts (record, schedule).
"""
from __future__ import annotations

import sys
from dataclasses import replace

import cli
from contracts import record as records
from contracts import schedule as schedules

PROG = "python -m simulator.measured_schedule"
SCHEME = "ps_async"


class MeasuredError(ValueError):
    """A run or schedule that cannot give a measured schedule; one line."""


def build_parser() -> cli.Parser:
    p = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("run", type=cli.input_folder, help="folder of one ps_async run (record.json)")
    p.add_argument("--like", required=True, type=cli.input_file,
                   help="the simulator's schedule of the same scheme, P and workload "
                        "(pipelines.replay writes them to OUT/schedules/)")
    p.add_argument("--out", required=True, type=cli.output_file(),
                   help="schedule file to write (JSON lines)")
    return p


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv,
                       (schedules.ScheduleError, records.RecordError, MeasuredError))


def run(args) -> int:
    sched = measured(records.read(args.run), schedules.read(args.like), str(args.run))
    path = schedules.write(args.out, sched)
    n = sum(e["kind"] == "update" for e in sched.events)
    print(f"{n} measured updates of {args.run} written to {path}", file=sys.stderr)
    return 0


def measured(rec: dict, like: schedules.Schedule, where: str) -> schedules.Schedule:
    """The schedule of ``like`` with the run's measured order of updates."""
    h, cfg = like.header, rec["config"]
    pushes = _check(rec, h, where)
    updates = list(_updates(pushes, h.iterations_per_epoch))
    times = [e["t"] for e in updates]
    events: list[dict] = []
    evals = sorted((e for e in like.events
                    if e["kind"] == "eval" and 1 <= e["step"] <= len(times)),
                   key=lambda e: e["step"])
    k = 0
    for j, update in enumerate(updates):
        events.append(update)
        while k < len(evals) and evals[k]["step"] == j + 1:     # after its update count
            events.append(evals[k] | {"t": times[j]})
            k += 1
    header = replace(h, time_s=times[-1], source={"measured": where, "run_id": rec["run_id"],
                                                   "seed": cfg.get("seed"),
                                                   "like": h.source})
    return schedules.Schedule(header, events)


def _check(rec: dict, h, where: str) -> dict:
    cfg = rec["config"]
    if cfg.get("algorithm") != SCHEME:
        raise MeasuredError(f"{where} is a {cfg.get('algorithm')} run; only {SCHEME} records "
                            "an order of updates that timing decides")
    if h.scheme != SCHEME:
        raise MeasuredError(f"--like is a schedule of {h.scheme}, not of {SCHEME}")
    pushes = rec.get("extra", {}).get("push_order")
    if not pushes or not pushes.get("worker"):
        raise MeasuredError(f"{where} has no push_order (recorded before 2026-11-25, or no "
                            "update applied): run it again")
    workers = rec.get("environment", {}).get("workers") or 1 + max(pushes["worker"])
    if workers != h.workers:
        raise MeasuredError(f"{where} has pushes of {workers} workers; --like is a schedule of "
                            f"P = {h.workers}")
    wl = h.workload
    per_worker = (cfg["global_batch"] // h.workers if cfg.get("global_batch")  # as real.train
                  else cfg.get("batch_size"))
    for key, ours in (("model", cfg.get("model")), ("dataset", cfg.get("dataset")),
                      ("batch_per_worker", per_worker)):
        if ours is not None and ours != wl[key]:
            raise MeasuredError(f"{where} ran {key} {ours!r}; --like is a schedule of "
                                f"{wl[key]!r}: simulate the run's workload")
    return pushes


def _updates(pushes: dict, per_epoch: int):
    """One update event per push, in the order applied: worker w's k-th push is batch
    ``k mod per_epoch`` of its epoch ``k div per_epoch``, on its own shard."""
    done: dict[int, int] = {}
    for applied, (w, read, t) in enumerate(zip(pushes["worker"], pushes["read"],
                                               pushes["t_s"])):
        k = done.get(w, 0)
        done[w] = k + 1
        epoch, batch = divmod(k, per_epoch)
        yield {"t": max(0.0, float(t)), "kind": "update", "worker": w, "shard": w,
               "epoch": epoch, "batch": batch, "read": read, "applied": applied}


if __name__ == "__main__":
    sys.exit(main())
