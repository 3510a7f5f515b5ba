"""Your model on your cluster: the flags and files that describe a prediction's inputs.

Shared by ``predict`` and ``compare``:

* ``--workload FILE``: a workload file (``python -m calibrate.workload`` or a
  few numbers by hand; ``contracts.workload``) -- the model to predict;
* ``--preset NAME`` or ``--cluster FILE``: hosts, their cores or accelerators,
  the link inside a host, NICs and topology (``contracts.cluster``).
  A preset, and a cluster file with accelerators, describe the *kind* of host:
  the cluster grows with P (``ceil(P / devices or cores)`` hosts) unless
  ``--hosts`` fixes it;
* ``--backend``, ``--compression``, ``--fusion-mb``, ``--cycle-ms``: which
  library moves the gradients and how.

``resolve_cluster(args, profile, origin)`` returns the cluster (``Setting``);
``inputs(args, profile, origin, cluster, samples)`` the ``Machine`` (the profile to
simulate with and the provenance of its numbers) and the workload simulated (model,
batch, training set, run length), the workload file read once for both.
Imports: ``contracts``, ``engine.machine``, ``model.config`` (a tool).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from contracts.checks import ConfigError
from contracts.cluster import (
    PROTOCOLS,
    Cluster,
    GrowingCluster,
    Link,
    load_cluster,
    load_preset,
    preset_names,
)
from contracts.workload import PRECISIONS, Workload, at_precision, load_workload
from simulator.engine.machine import Machine, machine
from simulator.model.config import BACKENDS, COMPRESSIONS

DATASETS = {"mnist": 60000, "fashion-mnist": 60000, "cifar10": 50000}
DEFAULT_MODEL, DEFAULT_BATCH, DEFAULT_DATASET = "cnn", 64, "fashion-mnist"
NEEDS_NCCL = ("--nccl-protocol needs accelerator hosts: a --preset, or a --cluster file with "
              "an [nccl] section")


def add_arguments(parser) -> None:
    w = parser.add_argument_group("your model and your cluster")
    w.add_argument("--workload", metavar="FILE",
                   help="workload TOML of python -m calibrate.workload (or written from a few "
                        "numbers): the model to predict, instead of --model")
    w.add_argument("--precision", choices=PRECISIONS,
                   help="arithmetic of the step: fp32, tf32 or amp (mixed precision); the "
                        "workload file's [measured.precisions] gives each one's step time "
                        "(default: the precision the file was measured in)")
    w.add_argument("--preset", help=f"a cluster preset: {', '.join(preset_names())} "
                                    "(hosts grow with P unless --hosts is given)")
    w.add_argument("--backend", choices=BACKENDS,
                   help="library of ddp, allreduce and horovod (default: gloo on CPU hosts, "
                        "nccl on accelerator hosts)")
    w.add_argument("--compression", choices=COMPRESSIONS, default="none",
                   help="gradients sent as they are, or as fp16 (Horovod's Compression.fp16, "
                        "DDP's fp16 hook)")
    w.add_argument("--fusion-mb", type=float, default=64.0,
                   help="horovod: tensor fusion threshold (MiB)")
    w.add_argument("--cycle-ms", type=float, default=5.0,
                   help="horovod: background loop's cycle time (ms)")
    w.add_argument("--nccl-protocol", choices=PROTOCOLS,
                   help="NCCL's protocol for ring allreduces, instead of the cluster's: simple, "
                        "ll, auto (the faster, as NCCL 2.5's tuner picks), or the size rule of "
                        "NCCL 2.1-2.2 (nccl-2.2) or 2.3-2.4 (nccl-2.3)")
    w.add_argument("--negotiation-us", type=float, default=0.0,
                   help="horovod: rank 0's time per other rank and cycle to collect requests "
                        "and answer (us; 0: not modelled)")
    w.add_argument("--requests-ahead", action="store_true",
                   help="horovod: the framework hands each gradient over before the GPU has "
                        "computed it (TensorFlow's asynchronous GPU ops): Horovod fuses by "
                        "request and each fused buffer waits for its last tensor's data")
    w.add_argument("--horovod-groups", type=int, default=0, metavar="N",
                   help="horovod: num_groups (Horovod 0.21's grouped allreduce): the gradients "
                        "in N groups of consecutive tensors, each handed over once all of it "
                        "is computed (0: each gradient on its own)")


# Hosts like the profile's are assumed to be linked as this preset's hosts are when the
# profile measured no network of its own (``python -m calibrate.fit --link``): its [link]
# cites a source for every number.
ASSUMED_NETWORK = "cpu-25gbe"


@dataclass(frozen=True)
class Setting:
    """The cluster of a prediction and, in words, where it came from.

    ``cluster``: one Cluster, or a ``GrowingCluster`` where hosts grow with P (both answer
    ``at(ranks)``);
    ``machine``: whose hosts (the profile's, a preset's, a file's); ``network``: the link
    between hosts and its origin (measured, preset, assumed, the user's); ``overrides``: each
    flag that won over the file's own value, as ``--flag value (file: value)``."""
    cluster: Cluster | GrowingCluster
    machine: str
    network: str
    overrides: tuple[str, ...] = ()

    def at(self, ranks: int) -> Cluster:
        return self.cluster.at(ranks)

    def hosts_at(self, ranks: int) -> int:
        return self.cluster.hosts_at(ranks)


def resolve_cluster(args, profile, profile_origin: str) -> Setting:
    """The cluster the flags and files describe. With no preset or file: hosts like the
    profile's (as many ranks per host as it has cores, or ``--ranks-per-host``), as many as
    P ranks fill, linked by the profile's measured network or, where it has none, the
    assumed one of ``ASSUMED_NETWORK``; ``--hosts H`` fixes H hosts (``--hosts 1``: the
    profile's one host, shared memory only). A preset's hosts grow with P; a file's hosts
    are fixed where it gives ``hosts``, else they grow. A flag that a file also sets wins,
    and ``Setting.overrides`` says so."""
    preset, path = getattr(args, "preset", None), getattr(args, "cluster", None)
    if preset and path:
        raise ConfigError("give --preset or --cluster, not both")
    if not (preset or path):
        if getattr(args, "nccl_protocol", None):
            raise ConfigError(NEEDS_NCCL)
        return _profile_hosts(args, profile, profile_origin)
    what = f"preset {preset}" if preset else f"cluster file {path}"
    base = load_preset(preset) if preset else load_cluster(path)
    if getattr(args, "nccl_protocol", None):
        base = with_protocol(base, args.nccl_protocol)
    base, overrides = _flags_over_file(base, args, what)
    fixed = bool(path) and bool(base.source_of("cluster.hosts"))
    if args.hosts is not None:
        if fixed and args.hosts != base.hosts:
            overrides.append(f"--hosts {args.hosts} ({what}: {base.hosts})")
        cluster = replace(base, hosts=args.hosts, link=base.link if args.hosts > 1 else None)
    elif getattr(args, "ranks_per_host", None):
        over = [f"hosts = {base.hosts}"] if fixed else []
        if base.ranks_per_host is not None and base.ranks_per_host != args.ranks_per_host:
            over.append(f"ranks_per_host = {base.ranks_per_host}")
        if over:
            overrides.append(f"--ranks-per-host {args.ranks_per_host}: hosts grow with P "
                             f"({what}: {', '.join(over)})")
        cluster = growing(replace(base, ranks_per_host=args.ranks_per_host, placement="packed"))
    else:
        cluster = base if fixed else growing(base)
    if isinstance(cluster, GrowingCluster) and base.link is None:
        raise ConfigError(f"{what} has no [link]: hosts that grow with P need one (or fix "
                          "the hosts: hosts in the file, or --hosts 1)")
    return Setting(cluster, f"hosts of {what}", _network_words(base.link, base, what),
                   tuple(overrides))


def _profile_hosts(args, profile, origin: str) -> Setting:
    """Hosts like the profile's machine (the default), or the one host it was measured on."""
    cores = args.cores_per_host or profile.cores
    sources = (("cluster.cores_per_host", "user (--cores-per-host)" if args.cores_per_host
                else f"profile {origin}"),)
    if args.hosts == 1:
        for flag in ("bandwidth", "latency"):
            if getattr(args, flag, None) is not None:
                raise ConfigError(f"--{flag}: one host (--hosts 1) has no network between hosts")
        return Setting(Cluster(hosts=1, cores_per_host=cores,
                               placement=args.placement or "round_robin",
                               shared_cores=args.shared_cores, sources=sources),
                       "the profile's one host", "none: one host, shared memory")
    link, link_sources, words = default_link(args, profile, origin)
    sources += link_sources
    if args.hosts is not None:
        return Setting(Cluster(hosts=args.hosts, cores_per_host=cores, link=link,
                               placement=args.placement or "round_robin",
                               shared_cores=args.shared_cores, sources=sources),
                       "hosts like the profile's", words)
    base = Cluster(hosts=1, cores_per_host=cores, link=link, placement="packed",
                   ranks_per_host=args.ranks_per_host or cores, shared_cores=args.shared_cores,
                   sources=sources)
    return Setting(GrowingCluster(base, one_host_linked=False), "hosts like the profile's", words)


def default_link(args, profile, origin: str) -> tuple[Link, tuple, str]:
    """The network between hosts like the profile's: the one it measured, else the assumed
    one of ``ASSUMED_NETWORK``, with ``--bandwidth`` and ``--latency`` in place of its own;
    its cluster sources, and the words that name it."""
    measured = getattr(profile, "network", None)
    if measured is not None:
        link = Link(measured.bandwidth_bytes_per_s, measured.latency_s)
        origin_text = f"measured: profile {origin} ({measured.source})"
        words, tail = f"measured ({measured.source})", ""
    else:
        preset = load_preset(ASSUMED_NETWORK)
        link = preset.link
        origin_text = f"assumed: preset {ASSUMED_NETWORK}: " + preset.source_of("link.bandwidth")
        words = f"assumed, not measured (the link of preset {ASSUMED_NETWORK})"
        tail = "; python -m calibrate.link measures yours"
    sources = (("link.bandwidth", origin_text), ("link.latency", origin_text))
    bandwidth, latency = getattr(args, "bandwidth", None), getattr(args, "latency", None)
    if bandwidth is not None or latency is not None:
        link = replace(link, bandwidth_bytes_per_s=bandwidth or link.bandwidth_bytes_per_s,
                       latency_s=link.latency_s if latency is None else latency)
        sources = ((("link.bandwidth", "user (--bandwidth)") if bandwidth else sources[0]),
                   (("link.latency", "user (--latency)") if latency is not None
                    else sources[1]))
        given = " and ".join(f for f, v in (("--bandwidth", bandwidth), ("--latency", latency))
                             if v is not None)
        words = f"yours ({given})" + ("" if bandwidth and latency is not None
                                       else f", the rest {words}")
        tail = ""
    return link, sources, f"{words}: {_link_words(link)}{tail}"


def _link_words(link: Link) -> str:
    from contracts.units import format_duration, format_rate
    return (f"{format_rate(link.bandwidth_bytes_per_s)} of payload per host and direction, "
            f"{format_duration(link.latency_s)} one-way")


def _network_words(link: Link | None, cluster: Cluster, what: str) -> str:
    if link is None:
        return f"none: {what} has one host"
    hw = cluster.hardware
    nics = f"{hw.nics} NICs x " if hw is not None and hw.nics > 1 else ""
    origin = (cluster.source_of("link.bandwidth") or what).split(":")[0]
    if origin == "user":                    # (the file's own value: name the file)
        origin = what
    return f"{origin}: {nics}{_link_words(link)}"


# A file's value each flag replaces: (flag, attribute of args, the Cluster field, words)
FILE_FLAGS = (("--cores-per-host", "cores_per_host", "cluster.cores_per_host"),
              ("--placement", "placement", "cluster.placement"),
              ("--bandwidth", "bandwidth", "link.bandwidth"),
              ("--latency", "latency", "link.latency"))


def _flags_over_file(base: Cluster, args, what: str) -> tuple[Cluster, list[str]]:
    """``base`` with the values the flags give in place of the file's, and a note for each
    that differs from the file's own."""
    from contracts.units import format_duration, format_rate
    notes, sources = [], dict(base.sources)
    shown = {"bandwidth": lambda v: format_rate(v), "latency": format_duration}
    for flag, attr, field in FILE_FLAGS:
        value = getattr(args, attr, None)
        if value is None:
            continue
        if attr in ("bandwidth", "latency"):
            if base.link is None:
                raise ConfigError(f"{flag}: {what} has no [link] to change (describe the link "
                                  "in the file)")
            key = "bandwidth_bytes_per_s" if attr == "bandwidth" else "latency_s"
            old = getattr(base.link, key)
            base = replace(base, link=replace(base.link, **{key: value}))
        else:
            old = getattr(base, attr)
            base = replace(base, **{attr: value})
        if value != old:
            show = shown.get(attr, str)
            notes.append(f"{flag} {show(value)} ({what}: {show(old)})")
            sources[field] = f"user ({flag})"
    if getattr(args, "shared_cores", False) and not base.shared_cores:
        notes.append(f"--shared-cores ({what}: shared_cores = false)")
        base = replace(base, shared_cores=True)
    return replace(base, sources=tuple(sources.items())), notes


def with_protocol(base: Cluster, protocol: str) -> Cluster:
    """``base`` with NCCL's protocol rule set by the user (``--nccl-protocol``)."""
    if base.hardware is None:
        raise ConfigError(NEEDS_NCCL)
    sources = tuple((f, s) for f, s in base.sources if f != "nccl.protocol")
    return replace(base, hardware=replace(base.hardware, protocol=protocol),
                   sources=sources + (("nccl.protocol", "user (--nccl-protocol)"),))


def growing(base: Cluster) -> GrowingCluster:
    """Hosts of ``base``'s kind, as many as P ranks fill (packed, one per slot)."""
    return GrowingCluster(base)


def inputs(args, profile, profile_origin: str, cluster, samples: int | None = None
           ) -> tuple[Machine, Workload, object, tuple[str, ...]]:
    """The Machine for ``cluster`` (at one rank, where it grows), the workload simulated,
    the workload file (None where none is given) and the flag that won over the file's
    batch. The workload: the file's model or ``--model`` (``DEFAULT_MODEL``), the file's
    batch unless ``--batch-size`` (``DEFAULT_BATCH`` without either), a training set of
    ``samples`` (None: ``--dataset``'s size, 60,000 for one not in ``DATASETS``),
    ``--epochs`` (or ``--iterations``), ``--threads``, ``--accumulation-steps`` (above 1
    on accelerator hosts only) and ``--no-sync`` (with it above 1). ``--model`` and ``--workload``
    both naming the model is refused, and so is a model the profile lacks."""
    path = getattr(args, "workload", None)            # pipelines.replay takes none
    if getattr(args, "precision", None) and not path:
        raise ConfigError("--precision needs a --workload file (its [measured.precisions] "
                          "give each precision's step time)")
    if path and args.model:
        raise ConfigError(f"--model {args.model} and --workload {path} both name the "
                          "model: give one")
    w = load_workload(path) if path else None
    if w is not None and getattr(args, "precision", None):
        w = at_precision(w, args.precision)
    if w is None:
        model = DEFAULT_MODEL if args.model is None else args.model
        batch, workloads, over = args.batch_size or DEFAULT_BATCH, [], ()
    else:
        model, batch, workloads = w.name, args.batch_size or w.batch_size, [(w, path)]
        over = () if args.batch_size in (None, w.batch_size) else (
            f"--batch-size {args.batch_size} (workload file {path}: {w.batch_size}; its step "
            "time scaled)",)
    every = getattr(args, "accumulation_steps", 1)       # (predict's alone)
    if every > 1 and cluster.at(1).device is None:
        raise ConfigError(f"--accumulation-steps {every} needs accelerator hosts (a --preset, "
                          "or a --cluster file with [device]): on the profile's CPU hosts "
                          "the optimizer's step is not modelled apart from the step")
    no_sync = getattr(args, "no_sync", False)
    if no_sync and every == 1:
        raise ConfigError("--no-sync needs --accumulation-steps K above 1 (the gradients "
                          "cross once every K iterations)")
    workload = Workload(model=model, batch_per_worker=batch,
                        dataset_samples=samples or DATASETS.get(args.dataset or DEFAULT_DATASET,
                                                                60000),
                        epochs=args.epochs, iterations=getattr(args, "iterations", None),
                        threads_per_worker=args.threads, accumulation_steps=every,
                        no_sync=no_sync)
    mach = machine(profile, profile_origin, cluster.at(1), workloads)
    mach.profile.model(workload.model)                # a model it lacks is refused here
    return mach, workload, w, over
