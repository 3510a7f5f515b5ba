"""``python -m calibrate.link``: fit the link of the emulated cluster, write a cluster TOML.

    python -m real.cluster up --hosts 5 --bandwidth 200mbit
    python -m calibrate.link --out cluster.toml          # ~50 s at 200 Mbit/s (~25 s with --cpu-launches 1)

Runs the ping-pong of ``calibrate.probes.comm_probe`` (rank 0 sends n bytes, rank 1
sends them back; half the round trip is recorded) between host 0 and host 1
of the cluster that ``real.cluster up`` left running: mpi4py ``Send``/``Recv``
(MPICH over libfabric tcp, launched with ``real.cluster.mpirun_command``) and
gloo ``send``/``recv``. Per backend and size the median over repetitions, then
Hockney ``t(n) = alpha + beta * n`` (``calibrate.fits.linefit``), in two regimes
because the link is a token bucket:

* **latency**: ``alpha`` is the intercept of the line through the small sizes
  (n <= 4 KiB), which the bucket lets through at memory speed;
* **bandwidth**: ``beta`` is the slope of the line through the sizes of at
  least 8 bucket depths (256 KiB or more), where the bucket is empty and the
  shaper sets the pace. ``1 / beta`` is the *payload* rate: TCP/IP/Ethernet
  headers take ~4.4% of a full frame, so it is below the shaped rate. That
  line's intercept is free to be negative: a message on an idle link has the
  bucket's depth B for free, so ``t(n) = alpha + (n - B) / rate``, and a line
  forced through an intercept >= 0 tilts to fit it (at 500 Mbit/s, B = 125 kB
  is 2 ms: the slope came out 5% low and the "payload" at 100-102% of the
  shaped rate, above what TCP can carry).
* **socket buffer**: rank 1 posts its receive of 12 and 16 MiB only after the
  whole message could have crossed; TCP has meanwhile moved the first bytes
  into the kernels' socket buffers (the receiver's, grown by autotuning, and
  the sender's), so the rest takes less than the message: n minus what the
  rest took at the payload rate is that buffer (``link.socket_buffer``,
  ``Link.socket_buffer_bytes``).

* **gloo's CPU a message**: rank 0's process time over each ping-pong, halved. The sizes up
  to 64 KiB are timed round by round (``interleaved``), 32 x ``--repeats`` times each, in
  ``--cpu-launches`` launches of the ranks (the first times every size, the others the
  small ones); the CPU a byte ``c1`` is the slope of the line through the per-size medians,
  the CPU a message (``cpu_per_message``) the median of the launches' medians of the small
  sizes' repetitions less ``c1 n``. ``[fit]`` keeps each launch's median (they spread far
  wider than one launch's bootstrap interval, which is kept too), the share of repetitions
  in the device thread's tail and the mean with it, and the machine's load before and
  after (docs/results/phantom.md, "gloo's CPU a message: the calibrations' spread").

The TOML is what ``contracts.cluster.load_cluster`` reads (hosts,
``cores_per_host`` = this machine's cores, ``shared_cores = true``, link
bandwidth = 1/beta and latency = alpha of MPI), plus ``link.shaped_bandwidth``
(the rate tc was asked for) and a ``[fit]`` table with both backends' numbers
and the provenance; ``simulator.compare --link`` uses them to predict runs at
other shaped rates (payload efficiency = 1/beta over the shaped rate).
Without a cluster up, or without root: one line on stderr and exit code 2.

Imports: mpi4py, pandas, torch, calibrate (comm_probe, linefit), real.cluster, real.launch.dist,
psutil (the machine's load), cli, contracts.files.
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

import cli
from cli import Parser
from contracts.cluster import ACK_SHARE
from contracts.files import atomic_write_text
from contracts.units import duration_text, rate_text

from calibrate.fits.linefit import fit_line

PROG = "python -m calibrate.link"
REPO_ROOT = Path(__file__).resolve().parents[2]
SIZES = (8, 64, 512, 4096, 256 * 1024, 1024 * 1024, 2 * 1024 * 1024, 4 * 1024 * 1024)
SMALL_MAX = 4096                     # latency regime: n <= 4 KiB
INTERLEAVED_MAX = 64 * 1024          # sizes timed round by round (``interleaved``), ...
SMALL_REPEATS_PER_REPEAT = 32        # ... this many times --repeats each
CPU_TAIL_FACTOR = 4.0                # a repetition above 4x the median CPU is in the tail
CPU_LAUNCHES = 5                     # launches whose small sizes give the CPU a message
BUCKETS_FOR_BANDWIDTH = 8            # bandwidth regime: n >= 8 bucket depths (and >= 256 KiB)
BUFFER_SIZES = (12 * 2**20, 16 * 2**20)  # socket-buffer probe: above Linux's tcp_rmem + tcp_wmem


# ------------------------------------------------------------------ rank side (under mpirun)

def socket_buffer_rows(comm, sizes: tuple[int, ...], delays_s: tuple[float, ...],
                       repeats: int) -> list[dict]:
    """Rank 0 sends n bytes; rank 1 posts its receive only ``delay`` later (long after the
    whole message could have crossed). What has crossed by then is what TCP moved into
    the kernels' socket buffers without a receive: the rest takes (return - post) on
    the link. The first send of a size is a warm-up (TCP grows its buffers)."""
    import time

    import numpy as np
    rank, rows = comm.Get_rank(), []
    for n, delay_s in zip(sizes, delays_s):
        buf = np.zeros(n // 4, dtype=np.float32)
        for rep in range(repeats + 1):
            comm.Barrier()
            if rank == 0:
                comm.Send(buf, dest=1)
                posted, returned = comm.recv(source=1)
                if rep:
                    rows.append({"bytes": n, "rep": rep - 1, "delay_s": delay_s,
                                 "rest_s": returned - posted})
            elif rank == 1:
                time.sleep(delay_s)
                posted = time.monotonic()
                comm.Recv(buf, source=0)
                comm.send((posted, time.monotonic()), dest=0)
    return rows


def probe_ranks(out_csv: Path, sizes: tuple[int, ...], repeats_small: int, repeats_large: int,
                with_gloo: bool, buffer_sizes: tuple[int, ...] = (),
                buffer_delays_s: tuple[float, ...] = ()) -> None:
    """Ping-pong between rank 0 and rank 1 with MPI (and gloo), then the send-buffer probe;
    rank 0 writes the rows."""
    from mpi4py import MPI

    from calibrate.probes import comm_probe as cp
    comm = MPI.COMM_WORLD
    rows = []

    def row(backend, n, i, t):
        return {"backend": backend, "bytes": n, "rep": i, "time_s": t[0], "cpu_s": t[1],
                **dict(zip(("loop_cpu_s", "loop_wakeups"), t[2:]))}

    def sweep(backend, make_call, barrier, counters=None):
        small = [n for n in sizes if n <= INTERLEAVED_MAX]
        calls = {n: make_call("sendrecv", n) for n in small}
        for n in small:                                          # warm-up, as time_op's
            cp.time_op(calls[n], barrier, 0, warmup=2)
        for i, n in interleaved(small, repeats_small):
            t, = cp.time_op(calls[n], barrier, 1, warmup=0, scale=0.5, counters=counters)
            rows.append(row(backend, n, i, t))
        for n in sizes:
            if n > INTERLEAVED_MAX:
                times = cp.time_op(make_call("sendrecv", n), barrier, repeats_large, warmup=2,
                                   scale=0.5, counters=counters)
                rows.extend(row(backend, n, i, t) for i, t in enumerate(times))
    sweep("mpi", lambda op, n: cp.mpi_call(comm, op, n), comm.Barrier)
    if with_gloo:
        import torch
        import torch.distributed as dist

        from real.launch.dist import detect_launch, init_torch_distributed
        torch.set_num_threads(1)
        init_torch_distributed(detect_launch(), 120.0)
        from calibrate.probes.threads import device_thread
        sweep("gloo", cp.gloo_call, dist.barrier, device_thread)   # its device thread too
        dist.destroy_process_group()
    buffer_rows = (socket_buffer_rows(comm, buffer_sizes, buffer_delays_s, 3)
                   if buffer_sizes else [])
    rows += exchange_rows(comm, sizes[-1], repeats_large)
    if comm.Get_rank() == 0:
        pd.DataFrame(rows).to_csv(out_csv, index=False)
        if buffer_rows:
            pd.DataFrame(buffer_rows).to_csv(buffer_csv(out_csv), index=False)


def interleaved(sizes: list[int], repeats: int) -> list[tuple[int, int]]:
    """(repetition, size) in the order the small sizes are timed: round by round, every size
    once a round, the order reversed every other round, so that a drift of the machine over
    the probe (the first repetitions cost more, docs/results/phantom.md) falls on every size
    alike instead of on the sizes timed first."""
    return [(i, n) for i in range(repeats) for n in (sizes if i % 2 == 0 else sizes[::-1])]


def exchange_rows(comm, n: int, repeats: int) -> list[dict]:
    """Both ranks send n bytes to each other at once (Sendrecv): each direction then also
    carries the other's ACKs, which the model prices at ``ACK_SHARE`` from TCP's framing;
    the rows let the fit check it (backend ``mpi-exchange``, full time, not halved)."""
    import time

    import numpy as np
    peer = 1 - comm.Get_rank()
    out, back = np.zeros(n // 4, dtype=np.float32), np.zeros(n // 4, dtype=np.float32)
    rows = []
    for rep in range(repeats + 1):
        comm.Barrier()
        t0 = time.perf_counter()
        if peer in (0, 1):
            comm.Sendrecv(out, dest=peer, recvbuf=back, source=peer)
        if rep and comm.Get_rank() == 0:
            rows.append({"backend": "mpi-exchange", "bytes": n, "rep": rep - 1,
                         "time_s": time.perf_counter() - t0})
    return rows


def buffer_csv(pingpong_csv: Path) -> Path:
    return Path(pingpong_csv).with_name("link_socket_buffer.csv")


def fit_socket_buffer(rows: pd.DataFrame, payload_bytes_per_s: float, latency_s: float) -> float:
    """Bytes that crossed before the receive was posted: n less what the rest took on the
    link (its time after the post, less the latency, at the payload rate); the median
    over sizes and repeats, between 0 and n."""
    rest_bytes = (rows["rest_s"] - latency_s).clip(lower=0) * payload_bytes_per_s
    return float((rows["bytes"] - rest_bytes).clip(lower=0).median())


# ------------------------------------------------------------------ fit

def fit_link(raw: pd.DataFrame, burst_bytes: int) -> dict[str, dict]:
    """Per backend: alpha (small sizes), beta (sizes past the bucket), and the medians."""
    out = {}
    big_min = max(256 * 1024, BUCKETS_FOR_BANDWIDTH * burst_bytes)
    for backend, g in raw[raw["backend"] != "mpi-exchange"].groupby("backend"):
        med = g.groupby("bytes")["time_s"].median()
        small, big = med[med.index <= SMALL_MAX], med[med.index >= big_min]
        if len(small) < 2 or len(big) < 2:
            raise ValueError(f"{backend}: need 2 sizes <= {SMALL_MAX} B and 2 sizes >= "
                             f"{big_min} B (got {list(med.index)})")
        lat = fit_line(small.index, small.values)
        bw = fit_line(big.index, big.values, nonnegative=False)   # intercept: alpha - B / rate
        out[str(backend)] = {
            "alpha_s": lat.intercept, "alpha_ci_s": lat.intercept_ci,
            "beta_s_per_byte": bw.slope, "beta_ci_s_per_byte": bw.slope_ci,
            "bandwidth_bytes_per_s": 1.0 / bw.slope, "big_intercept_s": bw.intercept,
            "medians_s": {int(n): float(t) for n, t in med.items()}}
        if "cpu_s" in g.columns and g["cpu_s"].notna().all():
            out[str(backend)].update(fit_cpu(g))
    return out


def fit_cpu(g: pd.DataFrame) -> dict[str, float]:
    """A rank's CPU per message over the link, ``c(n) = c0 + c1 n``: the process time of
    rank 0 over a round trip (it sends n and receives n; halved, as the times are), fitted
    over every size (medians per size); with the rows' ``loop_wakeups``, the median wake-ups
    of gloo's device thread per size too (kept in ``[fit]``: where the shaper cuts packets
    up, c1 is mostly those wake-ups, docs/results/phantom.md)."""
    med = g.groupby("bytes")["cpu_s"].median()
    line = fit_line(med.index, med.values)
    out = {"cpu_s_per_message": line.intercept, "cpu_s_per_byte": line.slope,
           "cpu_line_intercept_s": line.intercept,
           "cpu_medians_s": {int(n): float(c) for n, c in med.items()}}
    small = g[g["bytes"] <= SMALL_MAX]
    if len(small) >= 20:
        launch = small["launch"] if "launch" in small.columns else pd.Series(0, small.index)
        out.update(cpu_per_message(small["cpu_s"] - line.slope * small["bytes"], launch))
    if "loop_wakeups" in g.columns and g["loop_wakeups"].notna().all():
        wakeups = g.groupby("bytes")["loop_wakeups"].median()
        out["wakeup_medians"] = {int(n): float(w) for n, w in wakeups.items()}
    return out


def cpu_per_message(per_message_s: pd.Series, launch: pd.Series, resamples: int = 2000,
                    seed: int = 0) -> dict:
    """gloo's CPU a message from the small sizes' repetitions (each less ``c1 n``): each
    launch's median, and their median, with a 95% bootstrap interval over the repetitions
    (resampled within each launch: one launch's interval is narrow, the launches' medians
    spread far wider, which ``cpu_launch_medians_s`` keeps), and the tail beside it: the
    share of repetitions above ``CPU_TAIL_FACTOR`` x their launch's median and the mean with
    it. Medians, not the mean: gloo's device thread now and then spins a timeslice on a small
    message (docs/results/phantom.md, "gloo's CPU a message: the calibrations' spread")."""
    import numpy as np
    rng = np.random.default_rng(seed)
    groups = [g.to_numpy(dtype=float) for _, g in per_message_s.groupby(launch)]
    medians = np.array([np.median(x) for x in groups])
    boot = np.median([np.median(rng.choice(x, (resamples, len(x))), axis=1) for x in groups],
                     axis=0)
    tail = np.concatenate([x > CPU_TAIL_FACTOR * m for x, m in zip(groups, medians)])
    x = np.concatenate(groups)
    return {"cpu_s_per_message": float(np.median(medians)),
            "cpu_ci_s_per_message": (float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))),
            "cpu_launch_medians_s": [float(m) for m in medians],
            "cpu_mean_s_per_message": float(x.mean()), "cpu_tail_share": float(tail.mean()),
            "cpu_tail_mean_s": float(x[tail].mean()) if tail.any() else 0.0,
            "cpu_repetitions": int(len(x))}


def cluster_toml(cluster, cores: int, fits: dict[str, dict], command: str,
                 machine: dict | None = None) -> str:
    """The cluster file: link = the MPI fit; both backends and the provenance in [fit], with
    ``machine``'s load where given (the CPU a message rises on a busy machine)."""
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
        f"bandwidth = \"{rate_text(mpi['bandwidth_bytes_per_s'])}\"   # payload = 1/beta "
        f"({mpi['bandwidth_bytes_per_s'] * 8 / shaped:.3f} of the shaped rate)",
        f"latency = \"{mpi['alpha_s'] * 1e6:.4g}us\"",
        *([f"socket_buffer = \"{mpi['socket_buffer_bytes']:.0f}B\"   # crosses before the "
           f"receive is posted" + (" (all of the largest probe did: at least this)"
                                   if mpi.get("socket_buffer_at_least") else "")]
          if mpi.get("socket_buffer_bytes") else []),
        f"ack_share = {ACK_SHARE:.4f}   # TCP's ACKs on the reverse direction: 66 B per 2 x 1514 B"
        + (f" (a two-way exchange of {mpi['exchange_bytes'] / 2**20:g} MiB measured "
           f"{mpi['exchange_extra_share']:+.3f})" if "exchange_extra_share" in mpi else ""),
        *_cpu_lines(fits.get("gloo")),
        f"shaped_bandwidth = \"{shaped}bit\"", "",
        "[fit]",
        f"created_utc = \"{datetime.now(timezone.utc).isoformat(timespec='seconds')}\"",
        f"host = \"{platform.node()}\"", f"command = {json.dumps(command)}",
        f"burst_bytes = {cluster.burst_bytes}",
        *[f"{k} = {json.dumps(v)}" for k, v in (machine or {}).items()],
    ]
    for backend, f in sorted(fits.items()):
        lines += [
            f"{backend}_alpha_s = {f['alpha_s']:.6g}",
            f"{backend}_alpha_ci_s = {f['alpha_ci_s']:.3g}",
            f"{backend}_beta_s_per_byte = {f['beta_s_per_byte']:.6g}",
            f"{backend}_beta_ci_s_per_byte = {f['beta_ci_s_per_byte']:.3g}",
            f"{backend}_bandwidth_line_intercept_s = {f['big_intercept_s']:.6g}",
            f"{backend}_sizes_bytes = {list(f['medians_s'])}",
            f"{backend}_median_half_round_trip_s = "
            f"[{', '.join(f'{t:.6g}' for t in f['medians_s'].values())}]"]
        if "cpu_medians_s" in f:     # kept, so a later model can fit the CPU again
            lines.append(f"{backend}_median_cpu_s = "
                         f"[{', '.join(f'{c:.6g}' for c in f['cpu_medians_s'].values())}]")
        lines += _cpu_spread_lines(backend, f)
        if "wakeup_medians" in f:    # the device thread's, halved as the times
            lines.append(f"{backend}_median_device_wakeups = "
                         f"[{', '.join(f'{w:.6g}' for w in f['wakeup_medians'].values())}]")
    return "\n".join(lines) + "\n"


def _cpu_lines(gloo: dict | None) -> list[str]:
    """gloo's CPU per message and per byte over the link (its ranks sleep while they wait,
    so the CPU they use is work the hosts' cores must find time for)."""
    if not gloo or "cpu_s_per_message" not in gloo:
        return []
    launches = gloo.get("cpu_launch_medians_s", [])
    ci = (f" (median of {len(launches)} launches' medians, "
          f"{min(launches) * 1e6:.1f}-{max(launches) * 1e6:.1f} us)" if launches else "")
    return [f"cpu_per_message = \"{duration_text(gloo['cpu_s_per_message'])}\"   # gloo: a rank's "
            f"CPU per message sent or received{ci}",
            f"cpu_per_byte = \"{duration_text(gloo['cpu_s_per_byte'])}\"   # ... and per byte "
            f"({gloo['cpu_s_per_byte'] * 1e9:.3g} ns)"]


def _cpu_spread_lines(backend: str, f: dict) -> list[str]:
    """The spread of the CPU a message (``cpu_per_message``): its CI, the tail, the mean with
    it, and the intercept of the line through the per-size medians (the estimate before)."""
    if backend != "gloo" or "cpu_ci_s_per_message" not in f:
        return []
    lo, hi = f["cpu_ci_s_per_message"]
    return [f"{backend}_cpu_per_message_ci_s = [{lo:.6g}, {hi:.6g}]",
            f"{backend}_cpu_launch_medians_s = "
            f"[{', '.join(f'{m:.6g}' for m in f['cpu_launch_medians_s'])}]",
            f"{backend}_cpu_mean_s_per_message = {f['cpu_mean_s_per_message']:.6g}",
            f"{backend}_cpu_tail_share = {f['cpu_tail_share']:.4g}   # above "
            f"{CPU_TAIL_FACTOR:g}x the median",
            f"{backend}_cpu_tail_mean_s = {f['cpu_tail_mean_s']:.6g}",
            f"{backend}_cpu_line_intercept_s = {f['cpu_line_intercept_s']:.6g}",
            f"{backend}_cpu_repetitions = {f['cpu_repetitions']}"]


# ------------------------------------------------------------------ orchestration

def run_probe(cluster, workdir: Path, args, launch: int = 0) -> pd.DataFrame:
    """One ``mpirun`` of the ranks' probe: every size and the socket-buffer probe (launch
    0), or the sizes up to ``SMALL_MAX`` alone (a later launch, for the CPU a message)."""
    from real.cluster import mpi_env, mpirun_command
    out_csv = workdir / ("link_pingpong.csv" if launch == 0 else f"link_cpu_{launch}.csv")
    out_csv.unlink(missing_ok=True)
    sizes = args.sizes if launch == 0 else [n for n in args.sizes if n <= SMALL_MAX]
    delays = [f"{1.5 * 8 * n / cluster.bandwidth_bits_per_s + 0.2:.3f}" for n in args.buffer_sizes]
    argv = [sys.executable, "-m", "calibrate.link", "--ranks", "--raw", str(out_csv),
            "--sizes", ",".join(map(str, sizes)), "--repeats", str(args.repeats),
            "--buffer-sizes", ",".join(map(str, args.buffer_sizes)),
            "--buffer-delays", ",".join(delays if launch == 0 else [])]
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
    rows = pd.read_csv(out_csv).assign(launch=launch)
    if launch:
        out_csv.unlink()
        rows = rows[rows["backend"] != "mpi-exchange"]
    return rows


def probe_launches(cluster, workdir: Path, args) -> pd.DataFrame:
    """``--cpu-launches`` runs of the probe, the first whole, the rest its small sizes: where
    the scheduler puts the two ranks' threads is settled at each launch and sets the CPU a
    message for all its repetitions (docs/results/phantom.md, "gloo's CPU a message: the
    calibrations' spread"), so repetitions within one launch do not show the spread.
    All rows (column ``launch``) go into ``link_pingpong.csv``."""
    launches = 1 if args.no_gloo else args.cpu_launches      # MPI's CPU is not used
    raw = pd.concat([run_probe(cluster, workdir, args, k) for k in range(launches)],
                    ignore_index=True)
    raw.to_csv(workdir / "link_pingpong.csv", index=False)
    return raw


def calibrate_link(cluster, out: Path, args, command: str) -> dict[str, dict]:
    with tempfile.TemporaryDirectory(prefix="link-") as tmp:
        # resolved here: the ranks run from the repository, not from the caller's folder
        workdir = Path(args.workdir).resolve() if args.workdir else Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        import psutil
        busy = psutil.cpu_percent(interval=1.0) / 100 * (os.cpu_count() or 1)
        machine = {"busy_cores_before": round(busy, 3),     # the second before the probe
                   "load_avg_before": [round(x, 2) for x in os.getloadavg()]}
        raw = probe_launches(cluster, workdir, args)
        machine["load_avg_after"] = [round(x, 2) for x in os.getloadavg()]
        fits = fit_link(raw, cluster.burst_bytes)
        fits["mpi"].update(two_way_share(raw, fits["mpi"]))
        if buffer_csv(workdir / "link_pingpong.csv").exists():
            mpi = fits["mpi"]
            rows = pd.read_csv(buffer_csv(workdir / "link_pingpong.csv"))
            mpi["socket_buffer_bytes"] = fit_socket_buffer(rows, mpi["bandwidth_bytes_per_s"],
                                                           mpi["alpha_s"])
            largest = rows[rows["bytes"] == rows["bytes"].max()]
            if (largest["rest_s"] < 0.02 * largest["delay_s"]).all():   # all of it crossed
                mpi["socket_buffer_bytes"] = float(largest["bytes"].max())
                mpi["socket_buffer_at_least"] = True
    atomic_write_text(out, cluster_toml(cluster, os.cpu_count() or 1, fits, command, machine))
    return fits


def two_way_share(raw: pd.DataFrame, mpi: dict) -> dict:
    """What a two-way exchange of n bytes cost beyond n at the one-way payload rate, as a
    share of the link: the measured counterpart of the model's ``ACK_SHARE``."""
    ex = raw[raw["backend"] == "mpi-exchange"]
    if ex.empty:
        return {}
    n = float(ex["bytes"].iloc[0])
    one_way_s = mpi["alpha_s"] + n * mpi["beta_s_per_byte"]
    return {"exchange_bytes": n, "exchange_extra_share": float(ex["time_s"].median() / one_way_s - 1)}


def _sizes(text: str) -> tuple[int, ...]:
    """Comma-separated message sizes from 4 bytes to 1 GiB (``1e6`` is read as 1000000)."""
    return tuple(sorted(set(cli.int_list(4, 2**30, scientific=True)(text))))


def build_parser() -> Parser:
    p = Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--out", default="cluster.toml", type=cli.output_file(".toml"),
                   help="cluster TOML to write")
    p.add_argument("--prefix", default="psgd", type=cli.cluster_prefix,
                   help="the cluster's prefix (real.cluster up --prefix)")
    p.add_argument("--sizes", type=_sizes, default=SIZES, help="message sizes in bytes")
    p.add_argument("--repeats", type=cli.int_in(1, 10_000), default=5,
                   help="ping-pongs per size above 64 KiB (32x as many up to 64 KiB, interleaved)")
    p.add_argument("--no-gloo", action="store_true", help="MPI only")
    p.add_argument("--cpu-launches", type=cli.int_in(1, 100), default=CPU_LAUNCHES,
                   help="launches of the probe whose small sizes give gloo's CPU a message "
                        "(the first also times every size)")
    p.add_argument("--buffer-sizes", type=_sizes, default=BUFFER_SIZES,
                   help="message sizes of the socket-buffer probe (bytes; larger than the buffer)")
    p.add_argument("--buffer-delays", default="", help=argparse.SUPPRESS)    # rank side
    p.add_argument("--workdir", type=cli.output_folder,
                   help="keep link_pingpong.csv (raw rows) here")
    p.add_argument("--timeout", type=cli.float_in(1, 86400), default=300.0,
                   help="seconds for the probe")
    p.add_argument("--ranks", action="store_true", help=argparse.SUPPRESS)   # rank side
    p.add_argument("--raw", help=argparse.SUPPRESS)
    return p


def parse_args(argv):
    return build_parser().parse_args(argv)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return cli.command(PROG, parse_args, lambda args: run(args, argv), argv)


def run(args, argv: list[str]) -> int:
    if args.ranks:
        delays = tuple(float(d) for d in args.buffer_delays.split(",") if d)
        probe_ranks(Path(args.raw), args.sizes, SMALL_REPEATS_PER_REPEAT * args.repeats, args.repeats, not args.no_gloo,
                    args.buffer_sizes if delays else (), delays)
        return 0
    from real.cluster import read_state
    from real.cluster.netns import ClusterUnavailable, require_tools
    try:
        require_tools()
        cluster = read_state(args.prefix)
    except (ClusterUnavailable, ValueError) as e:
        return cli.usage_error(PROG, str(e))
    if cluster is None:
        return cli.usage_error(PROG, f"no emulated cluster '{args.prefix}' is up; start one "
                                     "with `python -m real.cluster up --hosts 2 --bandwidth "
                                     "200mbit`")
    try:
        fits = calibrate_link(cluster, Path(args.out), args, " ".join([PROG, *argv]))
    except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    shaped = cluster.bandwidth_bits_per_s
    for backend, f in sorted(fits.items()):
        print(f"{backend}: latency {f['alpha_s'] * 1e6:.1f} us, bandwidth "
              f"{f['bandwidth_bytes_per_s'] * 8 / 1e6:.1f} Mbit/s payload "
              f"({f['bandwidth_bytes_per_s'] * 8 / shaped:.1%} of {shaped / 1e6:g} Mbit/s shaped)"
              + (f", {f['socket_buffer_bytes'] / 2**20:.2f} MiB cross before a receive"
                 if f.get("socket_buffer_bytes") else ""))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
