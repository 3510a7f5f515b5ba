"""What each mechanism of accelerator hosts costs a prediction, and where its number came from.

``mechanisms(job, cluster, workers=P)`` lists, for a sweep on accelerator hosts (``Sweep``;
the cluster at P, by default its largest; ``by_workers``: at each of its P), the
mechanisms the engines apply there, each as a dict: its name,
what it costs in this prediction (``cost``), which schemes pay it (``schemes``), and the
source of its number (a preset's or cluster file's ``source`` field, or the workload
file). The same functions price them as the engines do:

* compute beside NCCL (``hardware.interference``; ``Hardware.slowdown_at`` the precision);
* DDP's exposed last bucket (``model.workload.ddp_buckets``; its allreduce at P by
  ``engine.fast.collective_s``, the analytic price of a collective);
* the step in the precision asked for (``contracts.workload.at_precision``);
* DDP's own calls (``hardware.ddp_calls``; ``engine.run.with_ddp_calls``);
* the input pipeline (``hardware.input_pipeline``; ``engine.run.input_bound``);
* the optimizer's step, which a measured step holds, once every
  ``Workload.accumulation_steps`` iterations (``hardware.optimizer_step``;
  ``engine.run.with_optimizer_step``), and with ``Workload.no_sync`` DDP's gradients
  crossing once in as many (``engine.no_sync``).

Nothing here changes a prediction: it says what the engines did. CPU hosts: an empty list.
Imports: numpy, contracts, simulator.engine (fast, no_sync, placement, run), simulator.model.
"""
from __future__ import annotations

from contracts.cluster import Cluster
from simulator.engine.fast import collective_s
from simulator.engine.no_sync import sync_every
from simulator.engine.run import make_plan, optimizer_step_s
from simulator.model.hardware.ddp_calls import ddp_step_s
from simulator.model.hardware.input_pipeline import input_step_s
from simulator.model.hardware.optimizer_step import sgd_ops_bytes, zero_ops_bytes
from simulator.model.schemes import SCHEMES

SERVER_SCHEMES = tuple(n for n, s in SCHEMES.items() if s.server)


def mechanisms(job, cluster: Cluster, provenance=(), workers: int | None = None
               ) -> list[dict]:
    """The mechanisms of ``job`` (a laid-out ``engine.sweep.Sweep``) at P = ``workers``
    (None: its largest) on ``cluster``, the cluster at that P, and ``provenance``
    (``engine.machine.Machine``'s rows, which say where the step came from); [] where the
    hosts have no accelerator."""
    if cluster.device is None:
        return []
    p = workers or max(pt.workers for pt in job.points)
    model = job.profile.model(job.workload.model)
    names = list(dict.fromkeys(pt.scheme.name for pt in job.points))
    ddp = [i for i, pt in enumerate(job.points) if pt.scheme.name == "ddp"]
    at_p = [i for i in ddp if job.points[i].workers == p]
    rows = [_interference(cluster, model, names), _precision(model, job, provenance)]
    if ddp:
        index = (at_p or ddp)[-1]
        every = sync_every(job.layouts[index], job.workload)   # as the engines take it
        rows += [_last_bucket(job, model, index, every), _ddp_calls(cluster, model, every)]
    rows += [_input(cluster, model, job, p), _optimizer(cluster, model, job, names)]
    return [r for r in rows if r]


def by_workers(job, cluster_at, provenance=()) -> dict[str, list[dict]]:
    """``mechanisms`` at each P of ``job`` (``cluster_at(P)``: the cluster its ranks
    take), keyed by P as text (a json object's keys)."""
    ps = sorted({pt.workers for pt in job.points})
    return {str(p): mechanisms(job, cluster_at(p), provenance, p) for p in ps}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def _interference(cluster: Cluster, model, names) -> dict:
    hw, precision = cluster.hardware, model.precision
    field = (f"nccl.compute_slowdown_{precision}"
             if precision in dict(hw.precision_slowdowns) else "nccl.compute_slowdown")
    over = [n for n in names if SCHEMES[n].overlaps_backward]
    return {"mechanism": "compute beside NCCL",
            "cost": f"the backward {hw.slowdown_at(precision):.1%} slower while a collective "
                    f"is in flight ({precision})",
            "schemes": ", ".join(over) or "none asked (ddp, horovod overlap the backward)",
            "source": cluster.source_of(field) or "the cluster file"}


def _precision(model, job, provenance) -> dict:
    fit = model.step_fit(job.workload.threads_per_worker or 1)
    row = next((r for r in provenance if r["quantity"] == f"{model.model}: step time"), None)
    return {"mechanism": f"the step in {model.precision}",
            "cost": row["value"] if row else (
                f"{_ms(fit.step_s(job.workload.batch_per_worker))} per "
                f"{job.workload.batch_per_worker} samples on {cluster_device(job)}"),
            "schemes": "every scheme",
            "source": row["origin"] if row else "the profile"}


def cluster_device(job) -> str:
    return job.layouts[0].cluster.device.name if job.layouts else "the device"


def _last_bucket(job, model, index: int, every: int) -> dict:
    run, pt = job.layouts[index], job.points[index]
    plan = make_plan(run.spec, pt.scheme, pt.workers, job.workload, run.profile)
    last = plan.buckets[-1][0]
    cost = (collective_s(run, "allreduce", plan.worker_ranks, last, plan.gradient_algorithm)
            if pt.workers > 1 else 0.0)
    how = "an iteration" if every <= 1 else f"once every {every} iterations (no_sync())"
    return {"mechanism": "DDP's exposed last bucket",
            "cost": f"{last / 2**20:.3g} MiB allreduced after the backward ends: "
                    f"{_ms(cost)} {how} at P = {pt.workers} ({len(plan.buckets)} "
                    f"buckets of --bucket-mb {pt.scheme.bucket_bytes / 2**20:g})",
            "schemes": "ddp",
            "source": "torch's Reducer (c10d/reducer.cpp, rebuild_buckets): buckets in "
                      "gradient-ready order, the last ready when the backward ends; "
                      "model.workload.ddp_buckets"}


def _ddp_calls(cluster: Cluster, model, every: int) -> dict:
    d = cluster.device
    s = ddp_step_s(len(model.tensor_counts), model.buffer_count, d.ddp_buffer_s,
                   d.ddp_gradient_s)
    tensors = "" if every <= 1 else f" (the tensors once every {every} steps: no_sync())"
    return {"mechanism": "DDP's own calls",
            "cost": f"{_ms(s)} a step: {model.buffer_count} buffers x "
                    f"{d.ddp_buffer_s * 1e6:.3g} us + {len(model.tensor_counts)} tensors x "
                    f"{d.ddp_gradient_s * 1e6:.3g} us" + tensors,
            "schemes": "ddp",
            "source": _sources(cluster, "device.ddp_buffer", "device.ddp_gradient")}


def _input(cluster: Cluster, model, job, workers: int) -> dict:
    row = {"mechanism": "input pipeline", "schemes": "every scheme"}
    if model.input_s_per_sample <= 0:
        return row | {"cost": "not applied: the workload gives no measured.input_per_sample",
                      "source": "-"}
    if cluster.cpu_cores <= 0:
        return row | {"cost": "not applied: the cluster names no cpu_cores", "source": "-"}
    ranks = min(workers, cluster.ranks_per_host or cluster.cores_per_host)
    floor = input_step_s(job.workload.batch_per_worker, model.input_s_per_sample,
                         model.input_busy, model.input_s_per_sample_busy, model.input_workers,
                         ranks, cluster.cpu_cores)
    step = model.step_fit(job.workload.threads_per_worker or 1).step_s(
        job.workload.batch_per_worker)
    bound = "sets the step" if floor > step else "under the step"
    plural = "s" if ranks != 1 else ""
    return row | {"cost": f"a step at least {_ms(floor)} with {ranks} rank{plural} on a host's "
                          f"{cluster.cpu_cores} cores ({bound}, {_ms(step)})",
                  "source": "the workload file (measured.input_per_sample); "
                            + _sources(cluster, "cluster.cpu_cores")}


def _optimizer(cluster: Cluster, model, job, names) -> dict:
    every = job.workload.accumulation_steps
    paying = ", ".join(n for n in names if n not in SERVER_SCHEMES) or "none asked"
    row = {"mechanism": "optimizer step", "schemes": paying + " (the parameter server "
           "updates in ps_sync, ps_async)"}
    once = (f"in the step, every iteration" if every <= 1 else
            f"once every {every} iterations: each step {{}} shorter")
    step = model.step_fit(job.workload.threads_per_worker or 1).step_s(
        job.workload.batch_per_worker)
    if model.update_fraction > 0:
        u = model.update_fraction * step
        return row | {"cost": f"{_ms(u)} measured, " + once.format(_ms(u * (1 - 1 / every))),
                      "source": "the workload file (measured.update)"}
    u = optimizer_step_s(model, cluster.device)
    if u <= 0:
        return row | {"cost": "in the step as measured (the device gives no memory_bandwidth "
                              "to price it)", "source": "-"}
    counts = list(model.tensor_counts)
    calls = len(sgd_ops_bytes(counts, [])) + len(zero_ops_bytes(counts))
    how = ("one by one after found_inf.item()" if model.precision == "amp"
           else "queued behind the backward")
    return row | {"cost": f"{_ms(u)} modelled ({calls} calls of SGD with momentum and "
                          f"zero_grad, {how}), " + once.format(_ms(u * (1 - 1 / every))),
                  "source": _sources(cluster, "device.memory_bandwidth", "device.host_call")}


def _sources(cluster: Cluster, *fields: str) -> str:
    return "; ".join(f"{f.split('.')[-1]}: {cluster.source_of(f) or 'the cluster file'}"
                     for f in fields)
