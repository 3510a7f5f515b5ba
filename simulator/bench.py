"""``python -m simulator.bench``: how fast the simulator runs.

Reports SimPy events per second of the message-level and analytic models on
a mid-size run, and the wall time of 1,000 iterations of synchronous
allreduce at P = 1024 (the fast path that ``engine="auto"`` picks there).
"""
from __future__ import annotations

import argparse
import sys
import time

from .config import Cluster, Link, SchemeConfig, Workload
from .profile import load_default
from .simulate import simulate


def timed(*args, **kw):
    t0 = time.perf_counter()
    r = simulate(*args, **kw)
    return r, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m simulator.bench", description=__doc__,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--workers", type=int, default=1024, help="P of the large run")
    p.add_argument("--iterations", type=int, default=1000, help="iterations of the large run")
    p.add_argument("--des-workers", type=int, default=32, help="P of the event-rate runs")
    p.add_argument("--des-iterations", type=int, default=50)
    args = p.parse_args(argv)
    prof = load_default()
    hosts = max(1, args.workers // 8)
    cluster = Cluster(hosts=hosts, cores_per_host=8, link=Link(1.25e9, 20e-6))
    small = Cluster(hosts=max(1, args.des_workers // 4), cores_per_host=4, link=Link(1.25e9, 20e-6))
    print(f"{'run':<52} {'wall_s':>8} {'events':>9} {'events/s':>10}")
    for scheme, fidelity in (("mpi_allreduce", "message"), ("allreduce", "message"),
                             ("mpi_allreduce", "analytic"), ("ps_async", "message"),
                             ("hogwild", "analytic")):
        c = Cluster(hosts=1, cores_per_host=4) if scheme == "hogwild" else small
        # per-layer rings send 2(P-1) messages per layer: fewer iterations keep it short
        it = max(1, args.des_iterations // 10) if scheme == "allreduce" else args.des_iterations
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
