"""``python -m simulator.predict --workers 16``: predicted time per epoch and speedup, P = 1..N.

With no options it uses the embedded profile (``simulator/data/default_profile.json``)
and the calibrated machine (one host, shared memory), prints a table for every
scheme and writes ``speedup.png`` (and ``predictions.csv``/``.json``) to ``--out``.
Describe another cluster with ``--hosts/--cores-per-host/--bandwidth/--latency``
or a TOML file (``--cluster``). Bad input: one line on stderr, exit code 2.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict
from pathlib import Path

from . import profile as profile_mod
from .config import (ALGORITHMS, ENGINES, FIDELITIES, PLACEMENTS, Cluster, ConfigError,
                     Heterogeneity, Link, SchemeConfig, Workload, calibrated_cluster,
                     load_cluster)
from .report import table, to_csv, to_json
from .schemes import SCHEMES
from .schemes.holder import DEFAULT_K as ASYNC_AVG_DEFAULT_K
from .simulate import check, simulate
from .sweep import sweep
from .units import parse_bandwidth, parse_duration

DATASETS = {"mnist": 60000, "fashion-mnist": 60000, "cifar10": 50000}


class _Parser(argparse.ArgumentParser):
    """Errors in one line (no usage dump): ``predict: error: ...``, exit code 2."""

    def error(self, message):
        self.exit(2, f"predict: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m simulator.predict", description=__doc__,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--workers", type=int, default=16, help="largest P; predicts P = 1..N")
    p.add_argument("--schemes", nargs="+", default=["all"],
                   help=f"schemes (comma or space separated) or all: {', '.join(SCHEMES)}")
    p.add_argument("--profile", help="profile JSON (default: the embedded one)")
    p.add_argument("--model", default="cnn", help="model in the profile")
    p.add_argument("--batch-size", type=int, default=64, help="samples per step PER WORKER")
    d = p.add_mutually_exclusive_group()
    d.add_argument("--dataset", choices=sorted(DATASETS), default="fashion-mnist",
                   help="sets the dataset size")
    d.add_argument("--dataset-size", type=int, help="samples in the training set")
    t = p.add_mutually_exclusive_group()
    t.add_argument("--epochs", type=float, default=1.0, help="epochs to simulate")
    t.add_argument("--iterations", type=int, help="iterations per worker (instead of epochs)")
    p.add_argument("--threads", type=int, default=None,
                   help="threads per worker process (default: cores // ranks per host, as real.train)")
    c = p.add_argument_group("cluster (default: the calibrated machine)")
    c.add_argument("--cluster", help="cluster TOML file ([cluster] hosts, cores_per_host; [link])")
    c.add_argument("--hosts", type=int, help="number of hosts")
    c.add_argument("--cores-per-host", type=int, help="cores of each host (default: profile's)")
    c.add_argument("--bandwidth", default="10gbit", help="link bandwidth, e.g. 10gbit, 100mbit")
    c.add_argument("--latency", default="20us", help="link latency, e.g. 50us")
    c.add_argument("--placement", choices=PLACEMENTS, default="round_robin")
    c.add_argument("--shared-cores", action="store_true",
                   help="all hosts share one pool of --cores-per-host cores (emulated cluster)")
    s = p.add_argument_group("schemes")
    s.add_argument("--avg-every", type=int, default=0, help="psgd: average every K steps (0: at the end)")
    s.add_argument("--exchange-every", type=int, default=0,
                   help=f"async_avg: exchange every K steps (0: {ASYNC_AVG_DEFAULT_K}, as real.train)")
    s.add_argument("--algorithm", choices=ALGORITHMS, default="auto", help="mpi_allreduce algorithm")
    s.add_argument("--bucket-mb", type=float, default=25.0, help="ddp bucket size (MiB)")
    s.add_argument("--fidelity", choices=FIDELITIES, default="analytic", help="communication model")
    s.add_argument("--engine", choices=ENGINES, default="auto", help="simulation engine")
    h = p.add_argument_group("heterogeneity")
    h.add_argument("--heterogeneity", type=float, default=0.0, help="cv of per-worker speeds")
    h.add_argument("--stragglers", type=int, default=0, help="slow ranks (the last ones)")
    h.add_argument("--straggler-slowdown", type=float, default=2.0, help="their step-time factor")
    o = p.add_argument_group("output")
    o.add_argument("--seed", type=int, default=0)
    o.add_argument("--format", choices=("table", "csv", "json"), default="table")
    o.add_argument("--out", default="predictions", help="directory for speedup.png and files")
    o.add_argument("--no-plot", action="store_true", help="do not write speedup.png")
    o.add_argument("--trace", help="write a Chrome trace (JSON) of the first scheme at P = --workers")
    return p


def scheme_names(args) -> list[str]:
    names = [n for item in args.schemes for n in item.split(",") if n]
    if names == ["all"]:
        return list(SCHEMES)
    for n in names:
        if n not in SCHEMES:
            raise ConfigError(f"unknown scheme {n!r} (choose from all, {', '.join(SCHEMES)})")
    return names


def make_cluster(args, prof) -> Cluster:
    if args.cluster:
        return load_cluster(args.cluster)
    if args.hosts is None and args.cores_per_host is None:
        return calibrated_cluster(prof.cores)
    hosts = 1 if args.hosts is None else args.hosts
    link = Link(parse_bandwidth(args.bandwidth), parse_duration(args.latency)) if hosts > 1 else None
    cores = prof.cores if args.cores_per_host is None else args.cores_per_host
    return Cluster(hosts=hosts, cores_per_host=cores, link=link, placement=args.placement,
                   shared_cores=args.shared_cores)


def configs(args, names) -> list[SchemeConfig]:
    every = {"psgd": args.avg_every, "async_avg": args.exchange_every}
    return [SchemeConfig(n, avg_every=every.get(n, 0), algorithm=args.algorithm,
                         bucket_bytes=int(args.bucket_mb * 2**20), fidelity=args.fidelity,
                         engine=args.engine) for n in names]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except (ConfigError, profile_mod.ProfileError, ValueError) as e:
        print(f"predict: error: {e}", file=sys.stderr)
        return 2


def run(args) -> int:
    if args.workers < 1:
        raise ConfigError(f"--workers must be at least 1 (got {args.workers})")
    prof = profile_mod.load(args.profile) if args.profile else profile_mod.load_default()
    workload = Workload(model=args.model, batch_per_worker=args.batch_size,
                        dataset_samples=args.dataset_size or DATASETS[args.dataset],
                        epochs=args.epochs, iterations=args.iterations,
                        threads_per_worker=args.threads)
    prof.model(args.model)
    cluster = make_cluster(args, prof)
    het = Heterogeneity(speed_cv=args.heterogeneity, stragglers=args.stragglers,
                        straggler_slowdown=args.straggler_slowdown)
    names = scheme_names(args)
    explicit = args.schemes != ["all"]
    cfgs = []
    for cfg in configs(args, names):
        try:
            check(SCHEMES[cfg.name], 1, cluster)
        except ConfigError:
            if explicit:
                raise
            print(f"predict: note: {cfg.name} skipped (cannot run on this cluster)", file=sys.stderr)
            continue
        cfgs.append(cfg)
    t0 = time.perf_counter()
    rows = sweep(cfgs, list(range(1, args.workers + 1)), workload, cluster, prof, args.seed, het)
    elapsed = time.perf_counter() - t0
    meta = {"profile": args.profile or "embedded", "profile_note": prof.provenance.note,
            "profile_host": f"{prof.provenance.host}, {prof.cores} cores",
            "profile_created": prof.provenance.created_utc,
            "workload": asdict(workload), "cluster": asdict(cluster), "seed": args.seed,
            "heterogeneity": asdict(het), "simulated_in_s": round(elapsed, 3),
            "kind": "predicted (simulator)"}
    write_outputs(args, rows, meta, cluster)
    if args.trace:
        write_trace(args, cfgs[0], workload, cluster, prof, het)
    return 0


def write_outputs(args, rows, meta, cluster) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "predictions.csv").write_text(to_csv(rows))
    (out / "predictions.json").write_text(to_json(rows, meta))
    if args.format == "csv":
        print(to_csv(rows), end="")
    elif args.format == "json":
        print(to_json(rows, meta))
    else:
        where = (f"{cluster.hosts} host(s) x {cluster.cores_per_host} cores"
                 + (f", {cluster.link.bandwidth_bytes_per_s * 8 / 1e9:g} Gbit/s, "
                    f"{cluster.link.latency_s * 1e6:g} us" if cluster.link else ", shared memory"))
        head = (f"predicted (simulator) | model {meta['workload']['model']}, batch "
                f"{meta['workload']['batch_per_worker']}/worker, {where} | profile: "
                f"{meta['profile']} ({meta['profile_host']}, {meta['profile_created']})")
        print(table(rows, head))
    if not args.no_plot:
        from .plot import speedup_plot
        path = speedup_plot(rows, out / "speedup.png")
        print(f"wrote {path}", file=sys.stderr)


def write_trace(args, cfg, workload, cluster, prof, het) -> None:
    import json
    r = simulate(cfg, args.workers if cfg.name != "serial" else 1, workload, cluster, prof,
                 args.seed, het, trace=True)
    Path(args.trace).write_text(json.dumps(r.trace))
    print(f"wrote {args.trace} ({len(r.trace['traceEvents'])} events)", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
