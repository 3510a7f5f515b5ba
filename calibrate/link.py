"""``python -m calibrate.link``: fit the link of the emulated cluster, write a cluster TOML.

    python -m real.cluster up --hosts 5 --bandwidth 200mbit
    python -m calibrate.link --out cluster.toml          # ~15 s at 200 Mbit/s

Runs the ping-pong of ``calibrate.comm_probe`` (rank 0 sends n bytes, rank 1
sends them back; half the round trip is recorded) between host 0 and host 1
of the cluster that ``real.cluster up`` left running: mpi4py ``Send``/``Recv``
(MPICH over libfabric tcp, launched with ``real.cluster.mpirun_command``) and
gloo ``send``/``recv``. Per backend and size the median over repetitions, then
Hockney ``t(n) = alpha + beta * n`` (``calibrate.linefit``), in two regimes
because the link is a token bucket:

* **latency**: ``alpha`` is the intercept of the line through the small sizes
  (n <= 4 KiB), which the bucket lets through at memory speed;
* **bandwidth**: ``beta`` is the slope of the line through the sizes of at
  least 8 bucket depths (256 KiB or more), where the bucket is empty and the
  shaper sets the pace. ``1 / beta`` is the *payload* rate: TCP/IP/Ethernet
  headers take ~4.4% of a full frame, so it is below the shaped rate.

The TOML is what ``simulator.config.load_cluster`` reads (hosts,
``cores_per_host`` = this machine's cores, ``shared_cores = true``, link
bandwidth = 1/beta and latency = alpha of MPI), plus ``link.shaped_bandwidth``
(the rate tc was asked for) and a ``[fit]`` table with both backends' numbers
and the provenance; ``simulator.compare --link`` uses them to predict runs at
other shaped rates (payload efficiency = 1/beta over the shaped rate).
Without a cluster up, or without root: one line on stderr and exit code 2.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from .linefit import fit_line
from .rawio import atomic_write_text

PROG = "python -m calibrate.link"
REPO_ROOT = Path(__file__).resolve().parents[1]
SIZES = (8, 64, 512, 4096, 256 * 1024, 1024 * 1024, 2 * 1024 * 1024, 4 * 1024 * 1024)
SMALL_MAX = 4096                     # latency regime: n <= 4 KiB
BUCKETS_FOR_BANDWIDTH = 8            # bandwidth regime: n >= 8 bucket depths (and >= 256 KiB)


# ------------------------------------------------------------------ rank side (under mpirun)

def probe_ranks(out_csv: Path, sizes: tuple[int, ...], repeats_small: int, repeats_large: int,
                with_gloo: bool) -> None:
    """Ping-pong between rank 0 and rank 1 with MPI (and gloo); rank 0 writes the rows."""
    from mpi4py import MPI
    from . import comm_probe as cp
    comm = MPI.COMM_WORLD
    rows = []

    def sweep(backend, make_call, barrier):
        for n in sizes:
            reps = repeats_small if n <= 64 * 1024 else repeats_large
            times = cp.time_op(make_call("sendrecv", n), barrier, reps, warmup=2, scale=0.5)
            rows.extend({"backend": backend, "bytes": n, "rep": i, "time_s": t}
                        for i, (t, _cpu_s) in enumerate(times))
    sweep("mpi", lambda op, n: cp.mpi_call(comm, op, n), comm.Barrier)
    if with_gloo:
        import torch
        import torch.distributed as dist
        from real.dist import detect_launch, init_torch_distributed
        torch.set_num_threads(1)
        init_torch_distributed(detect_launch(), 120.0)
        sweep("gloo", cp.gloo_call, dist.barrier)
        dist.destroy_process_group()
    if comm.Get_rank() == 0:
        pd.DataFrame(rows).to_csv(out_csv, index=False)


# ------------------------------------------------------------------ fit

def fit_link(raw: pd.DataFrame, burst_bytes: int) -> dict[str, dict]:
    """Per backend: alpha (small sizes), beta (sizes past the bucket), and the medians."""
    out = {}
    big_min = max(256 * 1024, BUCKETS_FOR_BANDWIDTH * burst_bytes)
    for backend, g in raw.groupby("backend"):
        med = g.groupby("bytes")["time_s"].median()
        small, big = med[med.index <= SMALL_MAX], med[med.index >= big_min]
        if len(small) < 2 or len(big) < 2:
            raise ValueError(f"{backend}: need 2 sizes <= {SMALL_MAX} B and 2 sizes >= "
                             f"{big_min} B (got {list(med.index)})")
        lat, bw = fit_line(small.index, small.values), fit_line(big.index, big.values)
        out[str(backend)] = {
            "alpha_s": lat.intercept, "alpha_ci_s": lat.intercept_ci,
            "beta_s_per_byte": bw.slope, "beta_ci_s_per_byte": bw.slope_ci,
            "bandwidth_bytes_per_s": 1.0 / bw.slope, "big_intercept_s": bw.intercept,
            "medians_s": {int(n): float(t) for n, t in med.items()}}
    return out


def cluster_toml(cluster, cores: int, fits: dict[str, dict], command: str) -> str:
    """The cluster file: link = the MPI fit; both backends and the provenance in [fit]."""
    mpi = fits["mpi"]
    shaped = cluster.bandwidth_bits_per_s
    lines = [
        f"# Emulated cluster '{cluster.prefix}': {cluster.n_hosts} network namespaces of one "
        f"machine ({cores} cores, shared), links shaped to {shaped / 1e6:g} Mbit/s (tc tbf, "
        f"burst {cluster.burst_bytes} B).",
        "# Link fitted by calibrate.link from MPI Send/Recv ping-pong host 0 <-> host 1:",
        "#   t(n) = latency + n / bandwidth; latency from n <= 4 KiB, bandwidth from n >= "
        f"{max(256 * 1024, BUCKETS_FOR_BANDWIDTH * cluster.burst_bytes)} B.",
        "[cluster]", f"hosts = {cluster.n_hosts}", f"cores_per_host = {cores}",
        "shared_cores = true", "",
        "[link]",
        f"bandwidth = \"{mpi['bandwidth_bytes_per_s']:.6g}b/s\"   # payload bytes/s = 1/beta "
        f"({mpi['bandwidth_bytes_per_s'] * 8 / shaped:.3f} of the shaped rate)",
        f"latency = \"{mpi['alpha_s'] * 1e6:.4g}us\"",
        f"shaped_bandwidth = \"{shaped}bit\"", "",
        "[fit]",
        f"created_utc = \"{datetime.now(timezone.utc).isoformat(timespec='seconds')}\"",
        f"host = \"{platform.node()}\"", f"command = {json.dumps(command)}",
        f"burst_bytes = {cluster.burst_bytes}",
    ]
    for backend, f in sorted(fits.items()):
        lines += [
            f"{backend}_alpha_s = {f['alpha_s']:.6g}",
            f"{backend}_alpha_ci_s = {f['alpha_ci_s']:.3g}",
            f"{backend}_beta_s_per_byte = {f['beta_s_per_byte']:.6g}",
            f"{backend}_beta_ci_s_per_byte = {f['beta_ci_s_per_byte']:.3g}",
            f"{backend}_sizes_bytes = {list(f['medians_s'])}",
            f"{backend}_median_half_round_trip_s = "
            f"[{', '.join(f'{t:.6g}' for t in f['medians_s'].values())}]"]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ orchestration

def run_probe(cluster, workdir: Path, args) -> pd.DataFrame:
    from real.cluster import mpi_env, mpirun_command
    out_csv = workdir / "link_pingpong.csv"
    out_csv.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "calibrate.link", "--ranks", "--raw", str(out_csv),
            "--sizes", ",".join(map(str, args.sizes)), "--repeats", str(args.repeats)]
    if args.no_gloo:
        argv.append("--no-gloo")
    env = os.environ | mpi_env(cluster) | {
        "MASTER_ADDR": cluster.addresses[0], "GLOO_SOCKET_IFNAME": cluster.interface,
        "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}".rstrip(os.pathsep),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "OMP_NUM_THREADS": "1"}
    done = subprocess.run(mpirun_command(cluster, 2, argv), env=env, cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=args.timeout)
    if done.returncode != 0 or not out_csv.exists():
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"the ping-pong across the cluster failed (exit {done.returncode}): {tail}")
    return pd.read_csv(out_csv)


def calibrate_link(cluster, out: Path, args, command: str) -> dict[str, dict]:
    with tempfile.TemporaryDirectory(prefix="link-") as tmp:
        workdir = Path(args.workdir) if args.workdir else Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        raw = run_probe(cluster, workdir, args)
        fits = fit_link(raw, cluster.burst_bytes)
    atomic_write_text(out, cluster_toml(cluster, os.cpu_count() or 1, fits, command))
    return fits


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(sorted({int(float(s)) for s in text.split(",") if s.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sizes {text!r}: comma-separated byte counts") from None
    if not sizes or sizes[0] < 4:
        raise argparse.ArgumentTypeError(f"--sizes {text!r}: sizes of at least 4 bytes")
    return sizes


def parse_args(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", default="cluster.toml", help="cluster TOML to write")
    p.add_argument("--prefix", default="psgd", help="the cluster's prefix (real.cluster up --prefix)")
    p.add_argument("--sizes", type=_sizes, default=SIZES, help="message sizes in bytes")
    p.add_argument("--repeats", type=int, default=5,
                   help="ping-pongs per size above 64 KiB (8x as many up to 64 KiB)")
    p.add_argument("--no-gloo", action="store_true", help="MPI only")
    p.add_argument("--workdir", help="keep link_pingpong.csv (raw rows) here")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds for the probe")
    p.add_argument("--ranks", action="store_true", help=argparse.SUPPRESS)   # rank side
    p.add_argument("--raw", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    if args.ranks:
        probe_ranks(Path(args.raw), args.sizes, 8 * args.repeats, args.repeats, not args.no_gloo)
        return 0
    from real.cluster import read_state
    from real.cluster_netns import ClusterUnavailable, require_tools
    try:
        require_tools()
        cluster = read_state(args.prefix)
    except (ClusterUnavailable, ValueError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    if cluster is None:
        print(f"{PROG}: error: no emulated cluster '{args.prefix}' is up; start one with "
              f"`python -m real.cluster up --hosts 2 --bandwidth 200mbit`", file=sys.stderr)
        return 2
    if args.repeats < 1 or not str(args.out).endswith(".toml"):
        print(f"{PROG}: error: --repeats must be >= 1 and --out must end in .toml", file=sys.stderr)
        return 2
    try:
        fits = calibrate_link(cluster, Path(args.out), args, " ".join([PROG, *argv]))
    except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    shaped = cluster.bandwidth_bits_per_s
    for backend, f in sorted(fits.items()):
        print(f"{backend}: latency {f['alpha_s'] * 1e6:.1f} us, bandwidth "
              f"{f['bandwidth_bytes_per_s'] * 8 / 1e6:.1f} Mbit/s payload "
              f"({f['bandwidth_bytes_per_s'] * 8 / shaped:.1%} of {shaped / 1e6:g} Mbit/s shaped)")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
