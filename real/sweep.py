"""Run a scheme for several worker counts, collect the records, draw the speedup graph.

    python -m real.sweep --algorithm psgd --workers 1-5 --dataset fashion-mnist --epochs 1 --out runs/

Each point (scheme, P, repeat) is one ``real.train`` run in its own process
group (rank-based schemes under mpirun), with a time limit. A failed point is
recorded with its cause and the sweep goes on; completed points are skipped
when the sweep is run again (``--force`` re-runs them). Results: ``OUT/results.csv``
(one row per run), ``OUT/summary.csv``, ``OUT/speedup.png``, ``OUT/accuracy.png``.
Flags after ``--`` go to ``real.train`` unchanged.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from . import cli, plots, record, results, schemes

PROG = "python -m real.sweep"


def build_parser() -> cli.Parser:
    p = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--algorithm", default=["psgd"], type=cli.choice_list(schemes.SCHEMES),
                   help=f"scheme(s), comma-separated, or all: {', '.join(schemes.SCHEMES)}")
    p.add_argument("--workers", default=[1, 2], type=cli.worker_range, help="e.g. 1-5 or 1,2,4")
    p.add_argument("--repeats", default=1, type=cli.positive_int, help="runs per point")
    p.add_argument("--model", default="cnn")
    p.add_argument("--dataset", default="fashion-mnist")
    p.add_argument("--epochs", default=1, type=cli.positive_int)
    p.add_argument("--batch-size", default=64, type=cli.positive_int)
    p.add_argument("--train-size", default=None, type=cli.positive_int)
    p.add_argument("--test-size", default=None, type=cli.positive_int)
    p.add_argument("--out", default="runs", help="folder for records, results.csv and plots")
    p.add_argument("--timeout", default=3600.0, type=cli.positive_float,
                   help="seconds one run may take before it is stopped and recorded as failed")
    p.add_argument("--force", action="store_true", help="re-run points that already completed")
    p.add_argument("--cluster", action="store_true",
                   help="run rank-based schemes across the emulated cluster that "
                        "`python -m real.cluster up` made (one rank per host, round robin)")
    p.add_argument("--ranks-per-host", default=1, type=cli.positive_int,
                   help="with --cluster: ranks placed on each host before the next")
    return p


def points(args) -> list[tuple[str, int, int]]:
    """(algorithm, workers, repeat) to run; serial only exists at P = 1.

    Repeat by repeat: every point once, then every point again. The machine's
    speed drifts by several percent over minutes (other tenants, clocks); with a
    point's repeats run back to back, that drift would move one scheme's points
    together and hide in a narrow CI. Spread over the sweep, it shows in the CI.
    """
    return [(a, p, r) for r in range(args.repeats) for a in args.algorithm for p in args.workers
            if a != "serial" or p == 1]


def train_command(alg: str, p: int, run_id: str, args, extra: list[str],
                  cluster=None) -> tuple[list[str], dict]:
    """The command of one point and the environment it adds."""
    py = [sys.executable, "-m", "real.train", "--algorithm", alg, "--run-id", run_id,
          "--out", str(args.out), "--model", args.model, "--dataset", args.dataset,
          "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
          "--repeat", run_id.rsplit("-r", 1)[1]]
    for flag in ("train_size", "test_size"):
        if getattr(args, flag):
            py += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    py += extra
    ranks = schemes.ranks_for(alg, p)
    if alg not in schemes.RANK_BASED:
        return py + (["--workers", str(p)] if alg != "serial" else []), {}
    if cluster is None:
        return [mpirun(), "-n", str(ranks)] + py, {}
    from . import cluster as emu
    env = emu.mpi_env(cluster) | {"MASTER_ADDR": cluster.addresses[0],
                                  "GLOO_SOCKET_IFNAME": cluster.interface,
                                  "PSGD_CLUSTER": json.dumps(cluster.to_json())}
    return emu.mpirun_command(cluster, ranks, py, args.ranks_per_host), env


def mpirun() -> str:
    """The mpirun of this environment (the mpich wheel puts it next to python)."""
    here = Path(sys.executable).parent / "mpirun"
    found = str(here) if here.exists() else shutil.which("mpirun")
    if not found:
        raise FileNotFoundError("mpirun not found: pip install mpich (or load your MPI module)")
    return found


def run_point(cmd: list[str], log_path: Path, timeout_s: float,
              env: dict | None = None) -> tuple[int, str]:
    """Run one point in its own process group; returns (exit code, cause if it failed)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env=os.environ | (env or {}))
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return -9, f"timed out after {timeout_s:.0f} s"
    if code == 0:
        return 0, ""
    tail = [ln.strip() for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()]
    return code, f"exit code {code}: {tail[-1] if tail else 'no output'}"


def is_completed(run_dir: Path) -> bool:
    try:
        return record.read(run_dir)["status"] == "completed"
    except record.RecordError:
        return False


def record_failure(run_dir: Path, alg: str, p: int, rep: int, cause: str, cmd) -> None:
    """Keep the cause of a point that died before writing its own record."""
    try:
        if record.read(run_dir)["status"] == "failed":
            return          # the run recorded its own failure; keep that one
    except record.RecordError:
        pass
    rec = record.RunRecord(run_id=run_dir.name, status="failed",
                           failure={"cause": cause, "rank": None},
                           config={"algorithm": alg, "repeat": rep, "command": cmd},
                           environment={"workers": p, "ranks": p})
    record.write(rec, run_dir.parent)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    try:
        args = build_parser().parse_args(argv)
        mpirun()
    except SystemExit as e:
        return int(e.code or 0)
    except FileNotFoundError as e:
        return cli.usage_error(PROG, str(e))
    cluster = None
    if args.cluster:
        from .cluster import read_state
        cluster = read_state()
        if cluster is None:
            return cli.usage_error(PROG, "--cluster: no emulated cluster is up; start one with "
                                         "`python -m real.cluster up --hosts N --bandwidth 100mbit`")
    out = Path(args.out)
    todo = points(args)
    from tqdm import tqdm
    for alg, p, rep in tqdm(todo, desc="sweep", unit="run", disable=None):
        run_id = f"{alg}-P{p}-r{rep}"
        if not args.force and is_completed(out / run_id):
            continue
        cmd, env = train_command(alg, p, run_id, args, extra, cluster)
        t0 = time.monotonic()
        code, cause = run_point(cmd, out / "logs" / f"{run_id}.log", args.timeout, env)
        status = "ok" if code == 0 else f"FAILED ({cause})"
        print(f"{run_id}: {status} in {time.monotonic() - t0:.1f} s", file=sys.stderr)
        if code != 0:
            record_failure(out / run_id, alg, p, rep, cause, cmd)
    return report(out)


def report(out: Path) -> int:
    df = results.collect(out)
    if df.empty:
        print(f"{PROG}: no run records in {out}", file=sys.stderr)
        return 1
    _write_csv(df, out / "results.csv")
    summary = results.summarize(df)
    failed = df[df["status"] != "completed"]
    for _, r in failed.iterrows():
        print(f"failed: {r.run_id}: {r.failure}", file=sys.stderr)
    if summary.empty:
        return 1
    _write_csv(summary, out / "summary.csv")
    plots.speedup_plot(summary, out / "speedup.png")
    plots.accuracy_plot(summary, out / "accuracy.png")
    print(results.format_table(summary))
    print(f"\nwrote {out / 'results.csv'}, {out / 'summary.csv'}, {out / 'speedup.png'}, "
          f"{out / 'accuracy.png'}")
    return 0 if failed.empty else 1


def _write_csv(df, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    df.to_csv(tmp, index=False)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
