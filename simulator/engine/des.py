"""The SimPy engine: hosts, workers, network and server as simulated resources.

One ``simpy.Environment`` per run; each rank is a SimPy process running its
scheme's loop (``model.schemes``); compute shares the hosts' cores
(``model.hardware``), messages cross the routes at the chosen fidelity
(``model.comm``). Handles every scheme and fidelity.

Imports: SimPy, contracts, simulator.model, engine (placement, result).
"""
from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import simpy

from contracts.cluster import Cluster
from contracts.profile import Profile
from contracts.workload import Workload
from simulator.engine.placement import Layout
from simulator.engine.result import Result, build_result
from simulator.engine.steady import checkpoints, extrapolate, stable_pace, window
from simulator.model.comm import make_comm
from simulator.model.hardware.cores import CoreHost
from simulator.model.hardware.host import Host
from simulator.model.hardware.interference import Interference
from simulator.model.recorder import Recorder
from simulator.model.schedule_log import ScheduleLog
from simulator.model.schemes.base import Setup
from simulator.model.server import ParameterServer
from simulator.model.worker import Worker




def events_scheduled(env: simpy.Environment) -> int:
    """How many events SimPy has scheduled so far (its event id counter)."""
    return next(env._eid)            # noqa: SLF001  (SimPy keeps no public counter)


def _host(env, index: int, cluster: Cluster, workload: Workload, profile: Profile):
    """Per-core run queues where measured and every process has one thread; else fluid."""
    if profile.balance_delay_s > 0 and workload.threads_per_worker == 1:
        return CoreHost(env, index, cluster.cores_per_host, profile.sharing_efficiency,
                        profile.balance_delay_s, profile.wake_wait_s, profile.balance_delays_s)
    return Host(env, index, cluster.cores_per_host, profile.sharing_efficiency)


def simulate_des(run: Layout, cfg, plan, workload, seed, steps, trace,
                 steady: str | None = None, eval_every: int | None = None) -> Result:
    """The SimPy run. A long run of a scheme whose ranks meet every iteration is cut
    short and extrapolated (``engine.steady``; asynchronous schemes drift too slowly
    into their steady state): ``steady="window"`` simulates a fixed window of its
    iterations (cores not oversubscribed: the steps repeat), ``"until-stable"`` runs
    until the pace of its steps is known within half a percent (oversubscribed cores).
    ``eval_every`` not None: keep the update schedule too, with evaluation points every
    ``eval_every`` iterations of the evaluating worker (0: at epoch ends only); a
    schedule has every iteration, so such a run is simulated whole."""
    spec = run.spec
    period = plan.avg_every     # K of the schemes that exchange every K steps, else 0
    whole = trace or eval_every is not None or not (steady and spec.lock_step)
    n, checked_events = None, 0
    if not whole and steady == "window":
        n = window(plan.iterations, period)
    elif not whole and steady == "until-stable" and period <= 1:
        checked = _run(run, cfg, plan, workload, seed, steps, trace,
                       checks=checkpoints(plan.iterations))
        if checked.stable_at is None:          # never stable: it ran whole
            return checked.result
        n, checked_events = checked.stable_at, checked.events
    if n is None:
        return _run(run, cfg, plan, workload, seed, steps, trace,
                    eval_every=eval_every).result
    short = replace(plan, iterations=n)
    window_run = _run(run, cfg, short, workload, seed,
                      [s[:n] for s in steps], trace, watch=(n // 2, n))
    result = extrapolate(window_run.result, window_run.recorder, n, plan.iterations,
                         plan.worker_ranks)
    return replace(result, events=result.events + checked_events)


class _Run(NamedTuple):
    """What one SimPy run gave: its Result and Recorder, or (``stable_at`` set) the step
    count at which its pace was stable, where it stopped without a Result."""
    result: Result | None
    recorder: Recorder
    stable_at: int | None = None
    events: int = 0


def _run(run: Layout, cfg, plan, workload, seed, steps, trace, watch=(),
         eval_every: int | None = None, checks: list[int] = ()) -> _Run:
    """Build and run the SimPy model; with ``checks``, a run whose pace is stable at one
    of those step counts stops there (``_Run.stable_at``, no Result)."""
    spec, cluster, profile, placement = run.spec, run.cluster, run.profile, run.placement
    env = simpy.Environment()
    pools = [_host(env, c, cluster, workload, profile) for c in range(cluster.core_pools)]
    hosts = [pools[cluster.core_pool_of(h)] for h in range(cluster.hosts)]   # compute side
    log = None if eval_every is None else ScheduleLog(
        workload.iterations_per_epoch(plan.workers), plan.iterations, eval_every, plan.workers)
    recorder = Recorder(placement, trace=trace, schedule=log)
    recorder.watch = watch
    comm = make_comm(cfg.fidelity, env, run.routes, run.transport, recorder)
    workers = [Worker(r, hosts[placement[r]], workload.threads_per_worker, steps[i], spec.polls)
               for i, r in enumerate(plan.worker_ranks)]
    if not spec.polls and cluster.device is None:   # sleeping ranks take cores for their
        comm.hosts = {w.rank: w.host for w in workers}  # calls' CPU (devices: none)
    extra = {}
    slowdown = (cluster.hardware.slowdown_at(plan.precision) if cluster.device is not None
                else 0.0)
    if slowdown > 0 and spec.overlaps_backward:       # one compute slot per device
        extra["interference"] = Interference(env, slowdown)
        for w in workers:
            w.interference = extra["interference"]
    server = None
    if plan.server_rank is not None:
        server = ParameterServer(env, plan.server_rank, hosts[placement[plan.server_rank]],
                                 plan.server_update_s, polls=spec.polls,
                                 idle_curve=plan.server_idle_curve,
                                 sleeps=comm.transport.poll_s > 0)
    if comm.hosts is None and not extra:    # (no calls' wake-ups, no device slot)
        _dedicate(pools, run, cluster)
    spec.start(env, Setup(plan, workers, comm, recorder, server, extra))
    stable_at = _until_stable(env, recorder, plan.workers, checks)
    if stable_at is not None:
        return _Run(None, recorder, stable_at, events_scheduled(env))
    p = plan.workers
    bytes_sent = sum(comm.network.bytes_sent) if hasattr(comm, "network") else 0.0
    meta = {"scheme": spec.name, "workers": p, "seed": seed, "fidelity": cfg.fidelity}
    # a slowed compute leaves its timer behind when a collective starts or ends under it
    # (SimPy cannot cancel one): the run ends with its last update, not the last timer
    end_s = recorder.last_update_s if "interference" in extra else env.now
    ranks = plan.worker_ranks
    result = build_result(spec, cfg, plan, workload, seed, "des", end_s,
                          [recorder.compute_s[r] for r in ranks],
                          [recorder.comm_s[r] for r in ranks], [recorder.wait_s[r] for r in ranks],
                          dict(sorted(recorder.staleness.items())), events_scheduled(env),
                          bytes_sent, recorder.chrome_trace(meta) if trace else None,
                          log.sorted_events() if log else None)
    return _Run(result, recorder, events=result.events)


def _dedicate(pools, run: Layout, cluster: Cluster) -> None:
    """Pools of per-core run queues whose ranks have a core each for good compute without
    the queues (``CoreHost.dedicate``)."""
    ranks = [0] * len(pools)
    for host in run.placement:
        ranks[cluster.core_pool_of(host)] += 1
    for pool, count in zip(pools, ranks):
        if isinstance(pool, CoreHost):
            pool.dedicate(count)


def _until_stable(env: simpy.Environment, recorder: Recorder, workers: int,
                  checks: list[int]) -> int | None:
    """Run to the end (None), or until the pace of the steps is stable at one of the
    step counts ``checks`` (``engine.steady.stable_pace``): that count."""
    if checks:
        recorder.tracked = workers
        reached = {k: env.event() for k in checks}
        recorder.on_step_end = lambda k: reached[k].succeed() if k in reached else None
        for k in checks:
            env.run(until=reached[k])
            if stable_pace(recorder.step_end_s, k) is not None:
                return k
    env.run()
    return None
