"""The communication-bound experiment on the emulated cluster, end to end, in one command.

    python -m real.cluster_experiment --out cluster-runs/          # ~10 min on 2 cores, as root

1. **profile**: ``python -m calibrate --quick --models MODEL --threads 1
   --max-workers 2`` on the plain machine (compute, core sharing and the local
   transports, seen only at P <= 2);
2. for each ``--bandwidths`` rate, ``emulated_cluster(max P + 1 hosts, rate)``:
   at ``--calibrate-at`` only, ``python -m calibrate.link`` fits the link
   (``OUT/link.toml``); then ``python -m real.sweep --cluster`` runs every scheme
   at every P, one rank per host and one thread per rank (``ps_sync`` has P + 1
   ranks: its server is a host of its own); the cluster is torn down however
   the block ends;
3. **compare**: ``simulator.compare`` predicts every record on its own cluster
   (its shaped rate, the calibrated latency and payload share, the machine's
   cores shared by all hosts) and reports the error on all points, on the worker
   counts the profile did not see, and on the rates the link calibration did
   not see: ``OUT/compare.csv``, ``OUT/errors.csv``, ``OUT/table.md`` and the
   figure ``OUT/cluster-compare.png`` (``--figure`` copies it elsewhere).

``--skip-runs`` redoes only step 3 from what ``OUT`` holds.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from . import cli

PROG = "python -m real.cluster_experiment"
REPO_ROOT = Path(__file__).resolve().parents[1]


def build_parser() -> cli.Parser:
    p = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--out", default="cluster-runs", help="folder for everything")
    p.add_argument("--bandwidths", default="200mbit,1gbit",
                   help="shaped link rates, comma-separated (tc units)")
    p.add_argument("--calibrate-at", default=None,
                   help="the one rate the link calibration sees (default: the first)")
    p.add_argument("--schemes", default=["ps_sync", "allreduce", "gather_scatter"],
                   type=cli.choice_list(("ps_sync", "allreduce", "gather_scatter", "mpi_allreduce",
                                         "psgd", "ps_async", "ddp", "async_avg"), allow_all=False),
                   help="rank-based schemes")
    p.add_argument("--workers", default=[2, 3, 4], type=cli.worker_range, help="P values")
    p.add_argument("--model", default="ps_cnn", help="1.2 M parameters: 4.8 MB of gradients")
    p.add_argument("--batch-size", default=32, type=cli.positive_int, help="per worker")
    p.add_argument("--train-size", default=768, type=cli.positive_int,
                   help="synthetic samples per epoch (P=4: 6 steps)")
    p.add_argument("--repeats", default=1, type=cli.positive_int, help="runs per point")
    p.add_argument("--profile", default=None,
                   help="use this profile instead of calibrating one (step 1)")
    p.add_argument("--timeout", default=240.0, type=cli.positive_float, help="seconds per run")
    p.add_argument("--skip-runs", action="store_true", help="only compare what OUT holds")
    p.add_argument("--figure", default=None, help="also copy the figure here (e.g. docs/...png)")
    return p


def _env() -> dict:
    bin_dir = str(Path(sys.executable).parent)
    return os.environ | {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
                         "PYTHONPATH": str(REPO_ROOT)}


def _run(argv: list[str], log: Path, timeout_s: float) -> None:
    """One step as a subprocess; its output goes to ``log``; a failure stops the experiment."""
    print(f"{PROG}: {' '.join(argv[2:])}", file=sys.stderr)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as f:
        code = subprocess.run(argv, cwd=REPO_ROOT, env=_env(), stdout=f, stderr=subprocess.STDOUT,
                              timeout=timeout_s).returncode
    if code != 0:
        tail = (log.read_text(errors="replace").strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"`{' '.join(argv[2:])}` failed (exit {code}; log {log}): {tail}")


def calibrate_profile(args, out: Path) -> Path:
    if args.profile:
        return Path(args.profile)
    profile = out / "profile.json"
    _run([sys.executable, "-m", "calibrate", "--quick", "--models", args.model, "--threads", "1",
          "--batches", f"16,{args.batch_size},64" if args.batch_size not in (16, 64) else "16,64",
          "--max-workers", "2", "--workdir", str(out / "calibration"), "--out", str(profile)],
         out / "logs" / "calibrate.log", 600)
    return profile


def run_at(rate: str, args, out: Path, link_toml: Path, calibrate_link: bool) -> None:
    """Bring the cluster up at ``rate``, calibrate its link (once), sweep, tear down."""
    from .cluster import emulated_cluster, parse_bandwidth
    hosts = max(args.workers) + 1                   # ps_sync: P workers + the server
    tag = f"{parse_bandwidth(rate) // 10**6}mbit"
    with emulated_cluster(hosts, rate):
        if calibrate_link:
            _run([sys.executable, "-m", "calibrate.link", "--out", str(link_toml),
                  "--workdir", str(out / "link")], out / "logs" / f"link-{tag}.log", 300)
        n_runs = len(args.schemes) * len(args.workers) * args.repeats
        _run([sys.executable, "-m", "real.sweep", "--cluster",
              "--algorithm", ",".join(args.schemes),
              "--workers", ",".join(map(str, args.workers)), "--repeats", str(args.repeats),
              "--model", args.model, "--dataset", "synthetic", "--epochs", "1",
              "--batch-size", str(args.batch_size), "--train-size", str(args.train_size),
              "--test-size", "64", "--timeout", str(args.timeout), "--out", str(out / f"runs-{tag}"),
              "--", "--threads", "1"],
             out / "logs" / f"sweep-{tag}.log", args.timeout * n_runs + 60)


def main(argv=None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    from .cluster import parse_bandwidth
    from .cluster_netns import ClusterUnavailable, require_tools
    out = Path(args.out)
    rates = [r.strip() for r in args.bandwidths.split(",") if r.strip()]
    try:
        for r in rates + ([args.calibrate_at] if args.calibrate_at else []):
            parse_bandwidth(r)
    except ValueError as e:
        return cli.usage_error(PROG, str(e))
    cal_at = args.calibrate_at or rates[0]
    if cal_at not in rates:
        return cli.usage_error(PROG, f"--calibrate-at {cal_at} is not one of --bandwidths")
    link_toml = out / "link.toml"
    try:
        if not args.skip_runs:
            require_tools()
            out.mkdir(parents=True, exist_ok=True)
            profile = calibrate_profile(args, out)
            for rate in rates:
                run_at(rate, args, out, link_toml, calibrate_link=(rate == cal_at))
        else:
            profile = Path(args.profile) if args.profile else out / "profile.json"
    except ClusterUnavailable as e:
        return cli.usage_error(PROG, str(e))
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    from .cluster_report import report
    return report(out, profile, link_toml, parse_bandwidth(cal_at), args.figure)


if __name__ == "__main__":
    sys.exit(main())
