"""Predicted against measured: every (scheme, P) of a folder of run records.

    python -m simulator.compare RUNS_DIR [--profile PROFILE.json] [--out DIR] [--link cluster.toml]
                                [--workloads FILE_OR_DIR ...] [--cluster cluster.toml]

For each group of completed records with the same scheme, worker count and
configuration, the simulator predicts exactly that run (same model, per-worker
batch, training samples, epochs, threads per rank, host cores, averaging period,
MPI algorithm) and the table shows

    scheme | workers | measured (mean ± 95% CI) | predicted | relative error %

per epoch, with the median and worst error per scheme, on all points and on the held-out ones
(worker counts the profile's calibration did not see, from its provenance). The measured time
leaves out each run's warm-up, its slowest worker's first iteration, and scales the rest to the
epoch (``steady_epoch_s``): a run of a few iterations on a slow link is otherwise half first-use
costs that a long training pays once. Records of the emulated cluster (``environment.cluster``)
are predicted on that cluster: its hosts with their own links at the record's shaped rate,
sharing the machine's cores (``Cluster.shared_cores``); with ``--link`` (a cluster TOML of
``python -m calibrate.link``) a message also pays the calibrated latency and sees the calibrated
payload share of the rate. A figure per scheme shows measured speedup with error bars, the
predicted curve and the ideal line, and below it the relative error.

Every model is predicted from a workload file (``contracts.workload``):
the files given with ``--workloads`` (by the model name in them), else the
profile's own model written as one (``workload_of_cost``): the built-in models
take the same path as a user's. ``--cluster`` describes the hosts of every
record instead of the record's own environment (runs made on a cluster
described by a file or a preset's kind). The ``workload`` column says which.

Phantom runs (``real.phantom``: their compute slept, which takes no core) and
records marked *disturbed* (other processes took CPU the run asked for) or
*testbed-bound* (the machine, not the system it stands for, set the pace:
``real.records.testbed``; the marks and the rule are
``contracts.record.left_out_reason``) are left out, and the output says how
many of how many, by mark; ``--include-disturbed`` and ``--include-testbed-bound``
keep them.
What is left is compared (exit 0); a folder where nothing is left is a usage error
(exit 2). Where the records hold several sets of settings, a line says so and how
they differ. Files are written before the table is printed, so ``compare RUNS |
head`` still leaves ``compare.csv`` and the figures.

Every record is checked whole before it is used (``record.read``, its
``iterations.csv``, then the fields a prediction needs, ``workload_of`` and
friends); one that cannot be used is left out and named on stderr with the
reason (a damaged iterations file by its line). A folder with no usable record
is a usage error.

Imports: numpy, pandas, contracts, report.stats, simulator.engine, simulator.model.config,
simulator.output.compare_plot.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

import cli
from contracts import profile as profiles
from contracts import record
from contracts.checks import ConfigError
from contracts.cluster import (
    Cluster,
    Link,
    LinkCalibration,
    calibrated_cluster,
    load_cluster,
    load_link_calibration,
)
from contracts.workload import Workload
from simulator.model.comm import polls
from simulator.model.config import SchemeConfig
from simulator.model.schemes import SCHEMES
from simulator.stalls import stall_figures

PROG = "python -m simulator.compare"


def _count(section: dict, key: str, where: str, default=None) -> int:
    """A whole number of at least 1 from a record, or ConfigError naming the field."""
    value = section.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"field {where}.{key} is {value!r}, not a whole number >= 1")
    return value


def workers_of(rec: dict) -> int:
    env = rec["environment"]
    return _count(env, "workers" if "workers" in env else "ranks", "environment", 1)


def workload_of(rec: dict) -> Workload:
    cfg, env, res = rec["config"], rec["environment"], rec["results"]
    workers = workers_of(rec)
    batch = _count(cfg, "batch_size", "config", 64)
    if cfg.get("global_batch"):
        batch = _count(cfg, "global_batch", "config") // workers
    epochs = cfg.get("epochs", 1)
    if isinstance(epochs, bool) or not isinstance(epochs, (int, float)) or not epochs > 0:
        raise ConfigError(f"field config.epochs is {epochs!r}, not a positive number")
    return Workload(model=phantom_model(rec) or cfg.get("model", "cnn"), batch_per_worker=batch,
                    dataset_samples=_count(res, "train_samples", "results"),
                    epochs=float(epochs),
                    threads_per_worker=_count(env, "threads_per_rank", "environment", 1))


def scheme_of(rec: dict) -> SchemeConfig:
    cfg = rec["config"]
    if cfg.get("algorithm") not in SCHEMES:
        raise ConfigError(f"field config.algorithm is {cfg.get('algorithm')!r}, not a scheme")
    algorithm = cfg.get("mpi_allreduce") or "auto"
    every = cfg.get("average_every") or 0
    if isinstance(every, bool) or not isinstance(every, int) or every < 0:
        raise ConfigError(f"field config.average_every is {every!r}, not a whole number >= 0")
    return SchemeConfig(name=cfg["algorithm"], avg_every=every, algorithm=algorithm)


def phantom_model(rec: dict) -> str | None:
    """The name a phantom record's slept workload goes by (its model, the file's digest
    and the time scale: runs of one file at one scale share it); None for a real run."""
    c = rec.get("compute") or {}
    if c.get("mode") != "phantom":
        return None
    w, scale = c.get("workload") or {}, c.get("time_scale")
    if not isinstance(w.get("sha256"), str) or not isinstance(scale, (int, float)) \
            or isinstance(scale, bool) or not scale > 0:
        raise ConfigError("field compute.workload.sha256 or compute.time_scale is missing: "
                          "not a phantom record real.train wrote")
    return f"{w.get('name', 'model')}-phantom-{w['sha256'][:8]}-x{scale:g}"


def phantom_workloads(groups: dict, given) -> dict:
    """Model name -> (the slept workload, its file) of every phantom group: the record's
    workload file where it still holds the digest the record names, else a file of
    ``given`` (``--workloads``) that does; ConfigError naming the file when none does."""
    import hashlib

    from contracts.workload import load_workload, slept
    digests = {}
    for item in given or ():
        item = Path(item)
        for f in sorted(item.glob("*.toml")) if item.is_dir() else [item]:
            digests.setdefault(hashlib.sha256(f.read_bytes()).hexdigest(), f)
    out = {}
    for recs in groups.values():
        name = phantom_model(recs[0])
        if name is None or name in out:
            continue
        c = recs[0]["compute"]
        path, sha = Path(c["workload"].get("file", "")), c["workload"]["sha256"]
        if not (path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == sha):
            path = digests.get(sha)
        if path is None:
            raise ConfigError(f"phantom runs of {c['workload'].get('file')} (sha256 "
                              f"{sha[:12]}...): that file is gone or changed; give it with "
                              "--workloads")
        out[name] = (slept(load_workload(path), c["time_scale"], name), str(path))
    return out


WAIT_SLEEP_ENV = "PSGD_WAIT_SLEEP_S"     # real.launch.dist.WAIT_SLEEP_ENV (simulator imports no real)


def polled_profile(profile: profiles.Profile, rec: dict) -> profiles.Profile:
    """``profile`` for a record whose ranks waited in sleeping polls (its environment's
    ``sleeping_waits``, phantom runs on the emulated cluster): MPI's collectives cost
    ``poll_delay_s`` more per step, and its transport's ``poll_s`` says so to the
    point-to-point sends that wait for their receivers (``model.comm.polls``); the profile
    itself for any other record."""
    from dataclasses import replace
    waits = (rec.get("environment") or {}).get("sleeping_waits") or {}
    try:
        poll_s = float(waits.get(WAIT_SLEEP_ENV) or 0.0)
    except (TypeError, ValueError):
        raise ConfigError(f"field environment.sleeping_waits.{WAIT_SLEEP_ENV} is "
                          f"{waits.get(WAIT_SLEEP_ENV)!r}, not a number of seconds") from None
    if poll_s <= 0:
        return profile
    delay = polls.step_delay_s(poll_s)
    transports = tuple(
        replace(t, collective_alpha_s={op: t.alpha_s + t.step_extra_s(op) + delay
                                       for op in ("allreduce", "bcast", "gather", "scatter")},
                poll_s=poll_s)
        if t.backend == "mpi" else t for t in profile.transports)
    return replace(profile, transports=transports)


def cluster_of(rec: dict, link: LinkCalibration | None = None, buckets: bool = True) -> Cluster:
    """The machine of the record: the calibrated host, or the emulated cluster it names
    (its shaped rate and, unless not ``buckets``, its shapers' token buckets; with
    ``link``, the calibrated payload share and latency of a link)."""
    env = rec["environment"]
    emu = env.get("cluster")
    if not emu:
        return calibrated_cluster(_count(env, "cores", "environment", 1))
    if not isinstance(emu, dict) or not isinstance(emu.get("namespaces"), list):
        raise ConfigError("field environment.cluster is not an emulated cluster's description")
    cores = _count(env, "cores", "environment", 1)     # the machine's, for every namespace
    link = emulated_link(emu.get("bandwidth_bits_per_s", 0), emu.get("latency_s", 0.0), link,
                         emu.get("burst_bytes", 0) if buckets else 0, cores)
    if phantom_model(rec):
        # a phantom rank's compute sleeps: each host stands for a machine of its own (a
        # faithful run's CPU was never short, real.records.testbed), one rank per host
        return Cluster(hosts=len(emu["namespaces"]), cores_per_host=1, link=link)
    # the hosts are namespaces of one machine: their own links, but one pool of its cores
    return Cluster(hosts=len(emu["namespaces"]), cores_per_host=cores, link=link,
                   shared_cores=True)


def emulated_link(bits_per_s: float, latency_s: float = 0.0,
                  link: LinkCalibration | None = None, burst_bytes: float = 0.0,
                  cores: int = 0) -> Link:
    """A link of the emulated cluster shaped at ``bits_per_s`` by token buckets of
    ``burst_bytes`` (the record's ``real.cluster`` setting, on the wire): with a
    calibration (``calibrate.link``), its payload share of that rate and of the burst,
    latency, socket buffer, ACK share and CPU per message, byte and wake-up, that CPU on the
    machine's ``cores``, which every namespace shares (``Link.cpu_shared_cores``)."""
    bandwidth, buffer, acks, cpu, share = bits_per_s / 8, 0.0, 0.0, (0.0, 0.0, 0.0), 1.0
    if link is not None:
        share, latency_s = link.payload_efficiency, link.latency_s
        bandwidth = bandwidth * share
        buffer, acks = link.socket_buffer_bytes, link.ack_share
        cpu = (link.cpu_s_per_message, link.cpu_s_per_byte, link.cpu_s_per_wakeup)
    return Link(bandwidth_bytes_per_s=bandwidth, latency_s=latency_s, socket_buffer_bytes=buffer,
                ack_share=acks, cpu_s_per_message=cpu[0], cpu_s_per_byte=cpu[1],
                cpu_s_per_wakeup=cpu[2], burst_bytes=float(burst_bytes or 0) * share,
                cpu_shared_cores=cores if any(cpu) else 0)


def _key(rec: dict, link: LinkCalibration | None) -> tuple:
    w, s, c = workload_of(rec), scheme_of(rec), rec["environment"].get("cluster") or {}
    cluster_of(rec, link)                       # checked here, used once per group
    return (s, workers_of(rec), w, c.get("bandwidth_bits_per_s"), len(c.get("namespaces", ())))


def workload_files(paths) -> dict:
    """Model name -> (ModelWorkload, path) of the files and folders given."""
    from contracts.workload import load_workload
    found = {}
    for item in paths or ():
        item = Path(item)
        files = sorted(item.glob("*.toml")) if item.is_dir() else [item]
        for f in files:
            w = load_workload(f)
            found[w.name] = (w, str(f))
    return found


def model_workloads(profile: profiles.Profile, files: dict, names) -> list[tuple]:
    """The workload of every model named: its file, else the profile's model as one."""
    from contracts.workload import workload_of_cost
    out = []
    for name in sorted(set(names)):
        if name in files:
            out.append(files[name])
        else:
            cost = profile.model(name)
            out.append((workload_of_cost(cost, provenance={"source": "profile"}),
                        "the profile's model"))
    return out


def usable_records(runs_dir, link: LinkCalibration | None = None, skipped: list | None = None,
                   include_disturbed: bool = False, keep: tuple[str, ...] = ()
                   ) -> tuple[dict[tuple, list[dict]], dict[str, int]]:
    """Completed records grouped by configuration, and how many were left out by each
    mark of ``record.left_out_reason`` (disturbed, ...; ``keep`` and ``include_disturbed``
    keep marked ones). Each record that cannot be read or used, its iterations file
    included, is appended to ``skipped`` as (folder, reason naming the file and line)
    instead of being dropped silently."""
    keep = tuple(keep) + (("disturbed",) if include_disturbed else ())
    groups: dict[tuple, list[dict]] = {}
    left_out: dict[str, int] = {}
    for d in record.find_runs(runs_dir):
        try:
            rec = record.read(d)
            if rec["status"] != "completed":
                continue
            key = _key(rec, link)
            iterations = record.read_iterations(d)
        except (record.RecordError, ConfigError) as e:
            if skipped is not None:
                skipped.append((d, str(e).replace(str(d / record.RECORD_FILE) + ": ", "")))
            continue
        mark = record.left_out_reason(rec, keep)
        if mark:
            left_out[mark] = left_out.get(mark, 0) + 1
            continue
        groups.setdefault(key, []).append(dict(rec, _folder=d, _iterations=iterations))
    return groups, left_out


def compare(runs_dir, profile: profiles.Profile, seed: int = 0,
            link: LinkCalibration | None = None, workloads=None,
            cluster: Cluster | None = None, include_disturbed: bool = False,
            skipped: list | None = None, keep: tuple[str, ...] = (),
            buckets: bool = True, only=None) -> pd.DataFrame:
    """One row per (configuration, P): measured mean ± CI, predicted, relative error.

    Records marked disturbed (or with another mark of ``record.left_out_reason``, such as
    testbed-bound) are left out unless ``include_disturbed`` (or the mark is in ``keep``);
    how many, by mark, is in
    ``df.attrs["left_out"]`` (and the disturbed ones in ``df.attrs["disturbed_left_out"]``),
    the records compared in ``df.attrs["records"]``. Records (and groups the profile
    cannot predict) left out otherwise go to ``skipped``. ``buckets=False`` predicts the
    emulated cluster's links without their token buckets (what that mechanism moves).
    ``only``: a test of a group's key (scheme, P, workload, shaped rate, hosts) that keeps
    just the groups it passes.
    """
    from report.stats import mean_ci95
    from simulator.engine import simulate
    seen = set(profile.provenance.workers_seen)
    files = workload_files(workloads)
    from simulator.engine.machine import machine
    rows = []
    groups, left_out = usable_records(runs_dir, link, skipped, include_disturbed, keep)
    files.update(phantom_workloads(groups, workloads))
    for (scheme, workers, workload, bw, hosts), recs in groups.items():
        if only is not None and not only((scheme, workers, workload, bw, hosts)):
            continue
        per_epoch = [steady_epoch_s(r, scheme.name, workload.epochs) for r in recs]
        mean, ci = mean_ci95(per_epoch)
        on = cluster or cluster_of(recs[0], link, buckets)
        try:
            model = model_workloads(profile, files, [workload.model])
            mach = machine(polled_profile(profile, recs[0]), "", on, model)
            pred = simulate(scheme, workers, workload, on, mach.profile, seed)
        except ConfigError as e:
            if skipped is not None:
                skipped.extend((r["_folder"], f"cannot be predicted: {e}")
                               for r in recs)
            continue
        rows.append({"scheme": scheme.name, "workers": workers, "runs": len(recs),
                     "disturbed_runs": sum(record.is_disturbed(r) for r in recs),
                     **measured_breakdown(recs, scheme.name, workload.epochs),
                     **stall_figures(recs, scheme.name, workload.epochs, iterations_of),
                     "model": workload.model, "batch_per_worker": workload.batch_per_worker,
                     "threads": workload.threads_per_worker, "hosts": hosts or 1,
                     "bandwidth_bits_per_s": bw, "measured_s": mean, "measured_ci_s": ci,
                     "predicted_s": pred.epoch_s,
                     "predicted_compute_s": pred.compute_s / workload.epochs,
                     "predicted_comm_s": pred.comm_s / workload.epochs,
                     "predicted_wait_s": pred.wait_s / workload.epochs,
                     "rel_error": (pred.epoch_s - mean) / mean,
                     "held_out": bool(seen) and workers not in seen,
                     "workload": model[0][1]})
    df = pd.DataFrame(rows)
    if not df.empty:
        df = df.sort_values(["scheme", "hosts", "bandwidth_bits_per_s", "workers"],
                            na_position="first").reset_index(drop=True)
    df.attrs["left_out"] = left_out
    df.attrs["disturbed_left_out"] = left_out.get("disturbed", 0)
    df.attrs["records"] = int(df["runs"].sum()) if not df.empty else 0
    df.attrs["settings"] = mixed_settings(groups)
    return df


def iterations_of(rec: dict):
    """A usable record's iterations table (``usable_records``' dicts), read once and kept in
    the record's dict, or None where it cannot be read. Public for the benchmarks that
    take the same records apart (``benchmarks.phantom_parts``)."""
    if "_iterations" not in rec:
        try:
            rec["_iterations"] = record.read_iterations(rec["_folder"])
        except (record.RecordError, OSError, KeyError):
            rec["_iterations"] = None
    return rec["_iterations"]


def steady_epoch_s(rec: dict, scheme: str, epochs: int) -> float:
    """A run's training time per epoch, warm-up excluded. Its first K iterations (the
    run's ``--warmup-steps``: connections opened on first use, DDP's buckets set up, the
    ranks' uneven start, TCP's windows growing) are warm-up. With K = 1 (records that do
    not say theirs) the slowest worker's first iteration is taken out of the training time
    and the rest scaled back to every iteration; what a run does once after its iterations
    (its rows of ``iteration`` -1: psgd's and async_avg's closing average) is taken out
    before the scaling and added back once (the slowest worker's). With K > 1 the worker
    whose iterations took longest has its first K replaced by its later ones
    (``_warm_up_replaced_s``). The whole time per epoch where the iterations cannot be
    read or a worker made fewer than K + 2."""
    wall_s = rec["timings"]["train_wall_s"]
    warmup = warmup_steps(rec)
    it = iterations_of(rec)
    if it is None:
        return wall_s / epochs
    workers = it[it["rank"] > 0] if SCHEMES[scheme].server else it
    row_s = workers["compute_s"] + workers["comm_s"] + workers["wait_s"]
    once = workers["iteration"] < 0
    steps = workers[~once]
    counts = steps.groupby("rank").size()
    if counts.empty or counts.min() < warmup + 2:
        return wall_s / epochs
    replaced = _warm_up_replaced_s(wall_s, row_s[~once], steps, warmup,
                                   averaging_period(rec, scheme)) if warmup > 1 else None
    if replaced is not None:
        return replaced / epochs
    first_s = float(row_s[steps.groupby("rank").head(1).index].max())
    once_s = float(row_s[once].groupby(workers["rank"][once]).sum().max()) if once.any() else 0.0
    n = int(counts.max())
    return ((wall_s - first_s - once_s) * n / (n - 1) + once_s) / epochs


def warmup_steps(rec: dict) -> int:
    """The steps a run's record says are warm-up (``real.train --warmup-steps``; 1 where
    it does not say, as no record before 2026-11-29 does)."""
    return int((rec.get("config") or {}).get("warmup_steps") or 1)


def averaging_period(rec: dict, scheme: str) -> int:
    """Steps from one average of the weights to the next (psgd's and async_avg's
    ``--average-every``, ``Scheme.averaging_every``); 1 for the other schemes and for an
    average at the end only."""
    every = int((rec.get("config") or {}).get("average_every") or 0)
    return max(1, SCHEMES[scheme].averaging_every(every))


def _warm_up_replaced_s(wall_s: float, row_s, steps, warmup: int, period: int) -> float | None:
    """The training time with the first ``warmup`` iterations of the worker whose
    iterations took longest replaced by its mean later iteration of the same place in the
    averaging period (an average every ``period`` steps keeps its share of the steps).
    Unlike scaling the rest back to every iteration, it counts the time outside the
    iterations (start, end, a closing average) once. None where the later iterations hold
    no whole period."""
    rank = row_s.groupby(steps["rank"]).sum().idxmax()
    mine = steps["rank"] == rank
    phase = steps["iteration"][mine] % period
    later = steps["iteration"][mine] >= warmup
    means = row_s[mine][later].groupby(phase[later]).mean()
    if len(means) < period:
        return None
    return wall_s - float(row_s[mine][~later].sum()) + float(means[phase[~later]].sum())


def measured_breakdown(recs: list[dict], scheme: str, epochs: int) -> dict:
    """What the records' iterations say a worker spent per epoch on computing,
    communicating and waiting (mean over the worker ranks, then over the runs; a server
    or holder rank is left out, as the simulator's per-worker figures leave it out).
    NaN where a record's iterations cannot be read. A run whose warm-up is K > 1 steps
    (``--warmup-steps``) has its later steps scaled back to all its steps, as its time
    per epoch leaves those K out (``steady_epoch_s``)."""
    skip_rank0 = SCHEMES[scheme].server
    parts = ["compute_s", "comm_s", "wait_s"]
    sums = []
    for r in recs:
        it = iterations_of(r)
        if it is None:
            continue
        workers = it[it["rank"] > 0] if skip_rank0 else it
        per_rank = _parts_without_warm_up(workers, parts, warmup_steps(r))
        if per_rank is None:
            per_rank = workers.groupby("rank")[parts].sum()
        if len(per_rank):
            sums.append(per_rank.mean() / epochs)
    if not sums:
        return {f"measured_{k}_s": np.nan for k in ("compute", "comm", "wait")}
    mean = pd.concat(sums, axis=1).mean(axis=1)
    return {f"measured_{k}_s": float(mean[f"{k}_s"]) for k in ("compute", "comm", "wait")}


def _parts_without_warm_up(workers, parts: list[str], warmup: int):
    """Per rank, ``parts`` summed over the steps after the first ``warmup`` scaled back to
    all the rank's steps, plus what it does once after them; None where the warm-up is
    one step (every step kept, as before) or a rank made no step after it."""
    steps = workers[workers["iteration"] >= 0]
    n = steps.groupby("rank").size()
    if warmup <= 1 or not len(n) or not (n > warmup).all():
        return None
    later = steps[steps["iteration"] >= warmup].groupby("rank")[parts].sum()
    once = workers[workers["iteration"] < 0].groupby("rank")[parts].sum()
    return later.mul(n / (n - warmup), axis=0) + once.reindex(n.index, fill_value=0.0)


def disturbed_note(df: pd.DataFrame) -> str:
    """How many runs the comparison left out (by mark) or kept disturbed ("" when none)."""
    left = df.attrs.get("left_out", {})
    kept = int(df["disturbed_runs"].sum()) if "disturbed_runs" in df else 0
    total = df.attrs.get("records", 0) + sum(left.values())
    note = record.left_out_note(left, total, LEFT_OUT_FLAGS)
    if note:
        return note
    return f"kept {kept} disturbed run(s) (--include-disturbed)" if kept else ""


LEFT_OUT_FLAGS = {"disturbed": "--include-disturbed",
                  "testbed-bound": "--include-testbed-bound"}


def mixed_settings(groups: dict) -> str:
    """"" when every compared record has the same settings (scheme, P and threads aside);
    else a line saying how many sets there are and in what they differ."""
    seen: dict[str, dict] = {}
    for recs in groups.values():
        for r in recs:
            st = record.settings_of(r)
            seen.setdefault(record.config_digest(st, record.PER_POINT_SETTINGS), st)
    if len(seen) < 2:
        return ""
    first, *others = seen.values()
    how = "; ".join(record.settings_difference(first, o, record.PER_POINT_SETTINGS)
                    for o in others[:3])
    return (f"the records hold {len(seen)} sets of settings ({how}): each row is measured and "
            "predicted with its own")


def error_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Median and worst |relative error| per scheme, on all points and on held-out ones."""
    from report.stats import median_worst, scheme_sets
    out = []
    for scheme, g in scheme_sets(df)[1:]:
        held = g[g["held_out"]]
        (median, worst), (held_median, held_worst) = (median_worst(g["rel_error"]),
                                                      median_worst(held["rel_error"]))
        out.append({"scheme": scheme, "points": len(g), "median_error": median,
                    "worst_error": worst, "held_out_points": len(held),
                    "held_out_median_error": held_median, "held_out_worst_error": held_worst})
    return pd.DataFrame(out)


def format_table(df: pd.DataFrame) -> str:
    lines = [f"{'scheme':<15}{'P':>3}{'hosts':>6}  {'measured (s/epoch)':>20}{'predicted':>11}"
             f"{'error':>9}  held out"]
    for _, r in df.iterrows():
        meas = f"{r.measured_s:.3f} ± {r.measured_ci_s:.3f}"
        lines.append(f"{r.scheme:<15}{r.workers:>3}{r.hosts:>6}  {meas:>20}{r.predicted_s:>11.3f}"
                     f"{100 * r.rel_error:>8.1f}%  {'yes' if r.held_out else ''}")
    return "\n".join(lines)


def format_errors(summary: pd.DataFrame) -> str:
    def pct(x):
        return "-" if pd.isna(x) else f"{100 * x:.1f}%"
    lines = [f"{'scheme':<15}{'median':>8}{'worst':>8}{'held-out median':>17}{'held-out worst':>16}"]
    for _, r in summary.iterrows():
        lines.append(f"{r.scheme:<15}{pct(r.median_error):>8}{pct(r.worst_error):>8}"
                     f"{pct(r.held_out_median_error):>17}{pct(r.held_out_worst_error):>16}")
    return "\n".join(lines)


def cluster_suffix(hosts: int, bandwidth_bits_per_s: float) -> str:
    """What names an emulated cluster's rows apart (figures, pooled schemes); "" on one host."""
    return "" if hosts == 1 else f"-{hosts}hosts-{int(bandwidth_bits_per_s) // 10**6}mbit"


def write_outputs(df: pd.DataFrame, out: Path) -> list[Path]:
    from simulator.output.compare_plot import comparison_plot
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / ".compare.csv.tmp"
    df.to_csv(tmp, index=False)
    tmp.replace(out / "compare.csv")
    paths = [out / "compare.csv"]
    for (scheme, hosts, bw), g in df.groupby(["scheme", "hosts", "bandwidth_bits_per_s"],
                                            dropna=False):
        paths.append(comparison_plot(g, out / f"compare-{scheme}{cluster_suffix(hosts, bw)}.png"))
    return paths


def build_parser():
    p = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("runs", type=cli.input_folder,
                   help="folder of run records (real.train / real.sweep --out)")
    p.add_argument("--profile", default=None, type=cli.input_file,
                   help="profile JSON (default: the embedded one)")
    p.add_argument("--out", default=None, type=cli.output_folder,
                   help="folder for compare.csv and figures (default: RUNS)")
    p.add_argument("--seed", type=cli.seed, default=0, help="seed of the step-time draws")
    p.add_argument("--include-disturbed", action="store_true",
                   help="compare runs that other processes disturbed too (left out by default)")
    p.add_argument("--include-testbed-bound", action="store_true",
                   help="compare runs whose machine did not stay faithful too (testbed-bound, "
                        "real.records.testbed; left out by default)")
    p.add_argument("--link", default=None, type=cli.input_file,
                   help="cluster TOML of python -m calibrate.link: emulated-cluster records use its "
                        "latency and payload share of their own shaped rate")
    p.add_argument("--workloads", nargs="+", metavar="FILE_OR_DIR", type=cli.input_path,
                   help="workload files (or folders of them) for the records' models "
                        "(default: the profile's models, as workload files)")
    p.add_argument("--cluster", type=cli.input_file, help="cluster TOML for every record (default: each record's "
                                     "own environment)")
    return p


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


def run(args) -> int:
    from cli import print_out, usage_error
    skipped: list = []
    try:
        prof = profiles.load(args.profile) if args.profile else profiles.load_default()
        link = load_link_calibration(args.link) if args.link else None
        cluster = load_cluster(args.cluster) if args.cluster else None
        df = compare(args.runs, prof, args.seed, link, args.workloads, cluster,
                     args.include_disturbed, skipped,
                     ("testbed-bound",) if args.include_testbed_bound else ())
    except (profiles.ProfileError, ConfigError) as e:
        return usage_error(PROG, str(e))
    if df.empty:
        left = df.attrs.get("left_out", {})
        if skipped:
            where, why = skipped[0]
            return usage_error(PROG, f"no usable run records in {args.runs} ({len(skipped)} "
                                     f"left out; {where}: {why})")
        return usage_error(PROG, f"no completed run records in {args.runs}" + (
            f" left to compare: {record.left_out_note(left, sum(left.values()), LEFT_OUT_FLAGS)}"
            if left else ""))
    for where, why in skipped:
        print(f"compare: skipped {where}: {why}", file=sys.stderr)
    paths = write_outputs(df, Path(args.out or args.runs))     # files first: `| head` keeps them
    from contracts.quality import warning
    weak = dict.fromkeys(warning(prof, m) for m in sorted(set(df["model"])))
    notes = [n for n in (disturbed_note(df), df.attrs.get("settings", ""), *weak) if n]
    print_out(format_table(df), "", format_errors(error_summary(df)), *notes)
    print(f"\nwrote {', '.join(str(p) for p in paths)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
