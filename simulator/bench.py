"""``python -m simulator.bench``: how fast the simulator runs.

Reports SimPy events per second of the message-level and analytic models on
a mid-size run, and the wall time of 1,000 iterations of synchronous
allreduce at P = 1024 (the fast path that ``engine="auto"`` picks there).

Imports: cli, contracts (cluster, profile, workload), simulator.engine,
simulator.model.config.
"""
from __future__ import annotations

import sys
import time

from cli import ONE_WORKER_HELP, Parser, command, int_in, one_worker_count, usage_error
from contracts.cluster import Cluster, Link
from contracts.profile import load_default
from contracts.workload import Workload
from simulator.engine import simulate
from simulator.model.config import SchemeConfig
from simulator.model.schemes import SCHEMES

# Measured on a 2-core host: 1024 x 1000 on the fast path in about a second, 32 x 50 SimPy
# message-level runs in seconds; these limits keep either within minutes.
MAX_FAST_WORK = 10**7
MAX_DES_WORK = 5_000


def timed(*args, **kw):
    t0 = time.perf_counter()
    r = simulate(*args, **kw)
    return r, time.perf_counter() - t0


PROG = "python -m simulator.bench"


def build_parser() -> Parser:
    p = Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=one_worker_count(8, 8192), default=1024, metavar="P",
                   help=f"P of the large run: {ONE_WORKER_HELP}")
    p.add_argument("--iterations", type=int_in(1, 100_000), default=1000,
                   help="iterations of the large run")
    p.add_argument("--des-workers", type=one_worker_count(4, 128), default=32, metavar="P",
                   help="P of the event-rate runs")
    p.add_argument("--des-iterations", type=int_in(10, 10_000), default=50,
                   help="iterations of the event-rate runs")
    return p


def main(argv: list[str] | None = None) -> int:
    return command(PROG, build_parser().parse_args, run, argv)


def run(args) -> int:
    for what, work, most in (("--workers x --iterations", args.workers * args.iterations,
                              MAX_FAST_WORK),
                             ("--des-workers x --des-iterations",
                              args.des_workers * args.des_iterations, MAX_DES_WORK)):
        if work > most:
            return usage_error(PROG, f"{what} is {work} worker-iterations, more than this "
                                   f"benchmark runs in minutes ({most})")
    prof = load_default()
    hosts = max(1, args.workers // 8)
    cluster = Cluster(hosts=hosts, cores_per_host=8, link=Link(1.25e9, 20e-6))
    small = Cluster(hosts=max(1, args.des_workers // 4), cores_per_host=4, link=Link(1.25e9, 20e-6))
    print(f"{'run':<52} {'wall_s':>8} {'events':>9} {'events/s':>10}")
    for scheme, fidelity in (("mpi_allreduce", "message"), ("allreduce", "message"),
                             ("mpi_allreduce", "analytic"), ("ps_async", "message"),
                             ("hogwild", "analytic")):
        c = Cluster(hosts=1, cores_per_host=4) if SCHEMES[scheme].single_host else small
        # per-layer rings send 2(P-1) messages per layer: fewer iterations keep it short
        per_tensor = SCHEMES[scheme].exchange == "per_tensor"
        it = max(1, args.des_iterations // 10) if per_tensor else args.des_iterations
        r, dt = timed(SchemeConfig(scheme, fidelity=fidelity, engine="des"), args.des_workers,
                      Workload(iterations=it), c, prof)
        label = f"{scheme} {fidelity} des P={args.des_workers} x{it} it"
        print(f"{label:<52} {dt:8.3f} {r.events:9d} {r.events / dt:10.0f}")
    r, dt = timed("mpi_allreduce", args.workers, Workload(iterations=args.iterations), cluster, prof)
    label = f"mpi_allreduce auto({r.engine}) P={args.workers} x{args.iterations} it"
    print(f"{label:<52} {dt:8.3f} {'-':>9} {'-':>10}")
    r, dt = timed(SchemeConfig("mpi_allreduce", engine="des"), args.workers,
                  Workload(iterations=20), cluster, prof)
    label = f"mpi_allreduce analytic des P={args.workers} x20 it"
    print(f"{label:<52} {dt:8.3f} {r.events:9d} {r.events / dt:10.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
