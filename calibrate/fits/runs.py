"""Step-time samples from ``real.train`` run records, for fitting alongside the probes.

A run record's ``iterations.csv`` has ``compute_s`` (forward + backward + update)
per rank and iteration; its ``config`` the model and batch size; its
``environment`` the ranks on the host and torch threads per rank. Two uses:

* no oversubscription (``ranks_per_host * threads <= cores``): the steps are
  samples of ``t_step(batch)`` at that thread count, like the probe's; not ddp's, whose
  compute rows hold its bucket all-reduces (``real.schemes.Scheme.compute_row_holds_comm``:
  the model charges those as communication, so as step samples they would be charged twice
  and raise every scheme's step);
* more single-thread ranks than cores, in a scheme where every rank computes
  all the time (``real.schemes.Scheme.waits_between_steps`` false: no rank sits
  waiting in a server loop or a per-step collective): the steps measure core sharing with ``k =
  ranks_per_host`` (turned into a slowdown against the thread-1 fit later).
  A parameter server's rank, or ranks waiting in gloo or MPI, would make k
  count processes that do not compute.

A third use: the communication of per-tensor gloo ``allreduce`` runs with P >= 2
and a core per rank (``comm_s`` per iteration, waiting excluded) measures gloo's
latency per ring step inside training, where the probe's tight loop of calls
sees it lower and more variable from one calibration to the next
(``fit_comm.run_allreduce_alpha``).

A fourth: the training loop's own Python a step (``real.records.timing.loop_s_per_step``:
rank 0's ``epoch_s`` less its rows, over its steps), from runs whose rank 0 trains (not a
parameter server's) with a core per thread, for ``Profile.loop_s_per_step``
(``loop_per_step_s``: the median over the runs; the model shares it as the step where
cores are crowded). Neither the step fit (rows' ``compute_s``) nor the probes' steps hold it.

The first ``WARMUP_ITERATIONS`` iterations of every rank are dropped, and at most
``MAX_SAMPLES_PER_RUN`` evenly spaced steps are kept per run so that a long run
does not outweigh the probes. ``max_workers`` drops runs with more ranks: the
hold-out protocol calibrates on P <= K and predicts the rest.

Imports: numpy, pandas, calibrate.probes.rawio, real.schemes, contracts.record.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from contracts import record

from real.schemes import SCHEMES

from calibrate.probes.rawio import CalibrationError

WARMUP_ITERATIONS = 3
MAX_SAMPLES_PER_RUN = 60


@dataclass(frozen=True)
class RunSamples:
    steps: pd.DataFrame        # model, threads, batch, step_s, source
    sharing: pd.DataFrame      # model, batch, k, step_s, source
    runs_seen: tuple[str, ...]
    workers_seen: tuple[int, ...]
    allreduce_comm: pd.DataFrame | None = None   # model, workers, comm_s (gloo per-tensor)
    loop_s: tuple[float, ...] = ()     # the loop's Python a step, a run each (rank 0 trains)


def _steps_of(run_dir: Path, it: pd.DataFrame) -> pd.DataFrame:
    """The step samples of a run's rows ``it`` (its ``iterations.csv``, read from ``run_dir``)."""
    missing = {"rank", "batch_size", "compute_s"} - set(it.columns)
    if missing:
        raise CalibrationError(f"{run_dir}: iterations.csv lacks column(s) {', '.join(sorted(missing))}")
    it = it[(it["batch_size"] > 0) & (it["compute_s"] > 0)]
    it = it[it.groupby("rank").cumcount() >= WARMUP_ITERATIONS]
    if len(it) > MAX_SAMPLES_PER_RUN:
        it = it.iloc[np.linspace(0, len(it) - 1, MAX_SAMPLES_PER_RUN).astype(int)]
    return it


def run_samples(run_dir: Path) -> tuple[dict, pd.DataFrame, float | None]:
    """(facts about the run, its step samples, its loop a step where each thread has a core,
    as the step samples: ``loop_sample_s``), from one read of its ``record.json`` and
    ``iterations.csv``; RecordError if it is not a run record."""
    rec = record.read(run_dir)
    cfg, env = rec["config"], rec["environment"]
    facts = {"run_id": rec["run_id"], "status": rec["status"], "model": cfg.get("model"),
             "workers": int(env.get("workers", env.get("ranks", 1)) or 1),
             "ranks_per_host": int(env.get("ranks_per_host", env.get("ranks", 1)) or 1),
             "threads": int(env.get("threads_per_rank", 1) or 1),
             "cores": int(env.get("cores", 1) or 1), "algorithm": cfg.get("algorithm"),
             "average_every": int(cfg.get("average_every") or 0)}
    if rec["status"] != "completed" or not facts["model"]:
        return facts, pd.DataFrame(), None
    it = record.read_iterations(run_dir)
    return (facts, _steps_of(run_dir, it),
            loop_sample_s(rec, it) if _unshared(facts) else None)


def loop_sample_s(rec: dict, it: pd.DataFrame) -> float | None:
    """The run's loop outside its rows a step (rank 0's), from its record ``rec`` and its
    rows ``it`` (``iterations.csv``); None where rank 0 does not train (a parameter
    server), the record has no ``epoch_s``, or ``simulator.compare`` would leave it out
    (disturbed, testbed-bound: ``record.left_out_reason``)."""
    from real.records.timing import loop_s_per_step
    scheme = SCHEMES.get(rec["config"].get("algorithm"))
    if (scheme is None or scheme.server or rec["status"] != "completed"
            or record.left_out_reason(rec, ("phantom",))):
        return None
    return loop_s_per_step(rec.get("timings") or {}, it[it["rank"] == 0].to_dict("records"))


def loop_per_step_s(samples: tuple[float, ...]) -> float:
    """``Profile.loop_s_per_step``: the runs' median (0: no run measured it)."""
    return float(np.median(samples)) if samples else 0.0


def _unshared(facts: dict) -> bool:
    """Each thread of the run's ranks on a host has a core of its own."""
    return facts["ranks_per_host"] * facts["threads"] <= facts["cores"]


def _computes_all_the_time(facts: dict) -> bool:
    scheme = SCHEMES.get(facts["algorithm"])
    return scheme is not None and not scheme.waits_between_steps(facts["average_every"])


def collect(runs_dir: str | Path, max_workers: int | None = None) -> RunSamples:
    """All completed runs below ``runs_dir`` with at most ``max_workers`` ranks."""
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        raise CalibrationError(f"--runs {runs_dir} is not a directory")
    dirs = record.find_runs(runs_dir)
    if not dirs:
        raise CalibrationError(f"--runs {runs_dir} holds no run record (no */record.json)")
    steps, sharing, comm, seen, workers, loops = [], [], [], [], set(), []
    for run_dir in dirs:
        facts, it, loop = run_samples(run_dir)
        if not len(it) or (max_workers is not None and facts["workers"] > max_workers):
            continue
        if loop is not None:
            loops.append(loop)
        base = {"model": facts["model"], "source": facts["run_id"]}
        frame = pd.DataFrame({**base, "batch": it["batch_size"].to_numpy(int),
                              "step_s": it["compute_s"].to_numpy(float)})
        scheme = SCHEMES.get(facts["algorithm"])
        if scheme is not None and scheme.compute_row_holds_comm:
            pass        # ddp: its compute rows hold its all-reduces, no step samples
        elif _unshared(facts):
            steps.append(frame.assign(threads=facts["threads"]))
            if scheme and scheme.allreduces_each_tensor and facts["workers"] >= 2 and "comm_s" in it:
                comm.append(pd.DataFrame({"model": facts["model"], "workers": facts["workers"],
                                          "comm_s": it["comm_s"].to_numpy(float)}))
        elif facts["threads"] == 1 and _computes_all_the_time(facts):
            sharing.append(frame.assign(k=facts["ranks_per_host"]))
        else:
            continue            # oversubscribed threads: neither a clean step nor a sharing sample
        seen.append(facts["run_id"])
        workers.add(facts["workers"])
    empty = pd.DataFrame(columns=["model", "batch", "step_s", "source"])
    return RunSamples(steps=pd.concat(steps, ignore_index=True) if steps else empty,
                      sharing=pd.concat(sharing, ignore_index=True) if sharing else empty,
                      allreduce_comm=(pd.concat(comm, ignore_index=True) if comm else
                                      pd.DataFrame(columns=["model", "workers", "comm_s"])),
                      runs_seen=tuple(seen), workers_seen=tuple(sorted(workers)),
                      loop_s=tuple(loops))
