"""Run one prediction: one scheme, P workers, a workload, a cluster, a profile, a seed.

``simulate(...) -> Result`` is the whole public entry point. It checks the
inputs (``ConfigError`` names the bad value), derives the ``Plan``, and runs
either the SimPy model (``engine="des"``: hosts, workers, network, server as
simulated resources) or, for synchronous schemes with analytic communication,
the vectorised fast path (``engine="fast"``, see ``fastpath``) which computes
the same thing without one event per message. ``engine="auto"`` picks the
fast path where it is exact (and for ``ddp`` only where no host is oversubscribed).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import simpy

from .comm import make_comm
from .config import Cluster, ConfigError, Heterogeneity, SchemeConfig, Workload, calibrated_cluster
from .cores import CoreHost
from .host import Host
from .network import Routes
from .plan import Plan, Setup, ddp_buckets
from .profile import Profile, ProfileError
from .recorder import Recorder
from .schemes import SCHEMES, Scheme
from .server import ParameterServer
from .timeslice import handoff_s
from .worker import Worker, draw_step_times, speed_factors


@dataclass(frozen=True)
class Result:
    """A prediction for one scheme and P. Times in seconds; per-worker figures are means."""
    scheme: str
    workers: int
    engine: str                      # des | fast
    fidelity: str                    # analytic | message
    seed: int
    time_s: float                    # simulated wall time of all iterations
    iterations_per_worker: int
    iterations_per_epoch: int
    epoch_s: float                   # time_s scaled to one epoch
    compute_s: float                 # mean per worker over the run
    comm_s: float
    wait_s: float
    compute_s_per_worker: tuple[float, ...] = ()
    comm_s_per_worker: tuple[float, ...] = ()
    wait_s_per_worker: tuple[float, ...] = ()
    staleness: dict[int, int] = field(default_factory=dict)   # updates in between -> count
    events: int = 0                  # SimPy events scheduled (0 on the fast path)
    bytes_sent: float = 0.0          # message fidelity only
    trace: dict | None = field(default=None, compare=False, repr=False)

    @property
    def mean_staleness(self) -> float:
        n = sum(self.staleness.values())
        return sum(k * v for k, v in self.staleness.items()) / n if n else 0.0


def events_scheduled(env: simpy.Environment) -> int:
    """How many events SimPy has scheduled so far (its event id counter)."""
    return next(env._eid)            # noqa: SLF001  (SimPy keeps no public counter)


def resolve_scheme(scheme: str | SchemeConfig) -> tuple[Scheme, SchemeConfig]:
    cfg = scheme if isinstance(scheme, SchemeConfig) else SchemeConfig(name=scheme)
    if cfg.name not in SCHEMES:
        raise ConfigError(f"unknown scheme {cfg.name!r} (choose from {', '.join(SCHEMES)})")
    return SCHEMES[cfg.name], cfg


def make_plan(spec: Scheme, cfg: SchemeConfig, workers: int, workload: Workload,
              profile: Profile) -> Plan:
    model = _model(profile, workload.model)
    shm = profile.transport(spec.backend)
    return Plan(
        workers=workers,
        iterations=workload.iterations_per_worker(workers),
        worker_ranks=tuple(range(workers)),
        param_count=model.param_count,
        tensor_bytes=tuple(4 * c for c in model.tensor_counts) or (model.grad_bytes,),
        backward_fraction=model.backward_fraction,
        buckets=ddp_buckets(model, cfg.bucket_bytes),
        avg_every=cfg.avg_every,
        algorithm=cfg.algorithm,
        # hogwild: each update reads and writes the shared weights once more
        hogwild_update_s=2 * model.grad_bytes * shm.beta_s_per_byte,
        server_rank=workers if spec.extra_rank else None,
        mix_s=profile.server.update_s(model.param_count),   # v <- (1 - a) v + a w: one update
    )


def _model(profile: Profile, name: str):
    try:
        return profile.model(name)
    except ProfileError as e:
        raise ConfigError(str(e)) from None


def default_threads(spec: Scheme, cluster: Cluster, workers: int) -> int:
    """floor(cores / ranks on the busiest host), at least 1: what real.train picks."""
    ranks = workers + (1 if spec.extra_rank else 0)  # the parameter server is a rank too
    per_host = ranks if cluster.shared_cores else max(np.bincount(cluster.placement_of(ranks)))
    return max(1, cluster.cores_per_host // int(per_host))


def check(spec: Scheme, workers: int, cluster: Cluster) -> None:
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"workers must be an integer of at least 1 (got {workers!r})")
    if spec.single_worker and workers != 1:
        raise ConfigError(f"scheme {spec.name!r} runs on exactly 1 worker (got {workers})")
    if spec.single_host and cluster.hosts > 1:
        raise ConfigError(f"scheme {spec.name!r} needs shared memory on one host, "
                          f"but the cluster has {cluster.hosts} hosts")


def simulate(scheme: str | SchemeConfig, workers: int, workload: Workload = Workload(),
             cluster: Cluster | None = None, profile: Profile | None = None, seed: int = 0,
             heterogeneity: Heterogeneity = Heterogeneity(), trace: bool = False) -> Result:
    """Predict one run of ``scheme`` on ``workers`` workers. See ``Result`` for the fields."""
    if profile is None:
        from .profile import load_default
        profile = load_default()
    spec, cfg = resolve_scheme(scheme)
    cluster = cluster or calibrated_cluster(profile.cores)
    check(spec, workers, cluster)
    if workload.threads_per_worker is None:
        workload = replace(workload, threads_per_worker=default_threads(spec, cluster, workers))
    plan = make_plan(spec, cfg, workers, workload, profile)
    fit = _model(profile, workload.model).step_fit(workload.threads_per_worker)
    speeds = speed_factors(workers, heterogeneity, seed)
    steps = [draw_step_times(fit, workload.batch_per_worker, speeds[r], plan.iterations, seed, r)
             for r in range(workers)]
    if _use_fast(spec, cfg, cluster, workers, workload, profile, trace):
        from .fastpath import simulate_fast
        return simulate_fast(spec, cfg, plan, workload, cluster, profile, seed, np.array(steps))
    return _simulate_des(spec, cfg, plan, workload, cluster, profile, seed, steps, trace)


def _use_fast(spec, cfg, cluster, workers, workload, profile, trace) -> bool:
    if cfg.engine == "des" or trace:
        return False
    ok = spec.synchronous and cfg.fidelity == "analytic"
    if cfg.engine == "fast" and not ok:
        raise ConfigError(f"the fast path runs synchronous schemes with analytic communication "
                          f"only, not {spec.name!r} with {cfg.fidelity!r}")
    if spec.name == "ddp" and cfg.engine == "auto":
        per_host = int(max(np.bincount([cluster.core_pool_of(h)
                                        for h in cluster.placement_of(workers)])))
        ok = ok and per_host * workload.threads_per_worker <= cluster.cores_per_host and all(
            profile.sharing_efficiency(k) == 1.0 for k in range(1, per_host + 1))
        # the buckets' CPU (cpu_fraction) and their woken threads (wake_wait_s) share the
        # cores with the backward still running
        ok = ok and (workers == 1 or (profile.transport(spec.backend).cpu_fraction == 0
                                      and profile.wake_wait_s == 0))
    # the fast path shares cores as a fluid: per-core queues need events once oversubscribed
    if profile.balance_delay_s > 0 and workload.threads_per_worker == 1:
        per_pool = max(np.bincount([cluster.core_pool_of(h)
                                    for h in _placement(spec, cluster, workers)]))
        ok = ok and (per_pool <= cluster.cores_per_host or cfg.engine == "fast")

    return ok


def _placement(spec: Scheme, cluster: Cluster, workers: int) -> tuple[int, ...]:
    placement = cluster.placement_of(workers)
    if spec.extra_rank:
        return placement + (cluster.host_of(workers),)
    return placement


def handoffs(spec: Scheme, cluster: Cluster, placement: tuple[int, ...], workers: int,
             profile: Profile) -> tuple[float, ...]:
    """Per rank: the mean wait of a message to it for its turn on a core (``timeslice``).
    Only a polling receiver waits: it is runnable already and queues behind the busy
    processes of its core, each of which counts (MPI ranks poll between steps). A
    receiver that sleeps (gloo) is woken by the message and, inside a call where
    its peers sleep too, gets a core at once; what it pays is the CPU its calls
    need (``Transport.cpu_fraction``, shared like compute), and, leaving a call
    while every core computes, its wait for the scheduler (``CoreHost.wake``)."""
    if not spec.polls:
        return (0.0,) * len(placement)
    pools = [cluster.core_pool_of(h) for h in placement]
    per_pool = np.bincount(pools)
    return tuple(handoff_s(int(per_pool[p]), cluster.cores_per_host, profile.scheduler_quantum_s)
                 for p in pools)


def _host(env, index: int, cluster: Cluster, workload: Workload, profile: Profile):
    """Per-core run queues where measured and every process has one thread; else fluid."""
    if profile.balance_delay_s > 0 and workload.threads_per_worker == 1:
        return CoreHost(env, index, cluster.cores_per_host, profile.sharing_efficiency,
                        profile.balance_delay_s, profile.wake_wait_s, profile.balance_delays_s)
    return Host(env, index, cluster.cores_per_host, profile.sharing_efficiency)


def _simulate_des(spec, cfg, plan, workload, cluster, profile, seed, steps, trace) -> Result:
    env = simpy.Environment()
    placement = _placement(spec, cluster, plan.workers)
    pools = [_host(env, c, cluster, workload, profile) for c in range(cluster.core_pools)]
    hosts = [pools[cluster.core_pool_of(h)] for h in range(cluster.hosts)]   # compute side
    recorder = Recorder(placement, trace=trace)
    routes = Routes(placement, cluster.link, profile.transport(spec.backend),
                    handoffs(spec, cluster, placement, plan.workers, profile))
    comm = make_comm(cfg.fidelity, env, routes, profile.transport(spec.backend), recorder)
    workers = [Worker(r, hosts[placement[r]], workload.threads_per_worker, steps[r], spec.polls)
               for r in range(plan.workers)]
    if not spec.polls:               # sleeping ranks take cores for their calls' CPU
        comm.hosts = {w.rank: w.host for w in workers}
    server = None
    if plan.server_rank is not None:
        server = ParameterServer(env, plan.server_rank, hosts[placement[plan.server_rank]],
                                 profile.server, plan.param_count,
                                 polls=spec.polls)
    spec.start(env, Setup(plan, workers, comm, recorder, server))
    env.run()
    p = plan.workers
    bytes_sent = sum(comm.network.bytes_sent) if hasattr(comm, "network") else 0.0
    meta = {"scheme": spec.name, "workers": p, "seed": seed, "fidelity": cfg.fidelity}
    return _result(spec, cfg, plan, workload, seed, "des", env.now,
                   recorder.compute_s[:p], recorder.comm_s[:p], recorder.wait_s[:p],
                   dict(sorted(recorder.staleness.items())), events_scheduled(env), bytes_sent,
                   recorder.chrome_trace(meta) if trace else None)


def _result(spec, cfg, plan, workload, seed, engine, time_s, compute, comm, wait,
            staleness, events, bytes_sent, trace) -> Result:
    per_epoch = workload.iterations_per_epoch(plan.workers)
    return Result(
        scheme=spec.name, workers=plan.workers, engine=engine, fidelity=cfg.fidelity,
        seed=seed, time_s=float(time_s), iterations_per_worker=plan.iterations,
        iterations_per_epoch=per_epoch, epoch_s=float(time_s) * per_epoch / plan.iterations,
        compute_s=float(np.mean(compute)), comm_s=float(np.mean(comm)),
        wait_s=float(np.mean(wait)),
        compute_s_per_worker=tuple(map(float, compute)),
        comm_s_per_worker=tuple(map(float, comm)), wait_s_per_worker=tuple(map(float, wait)),
        staleness=staleness, events=events, bytes_sent=float(bytes_sent), trace=trace)
