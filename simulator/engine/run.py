"""Run one prediction: one scheme, P workers, a workload, a cluster, a profile, a seed.

``simulate(...) -> Result`` is the whole public entry point. It checks the
inputs (``ConfigError`` names the bad value), resolves the cluster once
(``placement.layout``: backend, hardware, placement, routes; ``simulate_on`` takes a
cluster resolved beforehand, as a sweep's points carry it), derives the ``Plan``, and runs
either the SimPy model (``engine="des"``: hosts, workers, network, server as
simulated resources) or, for synchronous schemes with analytic communication,
the vectorised fast path (``engine="fast"``, see ``engine.fast``) which computes
the same thing without one event per message. ``engine="auto"`` picks the
fast path where it is exact (and for ``ddp`` only where no host is oversubscribed).

Imports: numpy, contracts, simulator.model (comm.iallreduce, config, schemes, workload), engine
(des, fast, placement, result).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from contracts.checks import ConfigError
from contracts.cluster import Cluster
from contracts.profile import Profile, ProfileError
from contracts.workload import Workload
from simulator.engine.des import simulate_des
from simulator.engine.fast import FAST_EXCHANGES, simulate_fast
from simulator.engine.fidelity import auto_fidelity
from simulator.engine.no_sync import grouped, per_micro_step, sync_every, sync_steps
from simulator.engine.placement import Layout, layout
from simulator.engine.result import Result
from simulator.model.comm.iallreduce import polled
from simulator.model.config import Heterogeneity, SchemeConfig
from simulator.model.hardware.ddp_calls import ddp_buffers_s, ddp_gradients_s
from simulator.model.hardware.input_pipeline import input_step_s
from simulator.model.hardware.optimizer_step import sgd_step_s
from simulator.model.schemes import SCHEMES, Scheme
from simulator.model.workload import (
    Plan,
    ddp_buckets,
    ddp_first_buckets,
    draw_step_times,
    ready_tensors,
    speed_factors,
)


def resolve_scheme(scheme: str | SchemeConfig) -> tuple[Scheme, SchemeConfig]:
    cfg = scheme if isinstance(scheme, SchemeConfig) else SchemeConfig(name=scheme)
    if cfg.name not in SCHEMES:
        raise ConfigError(f"unknown scheme {cfg.name!r} (choose from {', '.join(SCHEMES)})")
    return SCHEMES[cfg.name], cfg


def make_plan(spec: Scheme, cfg: SchemeConfig, workers: int, workload: Workload,
              profile: Profile) -> Plan:
    model = _model(profile, workload.model)
    shm = profile.transport(spec.backend)
    grad = 2.0 if cfg.compression == "fp16" else model.bytes_per_param
    flat = model.param_count * model.bytes_per_param     # the schemes' flat float32 vector
    return Plan(
        workers=workers,
        iterations=workload.iterations_per_worker(workers),
        worker_ranks=spec.worker_ranks(workers),
        param_count=model.param_count,
        tensor_bytes=tuple(int(grad * c) for c in model.tensor_counts) or (model.grad_bytes,),
        backward_fraction=model.backward_fraction,
        buckets=ddp_buckets(model, cfg.bucket_bytes, grad),
        first_buckets=ddp_first_buckets(model, grad),
        avg_every=spec.averaging_every(cfg.avg_every),   # K resolved: the run's or the default
        algorithm=cfg.algorithm,
        # hogwild: each update reads and writes the shared weights once more
        hogwild_update_s=2 * model.grad_bytes * shm.beta_s_per_byte,
        server_rank=spec.server_rank(workers),
        server_update_s=model.server_s(profile.server),
        server_idle_curve=model.server_idle_curve,
        # v <- (1 - a) v + a w (real.schemes.async_avg.Holder.mix): v *= in place, a * w into
        # a new numpy array (numpy asks for huge pages from 4 MiB on: madvise in its
        # alloc.c, so not a fresh tensor's page faults), v += in place: three passes over
        # the vector; by the parameter line where the host's copies are not measured
        mix_s=(3 * profile.copy_s(flat, False) if profile.copy_s_per_byte
               else profile.server.update_s(model.param_count)),
        new_copy_s=profile.copy_s(flat, True),
        kept_copy_s=profile.copy_s(flat, False),
        bytes_per_param=model.bytes_per_param,
        grad_bytes_per_param=grad,
        gradient_algorithm="ring" if spec.backend == "gloo" else cfg.algorithm,
        ready_tensors=ready_tensors(model, grad),
        fusion_bytes=cfg.fusion_bytes,
        cycle_s=cfg.cycle_s,
        negotiation_s=cfg.negotiation_s,
        requests_ahead=cfg.requests_ahead,
        horovod_groups=cfg.horovod_groups,
        precision=model.precision,
    )


def _model(profile: Profile, name: str):
    try:
        return profile.model(name)
    except ProfileError as e:
        raise ConfigError(str(e)) from None


def simulate(scheme: str | SchemeConfig, workers: int, workload: Workload, cluster: Cluster,
             profile: Profile | None = None, seed: int = 0,
             heterogeneity: Heterogeneity = Heterogeneity(), trace: bool = False,
             schedule: bool = False, eval_every: int = 0) -> Result:
    """Predict one run of ``scheme`` on ``workers`` workers on ``cluster`` (resolved by the
    caller: ``contracts.cluster.calibrated_cluster(profile.cores)`` is the profile's own
    machine). See ``Result`` for the fields.

    ``schedule=True`` also keeps the update schedule (``Result.schedule``, the events of
    ``contracts.schedule``; SimPy engine only) with an evaluation point every
    ``eval_every`` iterations of the evaluating worker and at every epoch end.
    """
    if profile is None:
        from contracts.profile import load_default
        profile = load_default()
    spec, cfg = resolve_scheme(scheme)
    return simulate_on(layout(spec, cfg, workers, cluster, profile), cfg, workload, seed,
                       heterogeneity, trace, schedule, eval_every)


def simulate_on(run: Layout, cfg: SchemeConfig, workload: Workload, seed: int = 0,
                heterogeneity: Heterogeneity = Heterogeneity(), trace: bool = False,
                schedule: bool = False, eval_every: int = 0) -> Result:
    """``simulate`` on a cluster resolved beforehand for this scheme and P (``run``:
    ``placement.layout``, as every point of a resolved sweep carries it)."""
    spec, profile, workers = run.spec, run.profile, run.workers
    if workload.threads_per_worker is None:
        workload = replace(workload, threads_per_worker=run.threads)
    plan = make_plan(spec, cfg, workers, workload, profile)
    if cfg.fidelity == "auto":        # (the fast engine, asked for, is analytic)
        cfg = replace(cfg, fidelity="analytic" if cfg.engine == "fast"
                      else auto_fidelity(spec, plan, run.routes))
    fit = _model(profile, workload.model).step_fit(workload.threads_per_worker)
    speeds = speed_factors(workers, heterogeneity, seed)
    steps = [draw_step_times(fit, workload.batch_per_worker, speeds[r], plan.iterations, seed, r)
             for r in range(workers)]
    every, micro = sync_every(run, workload), plan.iterations
    steps = with_ddp_calls(steps, _model(profile, workload.model), run, every)
    steps, plan = with_optimizer_step(steps, plan, _model(profile, workload.model), run,
                                      workload.accumulation_steps)
    steps = input_bound(steps, _model(profile, workload.model), run, workload.batch_per_worker)
    if run.cluster.device is None:       # the profile's hosts: their loop, not a GPU's
        steps = with_loop(steps, profile.loop_s_per_step)
    if schedule and cfg.engine == "fast":
        raise ConfigError("the update schedule comes from the SimPy engine: use engine des or auto")
    if eval_every < 0:
        raise ConfigError(f"eval_every must be at least 0 (got {eval_every})")
    steps, plan = grouped(steps, plan, every, schedule)    # DDP's no_sync(): K in one
    if not schedule and _use_fast(run, cfg, workload, trace):
        result = simulate_fast(run, cfg, plan, workload, seed, np.array(steps))
    else:
        result = simulate_des(run, cfg, plan, workload, seed, steps, trace,
                              steady=("until-stable" if oversubscribed(run, workload)
                                      else "window"),
                              eval_every=eval_every if schedule else None)
    return per_micro_step(result, workload, micro, every)


def steady_iteration_s(scheme: str | SchemeConfig, workers: int, workload: Workload,
                       cluster: Cluster, profile: Profile | None = None,
                       seed: int = 0) -> float:
    """The time of an iteration once a run is under way, as published throughputs are
    measured (after warm-up, the setup outside them): ``(T(2I) - T(I)) / I`` for the
    workload's I iterations a worker, so that a run's one-time start (DDP's broadcast of
    the weights as it is built) and end cancel."""
    once = simulate(scheme, workers, workload, cluster, profile, seed)
    longer = replace(workload, iterations=2 * once.iterations_per_worker)
    twice = simulate(scheme, workers, longer, cluster, profile, seed)
    return ((twice.time_s - once.time_s)
            / (twice.iterations_per_worker - once.iterations_per_worker))


def with_ddp_calls(steps, model, run: Layout, every: int = 1):
    """A DDP rank's steps on a device, each longer by what DDP's own calls add
    (``hardware.ddp_calls``: ``n_buffers * ddp_buffer_s + n_tensors * ddp_gradient_s``);
    under ``no_sync()`` (``every`` K > 1) the buffers' part every step, the gradients'
    only on the steps that exchange them (``no_sync.sync_steps``)."""
    device = run.cluster.device
    if run.spec.exchange != "buckets" or device is None:
        return steps
    buffers = ddp_buffers_s(model.buffer_count, device.ddp_buffer_s)
    grads = ddp_gradients_s(len(model.tensor_counts), device.ddp_gradient_s)
    if buffers + grads <= 0:
        return steps
    return [s + (buffers + grads * sync_steps(len(s), every)) for s in steps]


def optimizer_step_s(model, device) -> float:
    """One optimizer step of ``model`` on ``device`` (``hardware.optimizer_step.sgd_step_s``:
    SGD with momentum and weight decay on every tensor, one tensor at a time, then
    ``zero_grad``; torchvision's classification recipe decays every tensor unless
    ``--norm-weight-decay``); 0 where the device gives no memory bandwidth."""
    if device is None or device.memory_bytes_per_s <= 0:
        return 0.0
    return sgd_step_s([(n, True) for n in model.tensor_counts], model.precision,
                      device.memory_bytes_per_s, device.host_call_s)


def with_optimizer_step(steps, plan: Plan, model, run: Layout, every: int):
    """Each worker's steps when the optimizer steps once every ``every`` iterations, as a
    mean per iteration, on accelerator hosts where the workers step it (not a parameter
    server's): a measured step holds one update u (the workload file's measured share of
    it, ``model.update_fraction``, else ``optimizer_step_s``), so each is shorter by
    ``u (1 - 1 / every)``. The update runs after the gradients' exchange and
    before the next forward, so the backward keeps its mean length
    (``plan.backward_fraction`` rescaled). ``every`` 1: the steps as measured."""
    device = run.cluster.device
    if every <= 1 or device is None or run.spec.server:
        return steps, plan
    mean_s = float(np.mean([np.mean(s) for s in steps]))
    keep = 1 - 1 / every
    if model.update_fraction > 0:
        new = [s * (1 - model.update_fraction * keep) for s in steps]
    else:
        cut = optimizer_step_s(model, device) * keep
        if cut >= mean_s:
            raise ConfigError(f"the optimizer's step of {model.model} on {device.name} "
                              f"({cut / keep * 1e3:.3g} ms, modelled) is longer than the "
                              f"step that holds it ({mean_s * 1e3:.3g} ms): give the "
                              "workload file's measured.update")
        new = [s - cut for s in steps]
    new_mean = float(np.mean([np.mean(s) for s in new]))
    scale = mean_s / new_mean if new_mean > 0 else 1.0
    return new, replace(plan, backward_fraction=min(1.0, plan.backward_fraction * scale))


def input_bound(steps, model, run: Layout, batch: int):
    """Each rank's steps, at least what its input pipeline allows
    (``hardware.input_pipeline.input_step_s``: ``batch`` samples at the time a sample with
    the host's loader processes busy at once, on the rank's share of its host's
    ``cpu_cores``, at most one core for each of its ``input_workers``)."""
    if model.input_s_per_sample <= 0 or run.cluster.cpu_cores <= 0:
        return steps
    hosts = run.worker_hosts
    per_host = np.bincount(hosts)
    return [np.maximum(s, input_step_s(batch, model.input_s_per_sample, model.input_busy,
                                       model.input_s_per_sample_busy, model.input_workers,
                                       int(per_host[hosts[i]]), run.cluster.cpu_cores))
            for i, s in enumerate(steps)]


def with_loop(steps, loop_s: float):
    """Each worker's steps with the training loop's own Python (``Profile.loop_s_per_step``:
    the next batch, the progress line, between one step's communication and the next
    step's compute, in no iteration row) added, once a step. The rank runs it on the
    core it holds for its step, so it is part of the step's compute job (shared as the
    step is on a crowded host), not a job of its own that queues again for a core; DDP's
    backward fraction splits it as the rest of the step. Charged on the profile's own kind
    of host (a cluster without accelerators): where a GPU computes the step, the host's
    loop runs beside the device's queued work and is not this profile's to price."""
    if loop_s <= 0:
        return steps
    return [s + loop_s for s in steps]


def oversubscribed(run: Layout, workload: Workload) -> bool:
    """Whether some pool of cores has more threads to run than cores (the server too)."""
    return run.busiest_pool() * workload.threads_per_worker > run.cluster.cores_per_host


def _use_fast(run: Layout, cfg: SchemeConfig, workload: Workload, trace: bool) -> bool:
    spec, cluster, profile = run.spec, run.cluster, run.profile
    if cfg.engine == "des" or trace:
        return False
    ok = spec.synchronous and cfg.fidelity == "analytic" and spec.exchange in FAST_EXCHANGES
    # psgd's polled averages leave each rank at its own poll: the next steps start apart
    apart = bool(spec.exchange == "average" and polled(run.transport) and cfg.avg_every
                 and run.workers > 1)
    if cfg.engine == "fast" and apart:
        raise ConfigError("psgd's averages every K steps, waited in sleeping polls, let its "
                          "ranks go on apart: use engine des or auto")
    ok = ok and not apart
    if cfg.engine == "fast" and not ok:
        raise ConfigError(f"the fast path runs synchronous schemes with analytic communication "
                          f"only, not {spec.name!r} with {cfg.fidelity!r}")
    if spec.overlaps_backward and cfg.engine == "auto":
        per_host = int(max(np.bincount(run.worker_pools)))
        ok = ok and per_host * workload.threads_per_worker <= cluster.cores_per_host and all(
            profile.sharing_efficiency(k) == 1.0 for k in range(1, per_host + 1))
        # the buckets' CPU (cpu_fraction) and their woken threads (wake_wait_s) share the
        # cores with the backward still running
        ok = ok and (run.workers == 1 or (run.transport.cpu_fraction == 0
                                          and profile.wake_wait_s == 0))
    # the fast path shares cores as a fluid: per-core queues need events once oversubscribed
    if profile.balance_delay_s > 0 and workload.threads_per_worker == 1:
        ok = ok and (run.busiest_pool() <= cluster.cores_per_host or cfg.engine == "fast")

    return ok
