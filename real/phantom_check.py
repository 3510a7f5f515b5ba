"""Check the substitution: a phantom run and the real run agree in time per iteration.

    python -m real.phantom_check --out phantom-check                  # every rank-based scheme
    python -m real.phantom_check --out pc --schemes ddp,ps_sync --repeats 5 --workload cnn.toml

On one host at P = 2, every rank-based scheme runs for real (the seed-000 CNN,
synthetic data) and as a phantom of the CNN's workload file: measured here first by
``calibrate.workload`` (per-worker batch, one torch thread, as each of the two
ranks has), or ``--workload FILE``. The runs alternate real, phantom, real, ... so
the machine's drift falls on both alike. A run's time per iteration is the mean
over its workers of (compute + communication + waiting) per iteration, the first
``--warmup`` iterations left out (start-up, DDP's bucket rebuild, first messages).

A scheme passes when the phantom's mean lies within 5% of the real mean plus the
real runs' own spread (the half-width of their 95% confidence interval, as a share
of their mean): the compute the phantom replaces varies that much by itself. Runs
marked disturbed (other processes took CPU) are left out and counted; a scheme
with fewer than two undisturbed runs of a mode is not judged. Output: a
table on stdout, ``OUT/phantom_check.csv`` (one row per scheme), ``OUT/runs/``
(every record) and ``OUT/cnn.toml`` (the workload used).

Imports: numpy, real (schemes, sweep), simulator.contracts (cli, record, stats).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from real import schemes
from simulator.contracts import cli, record

PROG = "python -m real.phantom_check"
AGREEMENT = 0.05                 # the issue's bar: within 5% beyond the compute's spread
MODES = ("real", "phantom")


def build_parser() -> cli.Parser:
    p = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, type=cli.output_folder,
                   help="folder for the records, the workload and phantom_check.csv")
    p.add_argument("--schemes", default=list(schemes.RANK_BASED),
                   type=cli.choice_list(schemes.RANK_BASED), metavar="NAMES",
                   help=f"rank-based schemes, comma-separated, or all: "
                        f"{', '.join(schemes.RANK_BASED)}")
    p.add_argument("--workload", default=None, type=cli.input_file, metavar="FILE",
                   help="the phantom's workload (default: measure the CNN here with "
                        "python -m calibrate.workload)")
    p.add_argument("--repeats", default=3, type=cli.int_in(2, 100),
                   help="runs of each mode per scheme")
    p.add_argument("--train-size", default=12800, type=cli.positive_int,
                   help="synthetic training samples (100 iterations at P = 2, batch 64)")
    p.add_argument("--batch-size", default=64, type=cli.positive_int, help="per worker")
    p.add_argument("--average-every", default=10, type=cli.positive_int,
                   help="psgd's and async_avg's exchange period")
    p.add_argument("--warmup", default=5, type=cli.nonnegative_int,
                   help="first iterations of a run left out of its time per iteration")
    p.add_argument("--timeout", default=600.0, type=cli.positive_float,
                   help="seconds one run may take")
    return p


def measure_workload(args, out: Path) -> Path:
    """The CNN's workload at the per-worker batch, one thread (what a rank of P = 2 has)."""
    from calibrate import workload
    path = out / "cnn.toml"
    code = workload.main(["--model", "cnn", "--input-shape", "1,28,28", "--batch-size",
                          str(args.batch_size), "--threads", "1", "--out", str(path)])
    if code:
        raise RuntimeError(f"calibrate.workload exited with {code}")
    return path


def run_command(args, alg: str, mode: str, run_id: str, workload: Path) -> list[str]:
    from .sweep import mpirun
    cmd = [mpirun(), "-n", str(schemes.ranks_for(alg, 2)), sys.executable, "-m", "real.train",
           "--schemes", alg, "--model", "cnn", "--dataset", "synthetic", "--train-size",
           str(args.train_size), "--test-size", "256", "--batch-size", str(args.batch_size),
           "--average-every", str(args.average_every), "--threads", "1",
           "--run-id", run_id, "--out", str(Path(args.out) / "runs")]
    if mode == "phantom":
        cmd += ["--compute", "phantom", "--workload", str(workload)]
    return cmd


def time_per_iteration(run_dir: Path, warmup: int) -> float:
    """Mean over the workers of their (compute + comm + wait) per training iteration, the
    first ``warmup`` iterations of each left out."""
    it = record.read_iterations(run_dir)
    steps = it[it["batch_size"] > 0]
    per_rank = []
    for _, g in steps.groupby("rank"):
        g = g.sort_values("iteration").iloc[warmup:]
        per_rank.append(float((g["compute_s"] + g["comm_s"] + g["wait_s"]).mean()))
    return sum(per_rank) / len(per_rank)


def run_all(args, workload: Path) -> dict:
    """(scheme, mode) -> [(time per iteration, disturbed)], runs alternating the modes."""
    from .sweep import run_point
    times: dict = {}
    out = Path(args.out)
    for rep in range(args.repeats):
        for alg in args.schemes:
            for mode in MODES:
                run_id = f"{alg}-{mode}-r{rep}"
                t0 = time.monotonic()
                code, cause = run_point(run_command(args, alg, mode, run_id, workload),
                                        out / "logs" / f"{run_id}.log", args.timeout,
                                        label=run_id)
                if code != 0:
                    print(f"{run_id}: FAILED ({cause})", file=sys.stderr)
                    continue
                rec = record.read(out / "runs" / run_id)
                t = time_per_iteration(out / "runs" / run_id, args.warmup)
                times.setdefault((alg, mode), []).append((t, record.is_disturbed(rec)))
                print(f"{run_id}: {t * 1e3:.3f} ms per iteration"
                      f"{' (disturbed)' if record.is_disturbed(rec) else ''} in "
                      f"{time.monotonic() - t0:.0f} s", file=sys.stderr)
    return times


def verdicts(times: dict, schemes_: list[str]) -> list[dict]:
    from simulator.contracts.stats import mean_ci95
    rows = []
    for alg in schemes_:
        kept = {m: [t for t, bad in times.get((alg, m), []) if not bad] for m in MODES}
        left = sum(bad for m in MODES for _, bad in times.get((alg, m), []))
        (real, real_ci), (ph, ph_ci) = (mean_ci95(kept[m]) for m in MODES)
        spread = real_ci / real if real else float("nan")
        diff = (ph - real) / real if real else float("nan")
        judged = min(len(kept["real"]), len(kept["phantom"])) >= 2
        ok = judged and abs(diff) <= AGREEMENT + spread
        rows.append({"scheme": alg, "real_ms": real * 1e3, "real_ci_ms": real_ci * 1e3,
                     "phantom_ms": ph * 1e3, "phantom_ci_ms": ph_ci * 1e3,
                     "runs": min(len(kept["real"]), len(kept["phantom"])),
                     "disturbed_left_out": left, "difference": diff,
                     "allowed": AGREEMENT + spread, "agrees": bool(ok), "judged": judged})
    return rows


def table(rows: list[dict]) -> str:
    lines = [(f"{'scheme':<15}{'real ms/it':>18}{'phantom ms/it':>18}{'diff':>8}{'allowed':>9}"
              f"{'runs':>6}  verdict")]
    for r in rows:
        lines.append(f"{r['scheme']:<15}{r['real_ms']:>10.3f} ± {r['real_ci_ms']:<5.3f}"
                     f"{r['phantom_ms']:>10.3f} ± {r['phantom_ci_ms']:<5.3f}"
                     f"{r['difference']:>+8.1%}{r['allowed']:>9.1%}{r['runs']:>6}  "
                     + ("agrees" if r["agrees"] else "MISSES" if r["judged"] else
                        "not judged: fewer than 2 undisturbed runs of a mode")
                     + (f" ({r['disturbed_left_out']} disturbed left out)"
                        if r["disturbed_left_out"] else ""))
    return "\n".join(lines)


def main(argv=None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    workload = Path(args.workload) if args.workload else measure_workload(args, out)
    print(f"{PROG}: {len(args.schemes)} scheme(s) x 2 modes x {args.repeats} runs at P = 2, "
          f"workload {workload}", file=sys.stderr)
    rows = verdicts(run_all(args, workload), args.schemes)
    import pandas as pd

    from simulator.contracts.files import atomic_write_text
    atomic_write_text(out / "phantom_check.csv", pd.DataFrame(rows).to_csv(index=False))
    cli.print_out(f"phantom against real, P = 2 on one host, {time.strftime('%Y-%m-%d')} "
                  f"(time per iteration: mean ± 95% CI over runs)", table(rows))
    return 0 if all(r["agrees"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
