"""Predicted accuracy over predicted time: simulate the schedule, replay it, read the curve
(the library of ``pipelines.predict --target-accuracy`` and ``pipelines.replay``).

For each scheme, P and seed, ``replay_point``

1. simulates the run with its update schedule on (``engine.schedule``) and
   writes it to ``OUT/schedules/<scheme>-P<p>-s<seed>.jsonl``;
2. runs ``python -m real.replay`` on it in a subprocess (torch stays out of this
   process), which trains the real model along the schedule and writes
   ``OUT/replays/<scheme>-P<p>-s<seed>/replay.json``;
3. reads the curve back: test accuracy against simulated training time.

The replay depends on the order of the schedule's events, not on their
times. The global-batch schemes (``SAME_TRAINING``) apply the same updates
in the same order on the same samples, so one replay per P and seed serves
them all: the others take its accuracies at their own evaluation times
(``retimed``). A replay whose result is already in OUT for the same schedule
and settings is not run again, so an interrupted campaign resumes. ``replay_plan``
says beforehand which points of a prediction train and which retime.

It moved here from ``simulator/`` (issue 42): the simulator starts no command of ``real``.

Imports: numpy, contracts (checks, curve, schedule, workload), simulator.engine (schedule,
sweep), simulator.model.config.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from contracts import curve as curves
from contracts import schedule as schedules
from contracts.checks import ConfigError
from contracts.workload import Workload
from simulator.engine.schedule import simulate_schedule
from simulator.engine.sweep import Point
from simulator.model.config import Heterogeneity

# Every worker takes its slice of the same global batch and one averaged step follows
# (real.schemes.GLOBAL_BATCH): identical training, different times.
SAME_TRAINING = ("serial", "gather_scatter", "allreduce", "ddp", "mpi_allreduce", "ps_sync")
REPLAY_TIMEOUT_S = 6 * 3600
# What one replay costs beyond its training: python -m real.replay's start (torch, the data),
# about 6 s a replay on the 2-core VM (2026-11-27, three replays of 1,024 samples in 21 s)
REPLAY_START_S = 6.0


@dataclass(frozen=True)
class ReplaySettings:
    """How the replay trains: real.train's training flags, and where the data are."""
    seed: int = 1
    lr: float = 0.05
    momentum: float = 0.0
    lr_decay: float = 0.0
    test_size: int | None = None
    data_dir: str | None = None
    threads: int | None = None

    def flags(self) -> list[str]:
        out = ["--seed", str(self.seed), "--lr", repr(self.lr), "--momentum", repr(self.momentum),
               "--lr-decay", repr(self.lr_decay)]
        for flag, value in (("--test-size", self.test_size), ("--data-dir", self.data_dir),
                            ("--threads", self.threads)):
            if value is not None:
                out += [flag, str(value)]
        return out


def eval_every_at(every_at_1: int, workers: int) -> int:
    """Evaluation interval at P workers for points every ``every_at_1`` iterations at P = 1:
    the same number of samples between points (0 stays 0: epoch ends only)."""
    return 0 if every_at_1 == 0 else max(1, round(every_at_1 / workers))


def replay_point(point: Point, workload: Workload, dataset: str, train_size: int | None, profile,
                 seed: int, eval_every: int, settings: ReplaySettings, out: Path,
                 done: dict | None = None,
                 heterogeneity: Heterogeneity = Heterogeneity()) -> dict:
    """One scheme at P on its cluster (``engine.sweep.Point``): simulate, replay (or retime
    a replay in ``done``), return its row.

    ``done`` maps a training key to replay results already made in this campaign."""
    cfg, workers = point.scheme, point.workers
    name = f"{cfg.name}-P{workers}-s{seed}"
    result, sched = simulate_schedule(cfg, workers, workload, dataset, train_size=train_size,
                                      cluster=point.cluster, profile=profile, seed=seed,
                                      heterogeneity=heterogeneity, eval_every=eval_every)
    path = schedules.write(out / "schedules" / f"{name}.jsonl", sched)
    key = _training_key(cfg.name, workers, seed, eval_every)
    if done is not None and key in done:
        replayed = retimed(done[key], sched)
    else:
        replayed = run_replay(path, out / "replays" / name, sched, settings)
        if done is not None and key is not None:
            done[key] = replayed
    return {"scheme": cfg.name, "workers": workers, "seed": seed, "epoch_s": result.epoch_s,
            "time_s": result.time_s, "mean_staleness": result.mean_staleness,
            "points": replayed["points"], "replay_wall_s": replayed["cost"]["wall_s"],
            "peak_versions_held": replayed["cost"]["peak_versions_held"]}


def _training_key(scheme: str, workers: int, seed: int, eval_every: int):
    return ("global-batch", workers, seed, eval_every) if scheme in SAME_TRAINING else None


def retimed(replayed: dict, sched: schedules.Schedule) -> dict:
    """The same training at another schedule's times: its evaluation points' ``t``."""
    times = [0.0] + [e["t"] for e in sched.events if e["kind"] == "eval"] + [sched.header.time_s]
    points = replayed["points"]
    if len(times) != len(points):
        raise ConfigError(f"cannot retime a replay of {len(points)} points to a schedule of "
                          f"{len(times)}")
    return {**replayed, "points": [{**p, "train_s": t} for p, t in zip(points, times)],
            "cost": {**replayed["cost"], "wall_s": 0.0}}


def run_replay(schedule_path: Path, out: Path, sched: schedules.Schedule,
               settings: ReplaySettings) -> dict:
    """``python -m real.replay`` on one schedule, unless OUT holds its result already."""
    result_path = out / "replay.json"
    try:
        old = curves.read_replay(result_path)
        if old["schedule"] == json.loads(json.dumps(sched.header.to_json())) and \
                _same_settings(old["settings"], settings):
            return old
    except curves.CurveError:
        pass
    wl = sched.header.workload
    cmd = [sys.executable, "-m", "real.replay", "--schedule", str(schedule_path),
           "--out", str(out), "--model", wl["model"], "--dataset", wl["dataset"],
           *settings.flags()] + (["--train-size", str(wl["train_size"])]
                                 if wl["train_size"] else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(),
                          timeout=REPLAY_TIMEOUT_S, check=False)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        raise ConfigError(f"replay of {schedule_path.name} failed: "
                          f"{lines[-1] if lines else f'exit code {proc.returncode}'}")
    return curves.read_replay(result_path)


def _same_settings(recorded: dict, settings: ReplaySettings) -> bool:
    """The same training, and the same torch threads where they were asked for (another
    count sums in another order: the floats, and so a sensitive run's accuracy, differ)."""
    return all(recorded.get(k) == getattr(settings, k)
               for k in ("seed", "lr", "momentum", "lr_decay", "test_size")) and \
        (settings.threads is None or recorded.get("threads") == settings.threads)


def _env() -> dict:
    """The ``real`` package of this checkout comes first on the path."""
    root = str(Path(__file__).resolve().parents[1])
    return os.environ | {"PYTHONPATH": os.pathsep.join(
        [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}


# --- reading the curves ----------------------------------------------------------

def with_target(row: dict, target: float | None, epochs_marks=(1, 3, 10)) -> dict:
    """A row's final accuracy, accuracy after 1, 3, 10 epochs, and time to ``target``."""
    pts = row["points"]
    out = {k: v for k, v in row.items() if k != "points"}
    out["final_accuracy"] = pts[-1]["test_accuracy"]
    for e in epochs_marks:
        out[f"accuracy_after_{e}"] = (curves.accuracy_after(pts, e)
                                      if pts[-1]["epoch"] >= e - 1e-9 else None)
    if target is not None:
        out["time_to_target_s"] = curves.time_to_target(pts, target)
    return out


def summarize(rows: list[dict], epochs: float) -> list[dict]:
    """Mean over seeds per (scheme, P); a time to target counts only if every seed reaches it."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["scheme"], r["workers"]), []).append(r)
    out = []
    for (scheme, p), g in groups.items():
        s = {"scheme": scheme, "workers": p, "seeds": len(g),
             "epoch_s": float(np.mean([r["epoch_s"] for r in g])),
             "final_accuracy": float(np.mean([r["final_accuracy"] for r in g]))}
        for key in [k for k in g[0] if k.startswith("accuracy_after_")]:
            vals = [r[key] for r in g if r[key] is not None]
            s[key] = float(np.mean(vals)) if len(vals) == len(g) else None
        if "time_to_target_s" in g[0]:
            times = [r["time_to_target_s"] for r in g]
            s["time_to_target_s"] = float(np.mean(times)) if None not in times else None
            s["target_reached_seeds"] = sum(t is not None for t in times)
        out.append(s)
    return out


def format_table(summary: list[dict], target: float | None, epochs: float, title: str) -> str:
    marks = [k for k in summary[0] if k.startswith("accuracy_after_")
             and any(s[k] is not None for s in summary)] if summary else []
    head = f"{'scheme':<15}{'P':>4}{'epoch_s':>10}" + "".join(
        f"{'acc@' + k.rsplit('_', 1)[1]:>9}" for k in marks) + f"{'final':>8}"
    if target is not None:
        head += f"  time to {target:g}"
    lines = [title, head]
    for s in summary:
        line = f"{s['scheme']:<15}{s['workers']:>4}{s['epoch_s']:>10.3f}" + "".join(
            f"{s[k]:>9.4f}" if s[k] is not None else f"{'-':>9}" for k in marks)
        line += f"{s['final_accuracy']:>8.4f}"
        if target is not None:
            line += "  " + curves.describe_time(s["time_to_target_s"], epochs)
            if s["time_to_target_s"] is None and s["target_reached_seeds"]:
                line += f" (in {s['target_reached_seeds']} of {s['seeds']} seeds)"
        lines.append(line)
    return "\n".join(lines)


# --- the plan of predict --target-accuracy ------------------------------------------

def replay_plan(points) -> list[tuple]:
    """(point, whether it trains) for every point of a prediction (``engine.sweep.Point``)
    that time to accuracy replays: a point trains the real model unless an earlier one of
    the same training (``SAME_TRAINING``: the same updates, other times) serves it."""
    plan, keys = [], set()
    for pt in points:
        key = _training_key(pt.scheme.name, pt.workers, 1, 0)
        plan.append((pt, key is None or key not in keys))
        keys.add(key)
    return plan
