"""The parameter server's answers under each TCP congestion control, on phantom runs.

Brings the emulated cluster up once per ``--congestion-controls`` name
(``real.cluster up --congestion-control``), runs ``ps_async`` at P = ``--workers`` with
compute replaced by the workload's measured times (``real.sweep --cluster --compute
phantom``), brings it down, and reads from every record where the server's turns went
(``push_order``: the wait for a push's header, the rest of its receive, the send of the
answer w, ``real.schemes.ps``), the time per epoch without warm-up
(``simulator.compare.steady_epoch_s``) and the workers' retransmitted segments
(``comm.tcp``).

What it shows: at P = 12 and 1 Gbit/s, eleven pushes of 37 MB stream into the server's
port while it answers one worker. Under BBR one answer in six takes 1.3 to 2.3 times its
wire time; under CUBIC, Linux's default, every answer takes its wire time (docs/cluster.md,
"TCP congestion control", which of BBR's limits does it is not separated). As root, about
5 minutes:

    python benchmarks/congestion_control.py --out cc/
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cli  # noqa: E402
from contracts import record  # noqa: E402
from contracts.checks import ConfigError  # noqa: E402
from contracts.files import atomic_write_text  # noqa: E402
from benchmarks.switch_buffers import shell  # noqa: E402

PROG = "python benchmarks/congestion_control.py"
WORKLOAD = "docs/results/phantom-24/workloads/vgg11.toml"     # under the repository
LONG = 1.3            # an answer this many times the run's median answer is a slow one


def turns(run_dir: Path, cc: str) -> list[dict]:
    """One row per push the server took: its turn's parts, seconds."""
    rec = record.read(run_dir)
    pushes, update_s = rec["extra"]["push_order"], rec["extra"]["server_update_s"]
    return [{"congestion_control": cc, "run": rec["run_id"], "turn": i,
             "worker": pushes["worker"][i], "header_s": pushes["header_s"][i],
             "vector_s": pushes["vector_s"][i], "update_s": update_s[i],
             "answer_s": pushes["answer_s"][i]}
            for i in range(len(pushes["answer_s"]))]


def summary(run_dir: Path, cc: str) -> dict:
    """A run's time per epoch, its answers' median / mean / worst and slow share, and the
    workers' retransmitted share of segments."""
    from simulator.compare import steady_epoch_s
    rec = record.read(run_dir)
    answers = rec["extra"]["push_order"]["answer_s"]
    median = statistics.median(answers)
    workers = (rec["comm"].get("tcp") or [])[1:]
    sent = sum(h["out_segs"] for h in workers)
    ran = {h.get("congestion_control") for h in rec["comm"].get("tcp") or []}
    return {"congestion_control": cc, "ran": ",".join(sorted(str(x) for x in ran)),
            "run": rec["run_id"], "epoch_s": steady_epoch_s(rec, "ps_async", 1),
            "answer_median_s": median, "answer_mean_s": statistics.fmean(answers),
            "answer_max_s": max(answers),
            "slow_share": sum(a > LONG * median for a in answers) / len(answers),
            "retransmitted": sum(h["retrans_segs"] for h in workers) / sent if sent else 0.0,
            "faithful": not rec.get("testbed_bound") and not rec.get("disturbed")}


def build_parser() -> cli.Parser:
    p = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--congestion-controls", default="bbr,cubic", metavar="NAMES",
                   help="real.cluster up --congestion-control values, comma-separated")
    p.add_argument("--bandwidth", default="1gbit", help="every link's rate, tc units")
    p.add_argument("--workers", default=12, type=cli.int_in(2, 32), metavar="P",
                   help="workers (the cluster has one host more, the server's)")
    p.add_argument("--repeats", default=2, type=cli.int_in(1, 10), help="runs a name")
    p.add_argument("--steps", default=8, type=cli.int_in(2, 100),
                   help="steps of each worker (the training set is steps x 32 x P samples)")
    p.add_argument("--workload", default=None, type=Path,
                   help="a workload file (python -m calibrate.workload); default: the "
                        f"VGG-11 of phantom-24 ({WORKLOAD})")
    p.add_argument("--prefix", default="psgdcc", help="the cluster's names")
    p.add_argument("--subnet", default="10.93.0.0/24", help="its private range")
    p.add_argument("--out", required=True, type=Path, help="folder for runs and tables")
    return p


def sweep(args, cc: str, log) -> Path:
    """The cluster up with ``cc``, ps_async swept on it, the cluster down: the runs' folder."""
    py, runs = sys.executable, args.out / cc
    if shell([py, "-m", "real.cluster", "up", "--hosts", str(args.workers + 1), "--bandwidth",
              args.bandwidth, "--congestion-control", cc, "--prefix", args.prefix,
              "--subnet", args.subnet], log):
        raise RuntimeError(f"cluster up failed with {cc}: see {args.out}/log.txt")
    try:
        shell([py, "-m", "real.sweep", "--cluster", "--prefix", args.prefix, "--resume",
               "--schemes", "ps_async", "--workers", f"{args.workers}-{args.workers}",
               "--repeats", str(args.repeats), "--compute", "phantom",
               "--workload", str(args.workload), "--dataset", "synthetic", "--epochs", "1",
               "--batch-size", "32", "--train-size", str(args.steps * 32 * args.workers),
               "--test-size", "64", "--timeout", "600", "--out", str(runs),
               "--", "--threads", "1"], log)
    finally:
        shell([py, "-m", "real.cluster", "down", "--prefix", args.prefix], log)
    return runs


def run(args) -> int:
    args.workload = (args.workload or ROOT / WORKLOAD).resolve()
    if not args.workload.is_file():
        raise ConfigError(f"no workload file {args.workload}; make one with "
                             "python -m calibrate.workload")
    args.out.mkdir(parents=True, exist_ok=True)
    names = args.congestion_controls.split(",")
    rows, parts = [], []
    with open(args.out / "log.txt", "a") as log:
        for cc in names:
            print(f"{cc}: ps_async at P = {args.workers}, {args.repeats} runs ...", flush=True)
            for d in record.find_runs(sweep(args, cc, log)):
                rows.append(summary(d, cc))
                parts.extend(turns(d, cc))
    write_csv(args.out / "turns.csv", parts)
    write_csv(args.out / "runs.csv", rows)
    print(markdown(rows))
    figure(parts, names, args.out / "answers.png")
    print(f"wrote {args.out}/runs.csv, turns.csv, answers.png")
    return 0


def write_csv(path: Path, rows: list[dict]) -> None:
    import pandas as pd
    atomic_write_text(path, pd.DataFrame(rows).to_csv(index=False))


def markdown(rows: list[dict]) -> str:
    lines = ["| congestion control (ran) | run | s / epoch | answer median / mean / worst s | "
             f"answers over {LONG}x the median | workers' segments retransmitted | faithful |",
             "|---|---|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['congestion_control']} ({r['ran']}) | {r['run']} | "
                     f"{r['epoch_s']:.2f} | {r['answer_median_s']:.3f} / "
                     f"{r['answer_mean_s']:.3f} / {r['answer_max_s']:.3f} | "
                     f"{r['slow_share']:.0%} | {r['retransmitted']:.2%} | "
                     f"{'yes' if r['faithful'] else 'no'} |")
    return "\n".join(lines)


def figure(parts: list[dict], names: list[str], path: Path) -> None:
    """The answers' distribution per congestion control (all runs pooled)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for cc in names:
        a = sorted(r["answer_s"] * 1e3 for r in parts if r["congestion_control"] == cc)
        if a:
            ax.step(a, [(i + 1) / len(a) for i in range(len(a))], where="post", label=cc)
    ax.set_xlabel("the server's send of w to one worker, ms")
    ax.set_ylabel("share of answers")
    ax.set_title("ps_async's answers by TCP congestion control")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
