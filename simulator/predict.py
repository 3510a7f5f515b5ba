"""``python -m simulator.predict --workers 16``: predicted time per epoch and speedup, P = 1..N.

With no options: P workers on hosts like the profile's (``simulator/data/default_profile.json``
unless ``--profile``): as many ranks per host as it has cores, hosts growing with P, on the
profile's measured network or, where it has none, an assumed one the output names
(``describe.resolve_cluster``). ``--hosts 1`` is the one host it was measured on. It prints
a header in plain words (model, epoch, machine, hosts, network, the speedup's baseline, and
each flag that won over a file), the time per epoch per scheme at a few P in human units
(``--full``: every row) and writes ``speedup.png``, ``predictions.csv`` and ``.json`` (seconds
in named columns) to ``--out``. Bad input: one line on stderr, exit code 2.

Imports: tqdm, contracts, simulator.engine (run, sweep), simulator.model (config,
schemes), simulator.output (header, plots, tables).
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

from simulator import accuracy, describe
import cli
from contracts import profile as profile_mod
from contracts import quality
from contracts.checks import ConfigError, fits_in_memory
from contracts.cluster import (
    MAX_CORES_PER_HOST,
    MAX_HOSTS,
    PLACEMENTS,
    Cluster,
    GrowingCluster,
)
from contracts.files import atomic_write_text
from contracts.workload import Workload
from simulator.engine.machine import provenance_line
from simulator.engine.placement import check, resolve_backend
from simulator.engine.run import simulate
from simulator.engine.sweep import points_of, sweep
from simulator.model.config import ALGORITHMS, ENGINES, FIDELITIES, Heterogeneity, SchemeConfig
from simulator.model.schemes import SCHEMES
from simulator.model.schemes.holder import DEFAULT_K as ASYNC_AVG_DEFAULT_K
from simulator.output import header
from simulator.output.tables import full_table, summary_table, to_csv, to_json

PROG = "python -m simulator.predict"
DATASETS = {"mnist": 60000, "fashion-mnist": 60000, "cifar10": 50000}
DEFAULT_MODEL, DEFAULT_BATCH, DEFAULT_DATASET = "cnn", 64, "fashion-mnist"
EPILOG = """columns of --full and predictions.csv:
  epoch_s    predicted wall time of one epoch (s); time_s: of the whole run (--epochs)
  speedup    against the baseline, the fastest scheme at P0 = --baseline (1: the fastest
             single worker): its epoch_s / epoch_s; efficiency = speedup * P0 / P
  compute_s, comm_s, wait_s   per worker over the run: own work, time in communication,
             time blocked until the slowest rank (or the server) is there; horovod's
             wait_s is a step's time after its backward with no allreduce of its own in
             flight: the background loop's cycle (--cycle-ms), waiting for the next tick
  stale      mean staleness: updates applied between a worker's read of the weights and
             the update of its own gradient (asynchronous schemes)
  eng        which engine made the row: fast (vectorised closed form) or des (SimPy events)
Schemes: serial, psgd, async_avg and hogwild train alone and average or share weights;
gather_scatter, allreduce, ddp and mpi_allreduce synchronise gradients every step;
ps_sync and ps_async use a parameter server (one more rank)."""


def build_parser() -> cli.Parser:
    p = cli.Parser(prog=PROG, description=__doc__.split("\n\n")[0], epilog=EPILOG)
    p.add_argument("--workers", type=cli.worker_counts, default=cli.worker_counts("16"),
                   metavar="P", help=f"{cli.WORKERS_HELP} (default: 16)")
    p.add_argument("--schemes", "--algorithm", dest="schemes", nargs="+", default=["all"],
                   metavar="NAME",
                   help=f"schemes, comma or space separated, or all: {', '.join(SCHEMES)} "
                        "(--algorithm: real.train's old name; default: all)")
    p.add_argument("--profile", type=cli.input_file,
                   help="profile JSON of python -m calibrate "
                        "(default: the one shipped, simulator/data/default_profile.json)")
    p.add_argument("--model", default=None,
                   help="model of the profile (default: cnn; --workload names its own)")
    p.add_argument("--batch-size", type=cli.positive_int, default=None,
                   help=f"samples per step PER WORKER (default: the --workload file's, else "
                        f"{DEFAULT_BATCH})")
    p.add_argument("--baseline", type=cli.one_worker_count(), default=1, metavar="P0",
                   help="speedup and efficiency against the fastest scheme at P0 workers "
                        "(1: the fastest single worker)")
    d = p.add_mutually_exclusive_group()
    d.add_argument("--dataset", choices=sorted(DATASETS), default=None,
                   help=f"sets the training set's size (default: {DEFAULT_DATASET})")
    d.add_argument("--dataset-size", type=cli.positive_int, help="samples in the training set")
    t = p.add_mutually_exclusive_group()
    t.add_argument("--epochs", type=cli.positive_float, default=1.0, help="epochs to simulate")
    t.add_argument("--iterations", type=cli.positive_int,
                   help="iterations per worker (instead of epochs)")
    p.add_argument("--threads", type=cli.positive_int, default=None,
                   help="threads per worker process (default: cores // ranks per host, as "
                        "real.train picks)")
    add_cluster_args(p.add_argument_group(
        "cluster (default: the machine the profile was measured on)"))
    s = p.add_argument_group("schemes")
    add_average_every(s)
    s.add_argument("--exchange-every", type=cli.nonnegative_int, default=None, metavar="K",
                   help="async_avg alone: exchange every K steps (default: --average-every)")
    s.add_argument("--allreduce-algorithm", choices=ALGORITHMS, default="auto",
                   help="the allreduce algorithm of mpi_allreduce (real.train's --mpi-allreduce) "
                        "and of the NCCL collectives (auto: as the library picks; "
                        "hierarchical: Horovod 0.15+'s HOROVOD_HIERARCHICAL_ALLREDUCE, "
                        "reduce_broadcast: Horovod 0.13.6-0.14's, or Caffe2's with gloo)")
    s.add_argument("--bucket-mb", type=cli.float_in(1e-6, 2**20), default=25.0, help="ddp bucket size (MiB)")
    s.add_argument("--fidelity", choices=FIDELITIES, default="auto",
                   help="communication: analytic (each collective's closed form on the "
                        "placement), message (every message over the simulated links), or auto "
                        "(analytic where it is the message model, else message)")
    s.add_argument("--engine", choices=ENGINES, default="auto",
                   help="des: SimPy events; fast: vectorised closed form (synchronous schemes); "
                        "auto: fast where it is exact")
    g = p.add_argument_group("heterogeneity")
    g.add_argument("--heterogeneity", type=cli.float_in(0, 10), default=0.0,
                   help="coefficient of variation of the workers' speeds")
    g.add_argument("--stragglers", type=cli.nonnegative_int, default=0,
                   help="slow ranks (the last ones)")
    g.add_argument("--straggler-slowdown", type=cli.float_in(1, 1e6), default=2.0,
                   help="how many times slower a straggler steps")
    o = p.add_argument_group("output")
    o.add_argument("--seed", type=cli.seed, default=0, help="seed of the step-time draws")
    o.add_argument("--jobs", type=cli.positive_int, default=os.cpu_count() or 1,
                   help="processes that simulate in parallel, at most this machine's cores (the "
                        "rows do not depend on it; default: this machine's cores)")
    o.add_argument("--format", choices=("table", "csv", "json"), default="table",
                   help="what to print: the summary table, or every row as CSV or JSON")
    o.add_argument("--full", action="store_true",
                   help="print every scheme and P with compute, communication, waiting, staleness")
    o.add_argument("--out", default="predictions", type=cli.output_folder,
                   help="folder for predictions.csv, predictions.json and speedup.png")
    o.add_argument("--no-plot", action="store_true", help="do not write speedup.png")
    o.add_argument("--trace", type=cli.output_file(),
                   help="write a Chrome trace (JSON) of the first scheme at the largest P")
    describe.add_arguments(p)
    accuracy.add_target_arguments(p)
    return p


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



def add_cluster_args(c) -> None:
    """The cluster flags (a file, or hosts, cores, link and placement), for ``predict`` and
    every command that simulates as it does (``simulator.replay``)."""
    c.add_argument("--cluster", type=cli.input_file,
                   help="cluster TOML file ([cluster] cores_per_host, hosts (optional: else "
                        "they grow with P); [link])")
    h = c.add_mutually_exclusive_group()
    h.add_argument("--hosts", type=cli.int_in(1, MAX_HOSTS),
                   help="number of hosts, whatever P is (1: the profile's one host; default: "
                        "as many as P ranks fill)")
    h.add_argument("--ranks-per-host", type=cli.int_in(1, cli.MAX_WORKERS), metavar="K",
                   help="hosts grow with P: ceil(ranks / K) hosts, K ranks on each (default: "
                        "a host's cores)")
    c.add_argument("--cores-per-host", type=cli.int_in(1, MAX_CORES_PER_HOST),
                   help="cores of each host (default: the profile's, or the cluster file's)")
    c.add_argument("--bandwidth", type=cli.bandwidth,
                   help="link payload rate per host and direction, e.g. 10gbit, 100mbit, "
                        "1.25GB/s (default: the profile's measured link, the file's, or the "
                        f"assumed link of preset {describe.ASSUMED_NETWORK})")
    c.add_argument("--latency", type=cli.duration,
                   help="one-way latency of a message, end to end, e.g. 20us (default: as "
                        "--bandwidth)")
    c.add_argument("--placement", choices=PLACEMENTS,
                   help="round_robin: rank r on host r mod H; packed: fill a host first "
                        "(default: the file's; round_robin on fixed hosts, packed where they "
                        "grow)")
    c.add_argument("--shared-cores", action="store_true",
                   help="all hosts share one pool of --cores-per-host cores (the emulated cluster)")


def make_cluster(args, prof) -> Cluster | GrowingCluster:
    """The cluster of every prediction, or one that grows with P (``describe.resolve_cluster``)."""
    return describe.resolve_cluster(args, prof, args.profile or "embedded").cluster


def add_average_every(group) -> None:
    """``--average-every K``, as real.train reads it (``--avg-every``: its other name)."""
    group.add_argument("--average-every", "--avg-every", dest="average_every",
                       type=cli.nonnegative_int, default=0, metavar="K",
                       help="psgd: average weights every K steps (0: once, at the end); "
                            f"async_avg: exchange with the holder every K (0: "
                            f"{ASYNC_AVG_DEFAULT_K}), as real.train")


def averaging_periods(args) -> dict[str, int]:
    """Each scheme's K from ``--average-every`` (and ``--exchange-every`` for async_avg)."""
    exchange = args.average_every if args.exchange_every is None else args.exchange_every
    return {"psgd": args.average_every, "async_avg": exchange}


def configs(args, names) -> list[SchemeConfig]:
    every = averaging_periods(args)
    return [SchemeConfig(n, avg_every=every.get(n, 0), algorithm=args.allreduce_algorithm,
                         bucket_bytes=int(args.bucket_mb * 2**20), fidelity=args.fidelity,
                         engine=args.engine, **describe.scheme_options(args)) for n in names]


def main(argv: list[str] | None = None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv,
                       (profile_mod.ProfileError, ValueError))


def run(args) -> int:
    if args.dry_run and args.target_accuracy is None:
        raise ConfigError("--dry-run lists the training runs of --target-accuracy: give it too "
                          "(a prediction alone trains nothing)")
    measured = profile_mod.load(args.profile) if args.profile else profile_mod.load_default()
    origin = args.profile or "embedded"
    setting = describe.resolve_cluster(args, measured, origin)
    cluster = setting.cluster
    mach, model, wfile = describe.inputs(args, measured, origin, cluster)
    prof = mach.profile
    batch, overrides = batch_size(args, wfile)
    dataset_default = bool(wfile) and not (args.dataset or args.dataset_size)
    dataset = args.dataset = args.dataset or DEFAULT_DATASET
    samples = DATASETS[dataset] if args.dataset_size is None else args.dataset_size
    workload = Workload(model=DEFAULT_MODEL if model is None else model, batch_per_worker=batch,
                        dataset_samples=samples, epochs=args.epochs, iterations=args.iterations,
                        threads_per_worker=args.threads)
    prof.model(workload.model)
    het = Heterogeneity(speed_cv=args.heterogeneity, stragglers=args.stragglers,
                        straggler_slowdown=args.straggler_slowdown)
    top = setting.at(max(args.workers))
    cfgs = runnable(configs(args, scheme_names(args, top.device is not None)), setting,
                    args.schemes != ["all"], max(args.workers))
    check_request(args, workload, cluster, cfgs)
    t0 = time.perf_counter()
    total = sum(len(points_of(c, args.workers, cluster, args.baseline)) for c in cfgs)
    with progress_bar(total) as bar:
        rows = sweep(cfgs, args.workers, workload, cluster, prof, args.seed, het, bar.update,
                     jobs=args.jobs, meanwhile=None if args.no_plot else _preload_plot,
                     baseline=args.baseline)
    elapsed = time.perf_counter() - t0
    meta = {"profile": origin, "profile_note": prof.provenance.note,
            "profile_host": f"{measured.provenance.host}, {measured.cores} cores",
            "profile_created": prof.provenance.created_utc,
            "workload": asdict(workload), "dataset": (dataset if args.dataset_size is None
                                                      else "--dataset-size"),
            "dataset_default": dataset_default,
            "cluster": asdict(top), "ranks_per_host": args.ranks_per_host, "seed": args.seed,
            "heterogeneity": asdict(het), "simulated_in_s": round(elapsed, 3),
            "kind": "predicted (simulator)", "provenance": list(mach.provenance),
            "provenance_line": provenance_line(mach.provenance) if described(args) else "",
            "machine": setting.machine, "network": setting.network,
            "hosts": hosts_range(setting, args.workers),
            "overrides": list(overrides) + list(setting.overrides),
            "baseline": baseline_of(rows, args.baseline),
            "profile_quality": quality.warning(measured, workload.model)}
    write_outputs(args, rows, meta)
    if args.target_accuracy is not None:
        singles = [r["time_s"] for r in rows if r["workers"] == 1]
        accuracy.print_time_to_accuracy(
            args, cfgs, workload, cluster, prof, het,
            min(singles) if singles else meta["baseline"]["time_s"] * args.baseline)
    if args.trace:
        write_trace(args, cfgs[0], workload, cluster, prof, het)
    return 0


def batch_size(args, wfile) -> tuple[int, list[str]]:
    """Samples per step per worker: ``--batch-size``, else the workload file's own, else
    the default; the flag over the file's value is said."""
    if wfile is None:
        return args.batch_size or DEFAULT_BATCH, []
    if args.batch_size is None or args.batch_size == wfile.batch_size:
        return wfile.batch_size, []
    return args.batch_size, [(f"--batch-size {args.batch_size} (workload file "
                              f"{args.workload}: {wfile.batch_size}; its step time scaled)")]


def hosts_range(setting, workers: list[int]) -> dict:
    """How many hosts the smallest and the largest P take, and ranks per host."""
    low, high = setting.at(min(workers)), setting.at(max(workers))
    return {"grows": isinstance(setting.cluster, GrowingCluster),
            "at_min": [min(workers), low.hosts],
            "at_max": [max(workers), high.hosts],
            "ranks_per_host": high.ranks_per_host or high.cores_per_host,
            "cores_per_host": high.cores_per_host,
            "device": high.device.name if high.device else None}


def baseline_of(rows: list[dict], p0: int) -> dict:
    """The row every speedup is against: the fastest at P0."""
    best = min((r for r in rows if r["workers"] == p0), key=lambda r: r["epoch_s"])
    return {"workers": p0, "scheme": best["scheme"], "epoch_s": best["epoch_s"],
            "time_s": best["time_s"]}


# What a prediction costs, measured on a 2-core host (simulator.bench and timed predict runs):
# the SimPy engine steps about this many worker-iterations per second, divided by how many
# ranks share a pool of cores (each one's time slices are events); the vectorised fast path
# is far quicker, so this overestimates synchronous schemes.
WORKER_ITERATIONS_PER_S = 50_000
SECONDS_PER_SIMULATION = 0.005
REFUSE_ABOVE_S = 1800.0            # half an hour: a typo (P or epochs), not a question
NOTE_ABOVE_S = 30.0


def check_request(args, workload: Workload, cluster, cfgs: list[SchemeConfig]) -> None:
    """Refuse what cannot be meant or would not finish: more stragglers than workers, a
    batch larger than the training set, more threads than a host has cores, and sweeps
    whose estimated simulation time or memory is out of reach (the estimate is named)."""
    p_max = max(args.workers)
    if args.stragglers > p_max:
        raise ConfigError(f"--stragglers {args.stragglers} is more than the {p_max} workers "
                          "of the largest P")
    if workload.iterations is None and workload.batch_per_worker > workload.dataset_samples:
        raise ConfigError(f"--batch-size {workload.batch_per_worker} is more than the "
                          f"{workload.dataset_samples} samples of the training set")
    one = cluster.at(p_max)
    if args.threads is not None and args.threads > one.cores_per_host:
        raise ConfigError(f"--threads {args.threads} is more than the {one.cores_per_host} cores "
                          "of a host (oversubscribed threads are not modelled)")
    points, work, biggest = 0, 0.0, 0
    for cfg in cfgs:
        spec = SCHEMES[cfg.name]
        for p, on in points_of(cfg, args.workers, cluster, args.baseline):
            if on.device is not None and spec.ranks(p) > on.hosts * (on.ranks_per_host
                                                                     or on.cores_per_host):
                raise ConfigError(f"{cfg.name} at P = {p} needs {spec.ranks(p)} accelerators, more "
                                  f"than the {on.hosts} hosts x {on.cores_per_host} of the "
                                  "cluster (leave hosts out of the file to let them grow with "
                                  "P, or give --hosts)")
            iterations = workload.iterations_per_worker(p)
            per_pool = max(1, -(-spec.ranks(p) // on.core_pools))
            points += 1
            work += p * iterations * max(1.0, per_pool / on.cores_per_host)
            biggest = max(biggest, p * iterations)
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


def _preload_plot() -> None:
    from simulator.output.plots import preload
    preload()


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


def progress_bar(total: int):
    """A progress bar on stderr for sweeps that take a while (silent when not a terminal)."""
    from tqdm import tqdm
    return tqdm(total=total, desc="predict", unit="run", disable=None, leave=False,
                delay=1.0, file=sys.stderr)


def write_outputs(args, rows, meta) -> None:
    """Files first (a reader piping the table into ``head`` still gets them), then the table."""
    out = Path(args.out)
    atomic_write_text(out / "predictions.csv", to_csv(rows))
    atomic_write_text(out / "predictions.json", to_json(rows, meta))
    if not args.no_plot:
        from simulator.output.plots import speedup_plot
        path = speedup_plot(rows, out / "speedup.png", subtitle=header.subtitle(meta),
                            baseline=header.baseline_words(meta).split(",")[0],
                            p0=args.baseline)
        print(f"wrote {path}", file=sys.stderr)
    if args.format == "csv":
        print(to_csv(rows), end="")
    elif args.format == "json":
        print(to_json(rows, meta))
    else:
        head = "\n".join(header.lines(meta))
        print(full_table(rows, head) if args.full else summary_table(rows, head, out, meta))
        if meta.get("provenance_line"):
            print(meta["provenance_line"] + " (every number and its source: predictions.json)")


def described(args) -> bool:
    """Whether numbers come from files or presets (said in a line under the table)."""
    return bool(args.workload or args.preset or args.cluster)


def write_trace(args, cfg, workload, cluster, prof, het) -> None:
    import json
    spec = SCHEMES[cfg.name]
    p = 1 if spec.single_worker else max(args.workers)
    r = simulate(cfg, p, workload, cluster.at(spec.ranks(p)), prof,
                 args.seed, het, trace=True)
    atomic_write_text(args.trace, json.dumps(r.trace))
    print(f"wrote {args.trace} ({len(r.trace['traceEvents'])} events)", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
