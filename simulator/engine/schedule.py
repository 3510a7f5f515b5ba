"""A simulated run together with its update schedule, ready to be written and replayed.

``simulate_schedule`` runs the SimPy engine with the schedule on and wraps its
events with the header of ``contracts.schedule``: where the schedule came from
(scheme, P, seed, workload, cluster, profile) and how to read it (shared
weights or replicas, which model an evaluation scores).

Imports: contracts.cluster, contracts.profile,
contracts.schedule, contracts.workload, simulator.engine.result,
simulator.engine.run, simulator.model.config, simulator.model.schemes.holder.
"""
from __future__ import annotations

import json
from dataclasses import asdict

from contracts.cluster import Cluster
from contracts.profile import Profile
from contracts.schedule import Schedule, ScheduleHeader
from contracts.workload import Workload
from simulator.engine.result import Result
from simulator.engine.run import resolve_scheme, simulate
from simulator.model.config import Heterogeneity, SchemeConfig


def simulate_schedule(scheme: str | SchemeConfig, workers: int, workload: Workload,
                      dataset: str, cluster: Cluster, train_size: int | None = None,
                      profile: Profile | None = None, seed: int = 0,
                      heterogeneity: Heterogeneity = Heterogeneity(),
                      eval_every: int = 0, source: dict | None = None) -> tuple[Result, Schedule]:
    """Simulate one run and return its prediction and its update schedule.

    ``dataset`` and ``train_size`` (None: the whole training set, which has
    ``workload.dataset_samples`` samples) say what the replay trains on."""
    spec, cfg = resolve_scheme(scheme)
    result = simulate(cfg, workers, workload, cluster, profile, seed, heterogeneity,
                      schedule=True, eval_every=eval_every)
    per_epoch = result.iterations_per_epoch
    # versions of the shared weights per epoch: one per synchronous step, one per push
    # of an asynchronous worker; replicas count their own steps
    per_update = 1 if spec.lock_step or spec.weights == "replicas" else workers
    avg_every = spec.averaging_every(cfg.avg_every)
    header = ScheduleHeader(
        scheme=spec.name, workers=workers, seed=seed,
        workload={"model": workload.model, "dataset": dataset, "train_size": train_size,
                  "train_samples": workload.dataset_samples,
                  "batch_per_worker": workload.batch_per_worker,
                  "epochs": workload.epochs, "iterations": workload.iterations},
        weights=spec.weights, evaluate=spec.evaluate, iterations_per_epoch=per_epoch,
        iterations_per_worker=result.iterations_per_worker,
        updates_per_epoch=per_epoch * per_update, eval_every=eval_every, avg_every=avg_every,
        time_s=result.time_s,
        source={"engine": result.engine, "fidelity": result.fidelity,
                "epoch_s": result.epoch_s,
                "cluster": json.loads(json.dumps(asdict(cluster))),     # as the file holds it
                **(source or {})})
    return result, Schedule(header, result.schedule)
