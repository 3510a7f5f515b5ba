"""``python -m calibrate.fit``: raw probes (+ run records) -> one versioned profile.

Reads the tables ``calibrate.probe`` wrote into ``--workdir`` and, with ``--runs``,
the step times of ``real.train`` runs; fits the cost models (``fit_compute``,
``fit_comm``); writes the profile with ``contracts.profile.save`` (atomic), the fit
tables (``fit_table.csv``, ``compute_table.csv``) and ``fits.png`` beside the raw data.

``--max-workers K`` keeps only what was measured with at most K processes
(comm probes with P <= K, runs with P <= K, sharing probes with k <= K), so
prediction error can be measured on worker counts calibration did not see.

``--show PROFILE`` prints the fit tables of an existing profile (and refuses a
broken one with the field named).

``--timings my_timings.csv`` (scheme, workers, hosts, time_s) fits instead the
few unknowns that a user's own timings determine, starting from a preset: it
runs ``python -m simulator.fit_timings`` with the same arguments (the fit
predicts every timing with the simulator, which this package does not import).

Fits below the quality bar of ``calibrate.fits.quality`` stop the profile from being
written (exit 1, one line naming them) unless ``--force``; ``quality.json`` in the
workdir says how every fit did.

Imports: pandas, the other calibrate modules (quality among them), contracts
(cli, profile, record).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

import cli
from contracts import profile as prof
from cli import Parser
from contracts.record import RecordError

from calibrate.fits import fit_comm, fit_compute
from calibrate.probes import sched_probe
from calibrate.probes.probe import command_line
from calibrate.probes.rawio import CalibrationError, read_json, read_rows, write_json, write_rows

META_KEYS = ("host", "cores")


@dataclass(frozen=True)
class FitResult:
    profile: prof.Profile
    points: pd.DataFrame          # comm medians per size
    fitted: dict                  # (backend, op, algorithm, P) -> tuple[Line, ...]
    steps: pd.DataFrame           # step samples used (probe and runs)
    comm_table: pd.DataFrame
    compute_table: pd.DataFrame


def _comm_raw(workdir: Path, max_workers: int | None) -> tuple[pd.DataFrame, list[dict]]:
    frames, metas = [], []
    for csv in sorted(workdir.glob("comm_P*_*.csv")):
        meta = read_json(csv.with_suffix(".json"), needed=("workers", "algorithm", "cores"))
        if max_workers is not None and meta["workers"] > max_workers:
            continue
        frames.append(read_rows(csv))
        metas.append(meta)
    return (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()), metas


def _algorithm_check(points: pd.DataFrame) -> str:
    """Do the MPI allreduce algorithms differ at the largest size? (is the CVAR honoured)"""
    ar = points[(points["backend"] == "mpi") & (points["op"] == "allreduce")]
    parts = []
    for workers, g in ar.groupby("workers"):
        top = g[g["bytes"] == g["bytes"].max()]
        if top["algorithm"].nunique() > 1:
            times = ", ".join(f"{a} {t * 1e3:.3g} ms" for a, t in zip(top["algorithm"], top["time_s"]))
            parts.append(f"P={workers} at {int(top['bytes'].iloc[0])} B: {times}")
    return ("MPI allreduce by algorithm (distinct times show the CVAR is honoured): "
            + "; ".join(parts)) if parts else ""


def _load_note(workdir: Path, comm_metas: list[dict]) -> str:
    """1-minute load average when each probe started: other work on the host inflates timings."""
    metas = {p.stem.replace("_meta", ""): read_json(p, META_KEYS)
             for p in sorted(workdir.glob("*_meta.json"))}
    loads = {k: m.get("load_avg_1min") for k, m in metas.items()}
    loads.update({f"comm P={m['workers']} {m['algorithm']}": m.get("load_avg_1min") for m in comm_metas})
    return "load average at probe start: " + ", ".join(f"{k} {v}" for k, v in loads.items())


def _device_note(workdir: Path) -> str:
    """Where the compute probe stepped the models, when not on the host's cores."""
    meta = workdir / "compute_meta.json"
    device = read_json(meta).get("device", {}) if meta.is_file() else {}
    if device.get("type") != "cuda":
        return ""
    return (f"compute steps measured on the GPU {device.get('name')} (driver "
            f"{device.get('driver')}, CUDA {device.get('cuda_runtime')}); threads = 1 host thread")


def _sharing(workdir: Path, runs, costs, max_workers) -> dict[int, float]:
    path = workdir / "sharing.csv"
    by_name = {c.model: c for c in costs}
    meta = workdir / "sharing_meta.json"
    # The reference "alone" is the thread-1 compute fit at the probe's model and batch (many
    # repeats), not the k = 1 row alone: one noisy k = 1 window would skew every slowdown.
    alone_s = None
    m = read_json(meta) if meta.is_file() else {}
    if m.get("sharing_model") in by_name and m.get("sharing_batch"):
        alone_s = by_name[m["sharing_model"]].step_fit(1).step_s(int(m["sharing_batch"]))
    slow = (fit_compute.sharing_slowdown(read_rows(path), max_workers, alone_s)
            if path.is_file() else {})
    if runs is None or not len(runs.sharing):
        return slow
    for (model, batch, k), g in runs.sharing.groupby(["model", "batch", "k"]):
        if model in by_name and int(k) not in slow:
            alone = by_name[model].step_fit(1).step_s(int(batch))
            slow[int(k)] = float(g["step_s"].median() / alone)
    return slow


def _provenance(metas: list[dict], runs, workers: set, commands, note: str) -> prof.Provenance:
    base = metas[0]
    versions = {}
    for m in metas:
        versions.update(m.get("versions", {}))
        for key in ("mpi_library", "mpi4py"):
            if key in m:
                versions[key] = m[key]
    cmds = tuple(dict.fromkeys([m["command"] for m in metas if "command" in m] + list(commands)))
    return prof.Provenance(
        host=base["host"], cores=int(base["cores"]),
        created_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        commands=cmds, versions=versions, runs_seen=runs.runs_seen if runs else (),
        workers_seen=tuple(sorted(workers)), note=note)


def _eager(comm_metas: list[dict]) -> int:
    """MPI's eager limit from the comm probe at the fewest ranks (0 if it was not probed)."""
    probed = sorted((m["workers"], m["eager_max_bytes"]) for m in comm_metas
                    if m.get("eager_max_bytes") is not None)
    return int(probed[0][1]) if probed else 0


def _rows_if_probed(workdir: Path, name: str) -> list[dict]:
    """The rows of ``name`` (the scheduler probe's, the server's update per model); [] if
    not probed (their fits then give 0: not measured)."""
    path = workdir / name
    return read_rows(path).to_dict("records") if path.exists() else []


def _copies(rows: list[dict]) -> dict[str, float]:
    """The host's copies of a flat vector (``calibrate.copy_probe``'s ``copies.csv``), kept
    and fresh, per byte; none if not probed (the profile's 0: not measured)."""
    from calibrate.probes.copy_probe import fit
    return fit(rows) if rows else {}


def _allreduce_alpha_from_runs(transports, runs, costs) -> tuple[tuple, str]:
    """gloo's allreduce latency per step from per-tensor ``allreduce`` runs, where there are
    any (``fit_comm.run_allreduce_alpha``): training's calls, not the probe's tight loop."""
    if runs is None or runs.allreduce_comm is None or not len(runs.allreduce_comm):
        return transports, ""
    out, note = [], ""
    for t in transports:
        alpha = (fit_comm.run_allreduce_alpha(runs.allreduce_comm,
                                              {c.model: c.tensor_counts for c in costs}, t)
                 if t.backend == "gloo" else None)
        if alpha is not None:
            note = (f"gloo allreduce latency per step from {len(runs.allreduce_comm)} iterations "
                    f"of allreduce runs: {alpha * 1e6:.0f} us (probe: "
                    f"{t.collective_alpha_s.get('allreduce', 0) * 1e6:.0f} us)")
            t = replace(t, collective_alpha_s={**t.collective_alpha_s, "allreduce": alpha})
        out.append(t)
    return tuple(out), note


def build(workdir: str | Path, runs_dir: str | Path | None = None, max_workers: int | None = None,
          commands: tuple[str, ...] = ()) -> FitResult:
    """Fit everything in ``workdir`` (and ``runs_dir``) into a Profile; nothing is written."""
    from calibrate.fits import runs as runsmod
    workdir = Path(workdir)
    steps = read_rows(workdir / "compute_steps.csv")
    evals = read_rows(workdir / "compute_eval.csv")
    shapes = read_json(workdir / "models.json")
    if not isinstance(shapes, dict) or not all(
            isinstance(v, dict) and "param_count" in v for v in shapes.values()):
        raise CalibrationError(f"{workdir / 'models.json'} does not map models to their shapes")
    runs = runsmod.collect(runs_dir, max_workers) if runs_dir else None
    if runs is not None and len(runs.steps):
        steps = pd.concat([steps, runs.steps], ignore_index=True)
    # models only the runs used, and shapes written before tensor counts were recorded
    missing = sorted((set(steps["model"]) - set(shapes))
                     | {n for n, shape in shapes.items() if "tensor_param_counts" not in shape})
    if missing:
        from calibrate.probes.compute_probe import model_shapes
        shapes = {**shapes, **model_shapes(missing)}
    costs = tuple(fit_compute.model_cost(name, shapes[name], steps, evals)
                  for name in sorted(set(steps["model"])))
    server, gamma = fit_compute.server_cost(read_rows(workdir / "server.csv"))
    costs = fit_compute.with_server_updates(costs, _rows_if_probed(workdir, "server_update.csv"))
    raw, comm_metas = _comm_raw(workdir, max_workers)
    points = fit_comm.collective_points(raw, max_workers) if len(raw) else pd.DataFrame(
        columns=fit_comm.KEY + ["bytes", "time_s", "p25_s", "p75_s", "reps"])
    pairs = fit_comm.fit_collectives(points) if len(points) else []
    sharing = _sharing(workdir, runs, costs, max_workers)
    workers = {1} | set(sharing) | {int(m["workers"]) for m in comm_metas}
    workers |= set(runs.workers_seen) if runs else set()
    over = sorted({int(m["workers"]) for m in comm_metas if m.get("oversubscribed")})
    note = "; ".join(filter(None, [
        "step fits: NNLS through per-batch median steps, relative residuals, bootstrap CIs; "
        "eval_s_per_sample at the most "
        "threads probed; transports: one line through ping-pong (half round trip) at the smallest "
        "P; gamma_s_per_byte: one float32 add of a gradient into another, timed on one thread",
        f"oversubscribed comm probes (P > {comm_metas[0]['cores']} cores): P={over}" if over else "",
        f"max_workers={max_workers}" if max_workers is not None else "",
        _load_note(workdir, comm_metas),
        _device_note(workdir),
        _algorithm_check(points)]))
    transports = fit_comm.transports(points, gamma, _eager(comm_metas),
                                     fit_comm.cpu_fractions(raw))   # raw: already P <= max_workers
    transports, from_runs = _allreduce_alpha_from_runs(transports, runs, costs)
    note = "; ".join(filter(None, [note, from_runs]))
    metas = [read_json(p, META_KEYS) for p in sorted(workdir.glob("*_meta.json"))] + comm_metas
    if not metas:
        raise CalibrationError(f"{workdir} holds no *_meta.json: run calibrate.probe first")
    balance = _rows_if_probed(workdir, "balance.csv")     # read once: median and spread
    profile = prof.Profile(
        provenance=_provenance(metas, runs, workers, commands, note),
        cores=int(metas[0]["cores"]), models=costs,
        transports=transports,
        sharing_slowdown=sharing,
        server=server, collectives=tuple(f for f, _ in pairs),
        scheduler_quantum_s=sched_probe.quantum_s(_rows_if_probed(workdir, "scheduler.csv")),
        balance_delay_s=sched_probe.balance_delay_s(balance),
        wake_wait_s=sched_probe.wake_wait_s(_rows_if_probed(workdir, "wake.csv")),
        balance_delays_s=sched_probe.balance_delays_s(balance),
        loop_s_per_step=runsmod.loop_per_step_s(runs.loop_s) if runs else 0.0,
        **_copies(_rows_if_probed(workdir, "copies.csv")))
    compute_table = pd.concat([fit_compute.step_errors(c, steps) for c in costs], ignore_index=True)
    return FitResult(profile, points, {(f.backend, f.op, f.algorithm, f.workers): lines
                                       for f, lines in pairs},
                     steps, fit_comm.fit_table([f for f, _ in pairs]), compute_table)


def write_outputs(result: FitResult, workdir: Path, out: Path, plot: bool = True) -> None:
    write_rows(workdir / "fit_table.csv", result.comm_table.to_dict("records"))
    write_rows(workdir / "compute_table.csv", result.compute_table.to_dict("records"))
    if plot:
        from calibrate.fits.plots import plot_fits
        plot_fits(workdir / "fits.png", result.points, result.fitted, result.steps,
                  result.profile.models)
    prof.save(result.profile, out)


def build_parser() -> Parser:
    p = Parser(prog="python -m calibrate.fit", description=__doc__.split("\n")[0])
    p.add_argument("--workdir", default=None, type=cli.input_folder,
                   help="folder with the raw probe tables (default: calibration)")
    p.add_argument("--out", default="calibration/profile.json", type=cli.output_file(".json"),
                   help="profile to write")
    p.add_argument("--runs", type=cli.input_folder,
                   help="also fit step times from the run records below this folder")
    p.add_argument("--max-workers", type=cli.int_in(1, cli.MAX_WORKERS),
                   help="only probes and runs with at most K processes")
    p.add_argument("--no-plot", action="store_true", help="skip fits.png")
    p.add_argument("--show", metavar="PROFILE", type=cli.input_file,
                   help="print the fit tables of PROFILE and exit")
    p.add_argument("--timings", metavar="CSV",
                   help="fit from a few timings instead (scheme, workers, hosts, time_s), "
                        "starting from --preset; see python -m simulator.fit_timings --help")
    p.add_argument("--force", action="store_true",
                   help="write the profile even if fits are below the bar (calibrate.fits.quality)")
    p.add_argument("--link", metavar="TOML", type=cli.input_file,
                   help="the network between two such hosts, as python -m calibrate.link wrote "
                        "it: simulator.predict links hosts like this one with it")
    return p


def with_network(profile, path: str):
    """``profile`` with the link ``calibrate.link`` measured (its cluster TOML's [link])."""
    from contracts.checks import ConfigError
    from contracts.cluster import load_cluster
    try:
        link = load_cluster(path).link
    except ConfigError as e:
        raise CalibrationError(f"--link: {e}") from None
    if link is None:
        raise CalibrationError(f"--link: {path} has no [link] (write it with python -m "
                               "calibrate.link)")
    return replace(profile, network=prof.NetworkLink(link.bandwidth_bytes_per_s, link.latency_s,
                                                     f"calibrate.link, {Path(path).name}"))


def parse_args(argv):
    return build_parser().parse_args(argv)


def fit_timings(argv: list[str]) -> int:
    """``--timings``: the simulator's fit from a few timings, in a subprocess."""
    import os
    import subprocess
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    return subprocess.call([sys.executable, "-m", "simulator.fit_timings", *argv], env=env)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if any(a == "--timings" or a.startswith("--timings=") for a in argv):
        return fit_timings(argv)
    return cli.command("python -m calibrate.fit", parse_args, lambda args: run(args, argv), argv,
                       (CalibrationError, prof.ProfileError, RecordError))


def run(args, argv: list[str]) -> int:
    if args.show:
        from calibrate.fits.report import show
        print(show(args.show))
        return 0
    workdir = Path(args.workdir or "calibration")
    if not workdir.is_dir():
        raise CalibrationError(f"{workdir} does not exist: run calibrate.probe first "
                               "(or give --workdir)")
    result = build(workdir, args.runs, args.max_workers,
                   (command_line("calibrate.fit", argv),))
    from calibrate.fits import quality
    found = quality.checks(result, result.profile.cores)
    write_json(workdir / "quality.json", quality.to_json(found, forced=args.force))
    if quality.failing(found) and not args.force:
        print(f"calibrate.fit: {quality.refusal(found)}", file=sys.stderr)
        return 1
    if args.link:
        result = replace(result, profile=with_network(result.profile, args.link))
    result = replace(result, profile=quality.marked(result.profile, found))
    write_outputs(result, workdir, Path(args.out), plot=not args.no_plot)
    weak = quality.failing(found)
    print(f"profile written to {args.out}" + (
        f", marked below its quality bar in {len(weak)} fit(s) (--force): every prediction "
        "from it says so" if weak else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
