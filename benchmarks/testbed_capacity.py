"""The emulated cluster's capacity on this machine: the largest P per link rate and workload
at which phantom runs stay faithful (``real.records.testbed``: no rank waited for a core beyond
5% of its window, the latest rank's unpaid sleep lateness at its synchronisations at most
2% of the run, every shaper sent at its rate).

For each link rate, one cluster of max(P) + 1 hosts is brought up (``real.cluster up``,
prefix ``--prefix``, the default switch-like queue), and for each workload and each P in
turn every scheme runs as a phantom (``real.sweep --cluster --compute phantom``), one rank
per host; a point is faithful when none of its records is testbed-bound for a reason of
the machine's (CPU, sleep lateness, links; a bytes mismatch is the scheme's count against
its library's and is shown, not held against the testbed). P grows until a point is not
(the larger P are not run; ``--keep-going`` runs them). Every record stays under ``--out``,
each point lands in ``OUT/rows.json`` as it is measured (``--rows`` prints the table of
one or more of them). As root:

    python benchmarks/testbed_capacity.py --bandwidths 20mbit,100mbit,1gbit \\
        --workloads cnn.toml --schemes allreduce,mpi_allreduce,ps_sync --workers 2,4,8,16 \\
        --out capacity/
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cli  # noqa: E402
from benchmarks.switch_buffers import shell  # noqa: E402
from contracts import record  # noqa: E402

PROG = "python benchmarks/testbed_capacity.py"


def verdicts(runs: Path) -> list[dict]:
    """Scheme, status and the testbed's verdict of every record in ``runs``."""
    out = []
    from simulator.compare import steady_epoch_s
    for d in record.find_runs(runs):
        rec = record.read(d)
        try:
            epoch_s = steady_epoch_s(dict(rec, _folder=d), rec["config"]["algorithm"],
                                     rec["config"].get("epochs", 1))
        except (KeyError, record.RecordError):
            epoch_s = None
        tb = rec.get("testbed") or {}
        checks = tb.get("checks") or {}
        cpu = checks.get("cpu", {}).get("machines") or [{}]
        late = checks.get("sleep_lateness", {})
        out.append({"scheme": rec["config"].get("algorithm"), "status": rec["status"],
                    "testbed_bound": bool(rec.get("testbed_bound")),
                    "reasons": tb.get("reasons") or [],
                    "busy_cores": cpu[0].get("busy_cores"),
                    "system_cores": cpu[0].get("system_cores"),
                    "kernel_irq_cores": cpu[0].get("kernel_irq_cores"),
                    "max_wait_share": cpu[0].get("max_wait_share"),
                    "behind_share": late.get("behind_share"),
                    "late_p99_s": max((r["p99_s"] for r in late.get("per_rank") or []),
                                      default=None),
                    "train_wall_s": rec["timings"].get("train_wall_s"),
                    "steady_epoch_s": epoch_s})
    return out


def machine_reasons(run: dict) -> list[str]:
    """A run's testbed-bound reasons that are the machine's (CPU, sleep lateness, links); a
    bytes mismatch is the scheme's count against its library's (``real.records.wire``), the same
    at every rate, and is shown, not held against the testbed."""
    return [r for r in run["reasons"] if not r.startswith("bytes:")]


def point_faithful(runs: list[dict]) -> bool:
    """Every run completed and none was testbed-bound for a reason of the machine's."""
    return bool(runs) and all(g["status"] == "completed" and not machine_reasons(g)
                              for g in runs)


def _span(runs: list[dict], key: str, scale: float = 1.0, unit: str = "") -> str:
    """The least and largest ``key`` over a point's runs, as ``lo-hi`` (scaled)."""
    got = [g[key] * scale for g in runs if g.get(key) is not None]
    if not got:
        return "-"
    lo, hi = min(got), max(got)
    return f"{lo:.2f}{unit}" if lo == hi else f"{lo:.2f}-{hi:.2f}{unit}"


def print_table(rows: list[dict]) -> None:
    """The points as a markdown table, then the largest faithful P per rate and workload."""
    print("\n| rate | workload | P | faithful | busy cores | CPU wait | behind | p99 late | "
          "testbed-bound runs: first reason |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        bound = [g for g in r["runs"] if g["testbed_bound"]]
        why = f"{bound[0]['scheme']}: {bound[0]['reasons'][0]}" if bound else ""
        print(f"| {r['bandwidth']} | {Path(r['workload']).stem} | {r['workers']} | "
              f"{'yes' if point_faithful(r['runs']) else 'no'} | "
              f"{_span(r['runs'], 'busy_cores')} | "
              f"{_span(r['runs'], 'max_wait_share', 100, '%')} | "
              f"{_span(r['runs'], 'behind_share', 100, '%')} | "
              f"{_span(r['runs'], 'late_p99_s', 1e3, ' ms')} | {len(bound)} {why} |")
    print("\nlargest faithful P:")
    for bw, workload in dict.fromkeys((r["bandwidth"], r["workload"]) for r in rows):
        ok = [r["workers"] for r in rows if r["bandwidth"] == bw and r["workload"] == workload
              and point_faithful(r["runs"])]
        print(f"  {bw} {Path(workload).stem}: {max(ok) if ok else 'none'}")


def build_parser() -> cli.Parser:
    p = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--bandwidths", default="20mbit,100mbit")
    p.add_argument("--workloads", default="cnn.toml", help="workload TOML files, comma-separated")
    p.add_argument("--time-scale", default="1")
    p.add_argument("--schemes", default="allreduce,mpi_allreduce,ps_sync")
    p.add_argument("--workers", default=[2, 4, 8, 16], type=cli.worker_counts, metavar="P",
                   help=cli.WORKERS_HELP)
    p.add_argument("--steps", type=int, default=16, help="training steps of each worker")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--keep-going", action="store_true",
                   help="run every P even after one that is not faithful")
    p.add_argument("--cpus", default=None,
                   help="run the ranks on these CPUs only (taskset -c, e.g. 0): the same "
                        "points with half the CPU show how much the CPU set the result")
    p.add_argument("--prefix", default="psgdcap")
    p.add_argument("--subnet", default="10.95.0.0/24")
    p.add_argument("--out", type=Path,
                   help="folder for the records, log.txt and rows.json (required unless --rows)")
    p.add_argument("--rows", default=None,
                   help="only print the table of these rows.json files (comma-separated)")
    return p


def run(args) -> int:
    if args.rows:
        print_table([r for f in args.rows.split(",") for r in json.loads(Path(f).read_text())])
        return 0
    if args.out is None:
        return cli.usage_error(PROG, "--out is required (or --rows)")
    py = sys.executable
    sizes = args.workers
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    with open(args.out / "log.txt", "a") as log:
        for bw in args.bandwidths.split(","):
            if shell([py, "-m", "real.cluster", "up", "--hosts", str(max(sizes) + 1),
                    "--bandwidth", bw, "--prefix", args.prefix, "--subnet", args.subnet], log):
                print(f"cluster up failed at {bw}: see {args.out}/log.txt")
                return 1
            try:
                for workload in args.workloads.split(","):
                    for n in sizes:
                        runs = args.out / bw / Path(workload).stem / f"P{n}"
                        pin = ["taskset", "-c", args.cpus] if args.cpus else []
                        shell([*pin, py, "-m", "real.sweep", "--cluster", "--prefix", args.prefix,
                             "--schemes", args.schemes, "--workers", f"{n}-{n}",
                             "--compute", "phantom", "--workload", workload,
                             "--time-scale", args.time_scale, "--dataset", "synthetic",
                             "--batch-size", str(args.batch_size), "--train-size",
                             str(args.steps * args.batch_size * n), "--test-size", "64",
                             "--threads", "1", "--out", str(runs)], log)
                        got = verdicts(runs)
                        faithful = point_faithful(got)
                        rows.append({"bandwidth": bw, "workload": workload, "workers": n,
                                     "faithful": faithful, "runs": got})
                        # each point as it lands: a stopped campaign keeps what it measured
                        (args.out / "rows.json").write_text(json.dumps(rows, indent=1))
                        print(f"{bw} {Path(workload).stem} P={n}: "
                              f"{'faithful' if faithful else 'NOT faithful'}", flush=True)
                        if not faithful and not args.keep_going:
                            break
            finally:
                shell([py, "-m", "real.cluster", "down", "--prefix", args.prefix], log)
    print_table(rows)
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
