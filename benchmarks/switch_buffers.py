"""Drops and retransmission stalls on the emulated cluster, by the shapers' queue.

For each link rate and each ``--queue`` of ``real.cluster up`` (a time, tc tbf's
latency, or a size in bytes, tbf's limit) this brings a cluster up (prefix ``--prefix``),
runs ``real.sweep --cluster`` of each scheme at each P, brings it down, and reads from
every record what the shapers dropped (``testbed.checks.links``, ``real.cluster.linkstats``),
the TCP retransmission timeouts of the hosts (``comm.tcp``, ``real.records.tcpstats``), the time
per epoch with warm-up left out (``simulator.compare.steady_epoch_s``) and the share of
it spent in steps stalled 150 ms or more past the run's typical step
(``simulator.stalls``). As root:

    python benchmarks/switch_buffers.py --bandwidths 20mbit,100mbit --queues 5ms,256kb \\
        --schemes gather_scatter,ps_sync,mpi_allreduce,allreduce --workers 8 --out buffers/
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cli  # noqa: E402
from contracts import record  # noqa: E402

PROG = "python benchmarks/switch_buffers.py"


def shell(argv: list[str], log) -> int:
    log.write(f"$ {' '.join(argv)}\n")
    log.flush()
    return subprocess.run(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT).returncode


def figures(run_dir: Path) -> dict:
    """Drops, timeouts, time per epoch and stalls of one record."""
    from simulator.compare import steady_epoch_s
    from simulator.stalls import stall_s
    rec = record.read(run_dir)
    it = record.read_iterations(run_dir)
    scheme, epochs = rec["config"]["algorithm"], rec["config"]["epochs"]
    shapers = (rec.get("testbed") or {}).get("checks", {}).get("links", {}).get("shapers") or []
    hosts = [s for s in shapers if s["name"].endswith("->switch")]
    ports = [s for s in shapers if s["name"].startswith("switch->")]

    def dropped(rows):
        sent, lost = sum(r["packets"] for r in rows), sum(r["drops"] for r in rows)
        return lost / (sent + lost) if sent + lost else 0.0
    tcp = rec["comm"].get("tcp") or []
    epoch_s = steady_epoch_s(rec, scheme, epochs)
    return {"scheme": scheme, "workers": rec["environment"].get("workers"),
            "status": rec["status"], "epoch_s": epoch_s,
            "stall_share": (stall_s(it, scheme) or 0.0) / epochs / epoch_s,
            "timeouts_per_epoch": sum(h.get("timeouts", 0) for h in tcp) / epochs,
            "dropped_at_hosts": dropped(hosts), "dropped_at_switch": dropped(ports),
            "testbed_bound": rec.get("testbed_bound"), "disturbed": rec.get("disturbed")}


def build_parser() -> cli.Parser:
    p = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--bandwidths", default="20mbit,100mbit")
    p.add_argument("--queues", default="5ms,256kb", help="real.cluster up --queue values")
    p.add_argument("--schemes", default="gather_scatter,ps_sync,mpi_allreduce,allreduce")
    p.add_argument("--workers", default=[8], type=cli.worker_counts, metavar="P",
                   help=cli.WORKERS_HELP)
    p.add_argument("--train-size", default="3072")
    p.add_argument("--prefix", default="psgdbuf")
    p.add_argument("--subnet", default="10.92.0.0/24")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("train_args", nargs="*", help="after --: more real.train flags")
    return p


def run(args) -> int:
    py = sys.executable
    max_p, workers = max(args.workers), cli.workers_flag(args.workers)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    with open(args.out / "log.txt", "a") as log:
        for bw in args.bandwidths.split(","):
            for queue in args.queues.split(","):
                runs = args.out / f"{bw}-{queue}"
                if shell([py, "-m", "real.cluster", "up", "--hosts", str(max_p + 1), "--bandwidth",
                        bw, "--queue", queue, "--prefix", args.prefix,
                        "--subnet", args.subnet], log):
                    print(f"cluster up failed at {bw}, {queue}: see {args.out}/log.txt")
                    return 1
                try:
                    shell([py, "-m", "real.sweep", "--cluster", "--prefix", args.prefix,
                         "--schemes", args.schemes, "--workers", workers, "--model", "mlp",
                         "--dataset", "synthetic", "--epochs", "1", "--batch-size", "32",
                         "--train-size", args.train_size, "--test-size", "64",
                         "--out", str(runs), "--", "--threads", "1", *args.train_args], log)
                finally:
                    shell([py, "-m", "real.cluster", "down", "--prefix", args.prefix], log)
                for d in record.find_runs(runs):
                    rows.append({"bandwidth": bw, "queue": queue, **figures(d)})
    (args.out / "rows.json").write_text(json.dumps(rows, indent=1))
    print("| rate | queue | scheme | P | dropped at the hosts | at the switch | TCP timeouts / "
          "epoch | s per epoch | in stalls | testbed-bound |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (r["bandwidth"], r["scheme"], r["workers"], r["queue"])):
        print(f"| {r['bandwidth']} | {r['queue']} | {r['scheme']} | {r['workers']} | "
              f"{r['dropped_at_hosts']:.1%} | {r['dropped_at_switch']:.1%} | "
              f"{r['timeouts_per_epoch']:g} | {r['epoch_s']:.3f} | {r['stall_share'] or 0:.0%} | "
              f"{'yes' if r['testbed_bound'] else 'no'} |")
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
