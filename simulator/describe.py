"""Your model on your cluster: the flags and files that describe a prediction's inputs.

Shared by ``predict`` and ``compare``:

* ``--workload FILE``: a workload file (``python -m calibrate.workload`` or a
  few numbers by hand; ``simulator.contracts.workload``) -- the model to predict;
* ``--preset NAME`` or ``--cluster FILE``: hosts, their cores or accelerators,
  the link inside a host, NICs and topology (``simulator.contracts.cluster``).
  A preset, and a cluster file with accelerators, describe the *kind* of host:
  the cluster grows with P (``ceil(P / devices or cores)`` hosts) unless
  ``--hosts`` fixes it;
* ``--backend``, ``--compression``, ``--fusion-mb``, ``--cycle-ms``: which
  library moves the gradients and how.

``inputs(args, profile, origin, cluster)`` returns the ``Machine`` (the profile
to simulate with and the provenance of its numbers) and the model's name.
Imports: ``simulator.contracts``, ``engine.machine``, ``model.config`` (a tool).
"""
from __future__ import annotations

from dataclasses import replace

from simulator.contracts.checks import ConfigError
from simulator.contracts.cluster import PROTOCOLS, Cluster, load_cluster, load_preset, preset_names
from simulator.contracts.workload import PRECISIONS, at_precision, load_workload
from simulator.engine.machine import Machine, machine
from simulator.model.config import BACKENDS, COMPRESSIONS

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


def scheme_options(args) -> dict:
    """SchemeConfig fields from the flags."""
    if args.fusion_mb <= 0 or args.cycle_ms < 0 or args.negotiation_us < 0:
        raise ConfigError("--fusion-mb must be above 0, --cycle-ms and --negotiation-us at "
                          "least 0")
    return {"backend": args.backend or "", "compression": args.compression,
            "fusion_bytes": int(args.fusion_mb * 2**20), "cycle_s": args.cycle_ms / 1e3,
            "negotiation_s": args.negotiation_us / 1e6}


def described_cluster(args):
    """The cluster of a preset or file, a function of the ranks where it grows with P;
    None where neither is given."""
    preset, path = getattr(args, "preset", None), getattr(args, "cluster", None)
    if preset and path:
        raise ConfigError("give --preset or --cluster, not both")
    if not (preset or path):
        if getattr(args, "nccl_protocol", None):
            raise ConfigError(NEEDS_NCCL)
        return None
    base = load_preset(preset) if preset else load_cluster(path)
    if getattr(args, "nccl_protocol", None):
        base = with_protocol(base, args.nccl_protocol)
    if getattr(args, "ranks_per_host", None):
        base = replace(base, ranks_per_host=args.ranks_per_host, placement="packed")
    if args.hosts is not None:
        return replace(base, hosts=args.hosts, link=base.link if args.hosts > 1 else None)
    if not (preset or base.device):
        return base                      # a CPU cluster file: its hosts, as before
    return growing(base)


def with_protocol(base: Cluster, protocol: str) -> Cluster:
    """``base`` with NCCL's protocol rule set by the user (``--nccl-protocol``)."""
    if base.hardware is None:
        raise ConfigError(NEEDS_NCCL)
    sources = tuple((f, s) for f, s in base.sources if f != "nccl.protocol")
    return replace(base, hardware=replace(base.hardware, protocol=protocol),
                   sources=sources + (("nccl.protocol", "user (--nccl-protocol)"),))


def growing(base: Cluster):
    """Hosts of ``base``'s kind, as many as P ranks fill (packed, one per slot)."""
    per_host = base.ranks_per_host or base.cores_per_host

    def of(ranks: int) -> Cluster:
        hosts = max(1, -(-ranks // per_host))
        return replace(base, hosts=hosts, placement="packed")
    of.base = base
    return of


def inputs(args, profile, profile_origin: str, cluster) -> tuple[Machine, str]:
    """The Machine for ``cluster`` (the largest, where it grows) and the model's name."""
    one = cluster(1) if callable(cluster) else cluster
    workloads = []
    model = args.model
    if getattr(args, "precision", None) and not args.workload:
        raise ConfigError("--precision needs a --workload file (its [measured.precisions] "
                          "give each precision's step time)")
    if args.workload:
        w = load_workload(args.workload)
        if getattr(args, "precision", None):
            w = at_precision(w, args.precision)
        workloads.append((w, args.workload))
        model = w.name
    return machine(profile, profile_origin, one, workloads), model


def where(cluster: Cluster, ranks_per_host=None) -> str:
    """The cluster in a few words (the largest one, when hosts grow with P)."""
    from simulator.contracts.units import format_rate
    hw = cluster.hardware
    hosts = (f"{ranks_per_host} ranks per host, up to {cluster.hosts} hosts" if ranks_per_host
             else f"{cluster.hosts} host(s)")
    if hw is not None and hw.device is not None:
        text = f"{hosts} x {cluster.cores_per_host} {hw.device.name}"
        if hw.intra:
            text += f", {format_rate(hw.intra.bandwidth_bytes_per_s)} inside"
    else:
        text = f"{hosts} x {cluster.cores_per_host} cores"
    if cluster.link:
        nics = f"{hw.nics} x " if hw is not None and hw.nics > 1 else ""
        text += (f", {nics}{format_rate(cluster.link.bandwidth_bytes_per_s)}, "
                 f"{cluster.link.latency_s * 1e6:g} us one-way")
        if hw is not None and hw.topology == "two_tier":
            text += (f", leaves of {hw.hosts_per_leaf} hosts "
                     f"{hw.oversubscription:g}:1 oversubscribed")
    else:
        text += ", shared memory" if hw is None or hw.device is None else ""
    return text + (" (cores shared by all hosts)" if cluster.shared_cores else "")
