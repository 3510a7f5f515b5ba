"""What a prediction is asked, resolved once, before any engine runs.

``resolve(args) -> Question`` reads ``simulator.predict``'s flags and files in one pass:
the profile (``--profile``, else the one shipped), the cluster and where each of its
numbers came from (``describe.resolve_cluster``), the profile on the cluster's hardware
and the workload file (``describe.inputs``), the workload (model, batch, epoch, run
length), the schemes that can run on the cluster, and every point of the sweep
(``engine.sweep.Point``: a scheme, P, and the cluster its ranks take). What cannot be
meant or would not finish is refused here, before any simulation (``check_request``).
The engines then take ``Question.sweep`` and nothing else; the output takes the words.
``pipelines.replay`` resolves its own sweep with the same steps (``read_inputs``,
``workload_of``, ``runnable``, ``points_of``).

Imports: contracts, simulator.describe, simulator.engine (machine, placement, sweep),
simulator.model (config, schemes).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

from contracts import profile as profile_mod
from contracts.checks import ConfigError, fits_in_memory
from contracts.cluster import Cluster
from contracts.profile import Profile
from contracts.workload import Workload
from simulator import describe
from simulator.engine.machine import Machine
from simulator.engine.placement import check, resolve_backend
from simulator.engine.sweep import Point, Sweep
from simulator.model.config import ALGORITHMS, Heterogeneity, SchemeConfig
from simulator.model.schemes import SCHEMES

DATASETS = {"mnist": 60000, "fashion-mnist": 60000, "cifar10": 50000}
DEFAULT_MODEL, DEFAULT_BATCH, DEFAULT_DATASET = "cnn", 64, "fashion-mnist"


@dataclass(frozen=True)
class Question:
    """A prediction's inputs, resolved: ``sweep`` is all the engines take; the rest says
    where it came from.

    ``setting``: the cluster (``at(ranks)``) and, in words, whose hosts and which network;
    ``largest``: the cluster at the largest P's rank count; ``measured``: the profile as
    loaded, from ``origin`` (its file, or ``embedded``); ``provenance``: the origin of every
    number the profile on the hardware holds; ``schemes``: the schemes predicted, in order;
    ``workers``: the P asked for; ``dataset``: the training set's name (``DEFAULT_DATASET``
    when none is named), ``own_dataset_size`` whether ``--dataset-size`` gave its size,
    ``dataset_default`` whether a workload file's model is predicted on that default;
    ``overrides``: each flag that won over a file's own value; ``described``:
    whether numbers come from files or presets (said under the table)."""
    sweep: Sweep
    setting: describe.Setting
    largest: Cluster
    measured: Profile
    origin: str
    provenance: tuple[dict, ...]
    schemes: tuple[SchemeConfig, ...]
    workers: tuple[int, ...]
    dataset: str
    own_dataset_size: bool
    dataset_default: bool
    overrides: tuple[str, ...]
    described: bool

    def point(self, cfg: SchemeConfig, workers: int) -> Point:
        """One scheme at P workers on the cluster its ranks take."""
        return point(self.setting, cfg, workers)


def resolve(args) -> Question:
    """The question ``args`` asks, every file read and every value derived once; a
    ``ConfigError`` (or ``ProfileError``) names what is wrong before anything runs."""
    if args.dry_run and args.target_accuracy is None:
        raise ConfigError("--dry-run lists the training runs of --target-accuracy: give it too "
                          "(a prediction alone trains nothing)")
    given = read_inputs(args)
    setting, mach, wfile = given.setting, given.machine, given.workload_file
    batch, overrides = batch_size(args, wfile)
    dataset = args.dataset or DEFAULT_DATASET
    workload = workload_of(args, given.model, batch, dataset, args.dataset_size, mach.profile)
    het = Heterogeneity(speed_cv=args.heterogeneity, stragglers=args.stragglers,
                        straggler_slowdown=args.straggler_slowdown)
    largest = setting.at(max(args.workers))
    names = scheme_names(args, largest.device is not None)
    cfgs = configs(args, names)
    cfgs = runnable(cfgs, setting, args.schemes != ["all"], max(args.workers))
    job = Sweep(tuple(p for cfg in cfgs for p in points_of(setting, cfg, args.workers,
                                                          args.baseline)),
                workload, mach.profile, args.seed, het, args.baseline)
    if args.stragglers > max(args.workers):
        raise ConfigError(f"--stragglers {args.stragglers} is more than the "
                          f"{max(args.workers)} workers of the largest P")
    check_request(job, largest)
    return Question(job, setting, largest, given.measured, given.origin, mach.provenance,
                    tuple(cfgs), tuple(args.workers), dataset, args.dataset_size is not None,
                    bool(wfile) and not (args.dataset or args.dataset_size),
                    tuple(overrides) + setting.overrides,
                    bool(args.workload or args.preset or args.cluster))


@dataclass(frozen=True)
class Inputs:
    """The files a prediction reads, each once: the profile as loaded (``measured``, from
    ``origin``: its file, or ``embedded``), the cluster (``setting``), the profile on the
    cluster's hardware with the workload file's model (``machine``), the model's name (None:
    ``DEFAULT_MODEL``) and the workload file (None where none is given)."""
    measured: Profile
    origin: str
    setting: describe.Setting
    machine: Machine
    model: str | None
    workload_file: object | None


def read_inputs(args) -> Inputs:
    """The profile (``--profile``, else the one shipped), the cluster its flags and files
    describe (``describe.resolve_cluster``) and the profile on its hardware
    (``describe.inputs``): the first steps of ``resolve`` and of ``pipelines.replay``."""
    measured = profile_mod.load(args.profile) if args.profile else profile_mod.load_default()
    origin = args.profile or "embedded"
    setting = describe.resolve_cluster(args, measured, origin)
    return Inputs(measured, origin, setting,
                  *describe.inputs(args, measured, origin, setting.cluster))


def workload_of(args, model: str | None, batch: int, dataset: str, samples: int | None,
                profile: Profile) -> Workload:
    """The run simulated: ``model`` (None: ``DEFAULT_MODEL``), ``batch`` samples per step per
    worker, a training set of ``samples`` (None: ``dataset``'s size, 60,000 for one not in
    ``DATASETS``), ``--epochs`` (or ``--iterations``) and ``--threads``; a model the profile
    lacks is refused here."""
    workload = Workload(model=DEFAULT_MODEL if model is None else model, batch_per_worker=batch,
                        dataset_samples=samples or DATASETS.get(dataset, 60000),
                        epochs=args.epochs, iterations=getattr(args, "iterations", None),
                        threads_per_worker=args.threads)
    profile.model(workload.model)
    return workload


def batch_size(args, wfile) -> tuple[int, list[str]]:
    """Samples per step per worker: ``--batch-size``, else the workload file's own, else
    the default; the flag over the file's value is said."""
    if wfile is None:
        return args.batch_size or DEFAULT_BATCH, []
    if args.batch_size is None or args.batch_size == wfile.batch_size:
        return wfile.batch_size, []
    return args.batch_size, [(f"--batch-size {args.batch_size} (workload file "
                              f"{args.workload}: {wfile.batch_size}; its step time scaled)")]


def scheme_names(args, accelerators: bool = False) -> list[str]:
    """The schemes asked for; ``all`` is the exercise sheets' schemes, and horovod on
    accelerator hosts."""
    names = [n.strip() for item in args.schemes for n in item.split(",") if n.strip()]
    if names == ["all"]:
        return [n for n, s in SCHEMES.items() if s.in_all or accelerators]
    if not names:
        raise ConfigError(f"--schemes names no scheme (choose from all, {', '.join(SCHEMES)})")
    for n in names:
        if n not in SCHEMES:
            hint = (f"; the allreduce's algorithm is --allreduce-algorithm {n}"
                    if n in ALGORITHMS else "")
            raise ConfigError(f"--schemes: unknown scheme {n!r} "
                              f"(choose from all, {', '.join(SCHEMES)}){hint}")
    return names


def averaging_periods(args) -> dict[str, int]:
    """Each scheme's K from ``--average-every`` (and ``--exchange-every`` for async_avg)."""
    exchange = args.average_every if args.exchange_every is None else args.exchange_every
    return {"psgd": args.average_every, "async_avg": exchange}


def configs(args, names) -> list[SchemeConfig]:
    """Each scheme's knobs from the flags (``describe.add_arguments`` defines the
    library's: backend, compression, Horovod's fusion, cycle and negotiation)."""
    if args.fusion_mb <= 0 or args.cycle_ms < 0 or args.negotiation_us < 0:
        raise ConfigError("--fusion-mb must be above 0, --cycle-ms and --negotiation-us at "
                          "least 0")
    every = averaging_periods(args)
    return [SchemeConfig(n, avg_every=every.get(n, 0), algorithm=args.allreduce_algorithm,
                         bucket_bytes=int(args.bucket_mb * 2**20), fidelity=args.fidelity,
                         engine=args.engine, backend=args.backend or "",
                         compression=args.compression, fusion_bytes=int(args.fusion_mb * 2**20),
                         cycle_s=args.cycle_ms / 1e3, negotiation_s=args.negotiation_us / 1e6,
                         requests_ahead=args.requests_ahead) for n in names]


def runnable(cfgs: list[SchemeConfig], cluster, explicit: bool, top: int) -> list[SchemeConfig]:
    """The schemes that can run on the cluster: one that needs a single host where one P
    fits on one (the sweep leaves out its larger P), every other at the largest P ``top``;
    a scheme the user named that cannot is an error, one that ``all`` brought in is skipped
    with a note."""
    keep = []
    for cfg in cfgs:
        spec = SCHEMES[cfg.name]
        on = cluster.at(1 if spec.single_host else spec.ranks(top))
        try:
            check(spec, 1, on)
            resolve_backend(spec, cfg, on)
        except ConfigError:
            if explicit:
                raise
            print(f"predict: note: {cfg.name} skipped (cannot run on this cluster)",
                  file=sys.stderr)
            continue
        keep.append(cfg)
    return keep


def point(cluster, cfg: SchemeConfig, workers: int) -> Point:
    """``cfg`` at ``workers`` workers on the cluster (``at(ranks)``) its ranks take."""
    return Point(cfg, workers, cluster.at(SCHEMES[cfg.name].ranks(workers)))


def points_of(cluster, cfg: SchemeConfig, workers: list[int], baseline: int = 1) -> list[Point]:
    """Every prediction of one scheme: at each P of ``workers`` and the baseline's P0, at
    P = 1 alone for serial, and for a scheme that needs one host only where its ranks fit
    on one."""
    spec = SCHEMES[cfg.name]
    counts = [1] if spec.single_worker else sorted(set(workers) | {baseline})
    points = [point(cluster, cfg, p) for p in counts]
    return [pt for pt in points if not (spec.single_host and pt.cluster.hosts > 1)]


# What a prediction costs, measured on a 2-core host (simulator.bench and timed predict runs):
# the SimPy engine steps about this many worker-iterations per second, divided by how many
# ranks share a pool of cores (each one's time slices are events); the vectorised fast path
# is far quicker, so this overestimates synchronous schemes.
WORKER_ITERATIONS_PER_S = 50_000
SECONDS_PER_SIMULATION = 0.005
REFUSE_ABOVE_S = 1800.0            # half an hour: a typo (P or epochs), not a question
NOTE_ABOVE_S = 30.0


def check_request(job: Sweep, largest: Cluster, runs_each: int = 1) -> None:
    """Refuse what cannot be meant or would not finish (``predict`` and ``pipelines.replay``,
    which simulates every point ``runs_each`` times, once a seed): a batch larger than the
    training set, more threads than a host has cores, and sweeps whose estimated simulation
    time or memory is out of reach (the estimate is named)."""
    workload, threads = job.workload, job.workload.threads_per_worker
    if workload.iterations is None and workload.batch_per_worker > workload.dataset_samples:
        raise ConfigError(f"--batch-size {workload.batch_per_worker} is more than the "
                          f"{workload.dataset_samples} samples of the training set")
    if threads is not None and threads > largest.cores_per_host:
        raise ConfigError(f"--threads {threads} is more than the {largest.cores_per_host} "
                          "cores of a host (oversubscribed threads are not modelled)")
    work, biggest = 0.0, 0
    for pt in job.points:
        spec, p, on = SCHEMES[pt.scheme.name], pt.workers, pt.cluster
        if on.device is not None and spec.ranks(p) > on.hosts * (on.ranks_per_host
                                                                 or on.cores_per_host):
            raise ConfigError(f"{pt.scheme.name} at P = {p} needs {spec.ranks(p)} accelerators, "
                              f"more than the {on.hosts} hosts x {on.cores_per_host} of the "
                              "cluster (leave hosts out of the file to let them grow with "
                              "P, or give --hosts)")
        iterations = workload.iterations_per_worker(p)
        per_pool = max(1, -(-spec.ranks(p) // on.core_pools))
        work += p * iterations * max(1.0, per_pool / on.cores_per_host)
        biggest = max(biggest, p * iterations)
    points, work = runs_each * len(job.points), runs_each * work
    fits_in_memory(f"one prediction of {biggest} worker-iterations", 16 * biggest)
    seconds = work / WORKER_ITERATIONS_PER_S + points * SECONDS_PER_SIMULATION
    if seconds > REFUSE_ABOVE_S:
        raise ConfigError(f"this prediction would run {points} simulations of {work:.3g} "
                          f"worker-iterations in all, about {_minutes(seconds)}: ask for fewer "
                          "--workers, --epochs or --iterations")
    if seconds > NOTE_ABOVE_S:
        print(f"predict: note: {points} simulations, about {_minutes(seconds)}", file=sys.stderr)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} minutes" if seconds >= 90 else f"{seconds:.0f} s"
