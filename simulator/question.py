"""What a prediction is asked, resolved once and in one direction, before any engine runs.

``resolve(args) -> Question`` reads ``simulator.predict``'s flags and files in one pass,
each step handing on to the next and none coming back to an earlier one: the flags alone
first (what they refuse on their own, the heterogeneity, each scheme's knobs:
``configs``), then the files (``read_inputs``: the profile, ``--profile`` else the one
shipped; the cluster and where each of its numbers came from, ``describe.resolve_cluster``;
the profile on the cluster's hardware and the workload, ``describe.inputs``), then the
schemes the placement admits on that cluster (``engine.placement.runnable``) and the P of
each (``engine.sweep.counts_of``). What cannot be meant or would not finish is refused
there, before any point is made (``engine.sweep.check_request``); then every point of the
sweep (``engine.sweep.points_of``: a scheme, P and the cluster its ranks take), each
point's cluster resolved once (``engine.sweep.laid_out``: ``placement.layout``). The engines then take
``Question.sweep`` and nothing else; the output takes the words. ``pipelines.replay``
resolves its own sweep with the same steps (``read_inputs``, ``configs``, ``runnable``,
``counts_of``, ``check_request``, ``points_of``; its replays simulate each point on its
cluster).

Imports: contracts, simulator.describe, simulator.engine (machine, placement, sweep),
simulator.model (config, schemes).
"""
from __future__ import annotations

from dataclasses import dataclass

from contracts import profile as profile_mod
from contracts.checks import ConfigError
from contracts.cluster import Cluster
from contracts.profile import Profile
from contracts.workload import Workload
from simulator import describe
from simulator.engine.machine import Machine
from simulator.engine.placement import runnable
from simulator.engine.sweep import (Point, Sweep, check_request, counts_of, laid_out, point,
                                    points_of)
from simulator.model.config import ALGORITHMS, Heterogeneity, SchemeConfig
from simulator.model.schemes import SCHEMES


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
    if args.stragglers > max(args.workers):
        raise ConfigError(f"--stragglers {args.stragglers} is more than the "
                          f"{max(args.workers)} workers of the largest P")
    het = Heterogeneity(speed_cv=args.heterogeneity, stragglers=args.stragglers,
                        straggler_slowdown=args.straggler_slowdown)
    cfgs = configs(args, scheme_names(args))
    given = read_inputs(args, args.dataset_size)
    setting, mach, wfile = given.setting, given.machine, given.workload_file
    largest, explicit = setting.at(max(args.workers)), args.schemes != ["all"]
    cfgs = [c for c in cfgs if explicit or SCHEMES[c.name].in_all or largest.device]
    cfgs = runnable(cfgs, setting, explicit, max(args.workers))
    plan = [(cfg, counts_of(setting, cfg, args.workers, args.baseline)) for cfg in cfgs]
    check_request(plan, setting, given.workload)
    job = laid_out(Sweep(points_of(setting, plan), given.workload, mach.profile, args.seed,
                         het, args.baseline))
    return Question(job, setting, largest, given.measured, given.origin, mach.provenance,
                    tuple(cfgs), tuple(args.workers), args.dataset or describe.DEFAULT_DATASET,
                    args.dataset_size is not None,
                    bool(wfile) and not (args.dataset or args.dataset_size),
                    given.overrides + setting.overrides,
                    bool(args.workload or args.preset or args.cluster))


@dataclass(frozen=True)
class Inputs:
    """The files a prediction reads, each once: the profile as loaded (``measured``, from
    ``origin``: its file, or ``embedded``), the cluster (``setting``), the profile on the
    cluster's hardware with the workload file's model (``machine``), the workload simulated,
    the workload file (None where none is given) and the flag that won over its batch."""
    measured: Profile
    origin: str
    setting: describe.Setting
    machine: Machine
    workload: Workload
    workload_file: object | None
    overrides: tuple[str, ...]


def read_inputs(args, samples: int | None = None) -> Inputs:
    """The profile (``--profile``, else the one shipped), the cluster its flags and files
    describe (``describe.resolve_cluster``), the profile on its hardware and the workload
    with a training set of ``samples`` (``describe.inputs``): the first steps of
    ``resolve`` and of ``pipelines.replay``."""
    measured = profile_mod.load(args.profile) if args.profile else profile_mod.load_default()
    origin = args.profile or "embedded"
    setting = describe.resolve_cluster(args, measured, origin)
    return Inputs(measured, origin, setting,
                  *describe.inputs(args, measured, origin, setting.cluster, samples))


def scheme_names(args) -> list[str]:
    """The schemes asked for; ``all`` is every scheme, of which ``resolve`` keeps the
    exercise sheets' and, on accelerator hosts, horovod."""
    names = [n.strip() for item in args.schemes for n in item.split(",") if n.strip()]
    if names == ["all"]:
        return list(SCHEMES)
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
    if (args.fusion_mb <= 0 or args.cycle_ms < 0 or args.negotiation_us < 0
            or args.horovod_groups < 0):
        raise ConfigError("--fusion-mb must be above 0, --cycle-ms, --negotiation-us and "
                          "--horovod-groups at least 0")
    every = averaging_periods(args)
    return [SchemeConfig(n, avg_every=every.get(n, 0), algorithm=args.allreduce_algorithm,
                         bucket_bytes=int(args.bucket_mb * 2**20), fidelity=args.fidelity,
                         engine=args.engine, backend=args.backend or "",
                         compression=args.compression, fusion_bytes=int(args.fusion_mb * 2**20),
                         cycle_s=args.cycle_ms / 1e3, negotiation_s=args.negotiation_us / 1e6,
                         requests_ahead=args.requests_ahead,
                         horovod_groups=args.horovod_groups) for n in names]
