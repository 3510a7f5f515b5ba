"""The communication-bound experiment on the emulated cluster, end to end, in one command.

    python -m pipelines.validate_cluster --out validation-cluster/    # ~10 min on 2 cores, as root

1. **profile**: ``python -m calibrate --quick --models MODEL --threads 1
   --max-workers K`` on the plain machine (compute, core sharing and the local
   transports, seen only at P <= K; ``--calibrate-workers K``, at most 4);
2. for each ``--bandwidths`` rate, ``python -m real.cluster up`` (max P + 1 hosts):
   at ``--calibrate-at`` only, ``python -m calibrate.link`` fits the link
   (``OUT/link.toml``: rate, latency, socket buffer, ACK share); then
   ``python -m real.sweep --cluster`` runs every scheme at every P, one rank per
   host and one thread per rank (``ps_sync`` and ``ps_async`` have P + 1 ranks:
   the server is a host of its own); the cluster is torn down however the block
   ends;
3. **compare**: ``simulator.compare`` predicts every record on its own cluster
   (its shaped rate, the calibrated link, the machine's cores shared by all
   hosts) and reports the error on all points, on the worker counts the profile
   did not see, and on the rates the link calibration did not see:
   ``OUT/compare.csv`` (with the measured and predicted compute, communication
   and waiting per worker and epoch), ``OUT/errors.csv``, ``OUT/table.md``, the
   figure ``OUT/cluster-compare.png`` (``--figure`` copies it elsewhere) and
   ``OUT/cluster-breakdown.png`` (where the epoch went, measured beside predicted).

The regime of issue 21 (every rank-based scheme, three rates, P up to 16)::

    python -m pipelines.validate_cluster --out validation-cluster --schemes all \
        --bandwidths 20mbit,100mbit,1gbit --calibrate-at 100mbit \
        --workers 2,3,4,6,8,12,16 --calibrate-workers 4

``--skip-runs`` redoes only step 3 from what ``OUT`` holds. The stages run as
commands of their own (``real``, ``calibrate``), so this tool imports neither.

Imports: simulator.compare, cli, contracts (cluster, profile, units),
simulator.output.cluster_report.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import cli
from contracts.files import atomic_write_text
from contracts.units import parse_bandwidth

# python -m simulator.validate_cluster where that old path handed over (the program typed)
PROG = cli.program("python -m pipelines.validate_cluster")
REPO_ROOT = Path(__file__).resolve().parents[1]


def _rates(text: str) -> list[str]:
    """Comma-separated link rates as tc writes them (200mbit, 1gbit), each one checked."""
    rates = [r.strip() for r in str(text).split(",") if r.strip()]
    if not rates:
        raise argparse.ArgumentTypeError(f"{text!r} names no rate")
    for r in rates:
        tc_rate(r)
    return rates


def tc_rate(text: str) -> str:
    """A link rate as tc writes it (``200mbit``), checked; the text itself is kept."""
    try:
        rate_bits_per_s(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


MAX_P = 253                       # P + 1 hosts in the emulated cluster's /24


def build_parser() -> cli.Parser:
    p = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--out", default="validation-cluster", type=cli.output_folder,
                   help="folder for everything")
    p.add_argument("--bandwidths", default=["200mbit", "1gbit"], type=_rates,
                   help="shaped link rates, comma-separated (tc units)")
    p.add_argument("--calibrate-at", default=None, type=tc_rate,
                   help="the one rate the link calibration sees (default: the first)")
    p.add_argument("--schemes", "--algorithm", dest="schemes", metavar="NAMES",
                   default=["ps_sync", "allreduce", "gather_scatter"],
                   type=cli.choice_list(("ps_sync", "allreduce", "gather_scatter", "mpi_allreduce",
                                         "psgd", "ps_async", "ddp", "async_avg")),
                   help="rank-based schemes, comma-separated, or all")
    p.add_argument("--workers", default=[2, 3, 4], type=cli.worker_counts_up_to(MAX_P),
                   metavar="P", help=f"{cli.WORKERS_HELP} (default: 2,3,4)")
    p.add_argument("--calibrate-workers", default=2, type=cli.int_in(1, 4),
                   help="the compute profile sees at most this many processes (P <= 4)")
    p.add_argument("--model", default="ps_cnn", help="1.2 M parameters: 4.8 MB of gradients")
    p.add_argument("--batch-size", default=32, type=cli.positive_int, help="per worker")
    p.add_argument("--train-size", default=768, type=cli.positive_int,
                   help="synthetic samples per epoch (P=4: 6 steps)")
    p.add_argument("--repeats", default=1, type=cli.int_in(1, 1000), help="runs per point")
    p.add_argument("--retry-disturbed", default=1, type=cli.int_in(0, 10), metavar="N",
                   help="run a point again, up to N times, while other processes disturb it")
    p.add_argument("--profile", default=None, type=cli.input_file,
                   help="use this profile instead of calibrating one (step 1)")
    p.add_argument("--timeout", default=240.0, type=cli.float_in(1, 86400),
                   help="seconds per run")
    p.add_argument("--force-calibration", action="store_true",
                   help="keep a compute profile whose fits are below calibrate's bar "
                        "(OUT/calibration/quality.json says which)")
    p.add_argument("--skip-runs", action="store_true", help="only compare what OUT holds")
    p.add_argument("--figure", default=None, type=cli.output_file(".png"),
                   help="also copy the figure here (e.g. docs/...png)")
    return p


def preflight(args, out: Path) -> str | None:
    """Why a stage would refuse its flags, asked before the cluster comes up: real.sweep
    checks the scheme's command (model, sizes) with ``--dry-run``; a given profile loads."""
    if args.profile:
        from contracts import profile as profiles
        try:
            profiles.load(args.profile)
        except profiles.ProfileError as e:
            return f"--profile: {e}"
    if args.skip_runs:
        return None
    cmd = [sys.executable, "-m", "real.sweep", "--dry-run", "--schemes", ",".join(args.schemes),
           "--workers", "1-1", "--model", args.model, "--dataset", "synthetic", "--epochs", "1",
           "--batch-size", str(args.batch_size), "--train-size", str(args.train_size),
           "--test-size", "64", "--out", str(out / "runs-preflight"), "--", "--threads", "1"]
    done = subprocess.run(cmd, cwd=REPO_ROOT, env=_env(), capture_output=True, text=True)
    if done.returncode != 0:
        line = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return line.split(": error: ", 1)[-1].replace("python -m real.sweep", PROG)
    return None


def _env() -> dict:
    bin_dir = str(Path(sys.executable).parent)
    return os.environ | {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
                         "PYTHONPATH": str(REPO_ROOT)}


def _run(argv: list[str], log: Path, timeout_s: float, prog: str = PROG) -> None:
    """One step as a subprocess; its output goes to ``log``; a failure stops the experiment."""
    print(f"{prog}: {' '.join(argv[2:])}", file=sys.stderr)
    code, text = cli.run_stage(argv, log, timeout_s, cwd=REPO_ROOT, env=_env())
    if code != 0:
        raise RuntimeError(f"`{' '.join(argv[2:])}` failed (exit {code}; log {log}): "
                           f"{cli.last_line(text)}")


def calibrate_flags(args, out: Path) -> list[str]:
    """``python -m calibrate``'s flags for the profile of ``OUT/profile.json``: the quick plan
    of ``args.model`` with at most ``--calibrate-workers`` processes."""
    return ["--quick", "--models", args.model, "--threads", "1",
            "--batches", ",".join(map(str, sorted({16, args.batch_size, 64, 256}))),
            *(["--force"] if args.force_calibration else []),
            "--max-workers", str(args.calibrate_workers), "--workdir", str(out / "calibration"),
            "--out", str(out / "profile.json")]


def calibrate_profile(args, out: Path, prog: str = PROG) -> Path:
    if args.profile:
        return Path(args.profile)
    _run([sys.executable, "-m", "calibrate", *calibrate_flags(args, out)],
         out / "logs" / "calibrate.log", 600, prog)
    return out / "profile.json"


def rate_bits_per_s(rate: str) -> int:
    """A tc rate (``200mbit``, ``1gbit``) in bits per second."""
    return int(round(8 * parse_bandwidth(rate)))


def run_at(rate: str, args, out: Path, link_toml: Path, calibrate_link: bool) -> None:
    """Bring the cluster up at ``rate``, calibrate its link (once), sweep, tear down."""
    hosts = max(args.workers) + 1                   # ps_sync: P workers + the server
    tag = f"{rate_bits_per_s(rate) // 10**6}mbit"
    with cluster_up(hosts, rate, out / "logs" / f"cluster-{tag}.log"):
        if calibrate_link:
            _run([sys.executable, "-m", "calibrate.link", "--out", str(link_toml),
                  "--workdir", str(out / "link")], out / "logs" / f"link-{tag}.log", 300)
        n_runs = len(args.schemes) * len(args.workers) * args.repeats
        _run([sys.executable, "-m", "real.sweep", "--cluster",
              "--schemes", ",".join(args.schemes),
              "--workers", cli.workers_flag(args.workers), "--repeats", str(args.repeats),
              "--retry-disturbed", str(args.retry_disturbed),
              "--model", args.model, "--dataset", "synthetic", "--epochs", "1",
              "--batch-size", str(args.batch_size), "--train-size", str(args.train_size),
              "--test-size", "64", "--timeout", str(args.timeout), "--out", str(out / f"runs-{tag}"),
              "--", "--threads", "1"],
             out / "logs" / f"sweep-{tag}.log", args.timeout * n_runs + 60)


@contextmanager
def cluster_up(hosts: int, rate: str, log: Path, prog: str = PROG):
    """``python -m real.cluster up`` around a block; ``down`` however the block ends."""
    _run([sys.executable, "-m", "real.cluster", "up", "--hosts", str(hosts), "--bandwidth", rate],
         log, 120, prog)
    try:
        yield
    finally:
        subprocess.run([sys.executable, "-m", "real.cluster", "down"], cwd=REPO_ROOT, env=_env(),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)


def cluster_tools_missing() -> str | None:
    """Why the emulated cluster cannot be built here (root, ip, tc), or None."""
    if os.geteuid() != 0:
        return "the emulated cluster needs root (network namespaces)"
    missing = [t for t in ("ip", "tc") if shutil.which(t) is None]
    return f"the emulated cluster needs {' and '.join(missing)} (iproute2)" if missing else None


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


def run(args) -> int:
    out = Path(args.out)
    rates = args.bandwidths
    cal_at = args.calibrate_at or rates[0]
    if cal_at not in rates:
        return cli.usage_error(PROG, f"--calibrate-at {cal_at} is not one of --bandwidths")
    link_toml = out / "link.toml"
    if not args.skip_runs and cluster_tools_missing():
        return cli.usage_error(PROG, cluster_tools_missing())
    problem = preflight(args, out)
    if problem:
        return cli.usage_error(PROG, problem)
    try:
        if not args.skip_runs:
            out.mkdir(parents=True, exist_ok=True)
            profile = calibrate_profile(args, out)
            for rate in rates:
                run_at(rate, args, out, link_toml, calibrate_link=(rate == cal_at))
        else:
            profile = Path(args.profile) if args.profile else out / "profile.json"
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    return report(out, profile, link_toml, rate_bits_per_s(cal_at), args.figure)


def _within(path: Path, out: Path) -> str:
    """``path`` as the report names it: relative to OUT when it lies there (OUT/profile.json)."""
    try:
        return f"OUT/{Path(path).resolve().relative_to(Path(out).resolve())}"
    except ValueError:
        return str(path)


def report(out: Path, profile_path: Path, link_toml: Path, calibrated_bits_per_s: float,
           figure_copy: str | None = None) -> int:
    from simulator.compare import compare
    from contracts import profile as profiles
    from contracts.checks import ConfigError
    from contracts.cluster import load_link_calibration
    from simulator.output.cluster_report import (
        breakdown_figure,
        error_table,
        figure,
        markdown_errors,
        markdown_table,
        with_flags,
    )
    try:
        prof = profiles.load(profile_path)
        link = load_link_calibration(link_toml)
    except (profiles.ProfileError, ConfigError) as e:
        return cli.usage_error(PROG, str(e))
    skipped: list = []
    df = compare(out, prof, link=link, skipped=skipped)
    for where, why in skipped:
        print(f"{PROG}: skipped {where}: {why}", file=sys.stderr)
    if df.empty:
        return cli.usage_error(PROG, f"no completed run records under {out}")
    df = with_flags(df[df["hosts"] > 1], calibrated_bits_per_s)
    errors = error_table(df)
    atomic_write_text(out / "compare.csv", df.to_csv(index=False))
    atomic_write_text(out / "errors.csv", errors.to_csv(index=False))
    seen = list(prof.provenance.workers_seen)
    text = (f"Profile: {_within(profile_path, out)} (workers seen {seen}); link: "
            f"{_within(link_toml, out)} (latency {link.latency_s * 1e6:.1f} us, payload "
            f"{link.payload_efficiency:.3f} of the shaped rate, measured at "
            f"{link.shaped_bits_per_s / 1e6:g} Mbit/s)\n\n"
            + markdown_table(df) + "\n\n" + markdown_errors(errors) + "\n")
    atomic_write_text(out / "table.md", text)
    fig = figure(df, out / "cluster-compare.png")
    parts = breakdown_figure(df, out / "cluster-breakdown.png")
    if figure_copy:
        shutil.copyfile(fig, figure_copy)
    print(text)
    print(f"wrote {out / 'compare.csv'}, {out / 'errors.csv'}, {out / 'table.md'}, {fig}, {parts}"
          + (f", {figure_copy}" if figure_copy else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
