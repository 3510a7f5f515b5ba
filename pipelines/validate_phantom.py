"""Communication-bound fidelity on phantom runs: the emulated cluster up to 32 hosts, in pieces.

    python -m pipelines.validate_phantom --out validation-phantom \\
        --workloads cnn,vgg11,resnet50-v100.toml@20 --bandwidths 20mbit,100mbit,1gbit \\
        --calibrate-at 100mbit --workers 2,3,4,6,8,12,16,24,32 --repeats 2 --budget 35

As root. Phantom runs (``real.train --compute phantom``) keep every message real and
sleep the compute, so many hosts fit on two cores; what they measure is the network
and the libraries, which is what this validates:

1. **workloads**: each of ``--workloads`` is a workload file (``FILE@S``: slept at time
   scale S) or a built-in model that ``python -m calibrate.workload`` measures here
   first (``OUT/workloads/NAME.toml``); beside them ``--latency-workload`` (the CNN by
   default), run only where the comparison holds it in, for allreduce and gather_scatter:
   its epoch is mostly gloo's calls, so its held-in runs resolve gloo's latency a step
   (``pipelines.held_in``), which a large model's epoch, mostly bytes, cannot;
2. **profile**: the plain machine's costs that stay real in a phantom run (the
   parameter server's update of the CNN, back to back and after idle waits in sleeping
   polls, the reductions), ``python -m calibrate --quick`` with at most
   ``--calibrate-workers`` processes (``--profile`` skips it; a slept model the profile
   never timed at the server is said in the report: ``unprobed_servers``);
3. for each rate of ``--bandwidths``, the rate ``--calibrate-at`` first: the cluster up
   (``real.cluster up``, one host more than the largest P); at ``--calibrate-at`` only,
   ``python -m calibrate.link`` (two hosts: latency, payload rate, socket buffer,
   per-message CPU) and ``python -m calibrate.copy_probe`` (the host's copies of a flat
   vector, ``OUT/copies.csv``, for a profile without them); then, for each workload and
   each P in turn, ``real.sweep
   --cluster --compute phantom`` of the schemes still running there, ``--repeats``
   runs a point of ``--steps`` steps a worker, the first ``--warmup-steps`` warm-up
   (TCP's windows still growing: docs/results/phantom.md#phantom-32), testbed-bound
   runs retried once. A scheme stops at a workload and
   rate where its runs are testbed-bound (the machine, not the network, set the pace:
   ``real.records.testbed``), or where the simulator predicts one run longer than
   ``--max-run-s``; ``OUT/stops.json`` says where and why;
4. **compare**: every record predicted on its own cluster (its shaped rate, the
   calibrated link, one host per rank with cores of its own, the compute the workload
   at its scale; the training loop's Python a step, from the held-in records where the
   profile has none, and gloo's allreduce latency a ring step and its gather and scatter
   latency a call, from the held-in allreduce and gather_scatter runs where they resolve
   them: ``pipelines.held_in``), held out: P above ``--calibrate-workers`` or a
   rate other than ``--calibrate-at``: ``OUT/compare.csv``, ``OUT/errors.csv``, ``OUT/table.md`` and per
   workload ``OUT/compare-NAME.png`` and ``OUT/breakdown-NAME.png`` (compute, communication
   and waiting, measured beside predicted); the table ends with the held-out errors again
   with each of the link's mechanisms taken out (the calibration's per-message CPU,
   socket buffer, ACK share, payload share; the shapers' token buckets; the loop's
   Python; the held-in runs' latencies a step): what each one moves on these records.

The campaign is long: ``--budget MIN`` stops it between two sweeps once MIN minutes have
passed (the cluster torn down, exit 0); the same command again resumes where it stopped
(points already measured are reused, ``real.sweep``'s settings digest). ``--skip-runs``
redoes only step 4, on ``OUT/runs`` or, in a shipped folder without it, on
``OUT/records.tar.xz``: step 4 packs every run's record and rows there
(``contracts.record_archive``), so the folder without its ``runs/`` can be compared again.

Before it starts, the campaign says its runs and their expected minutes on a quiet machine
(``estimate``: the calibration's stages as ``calibrate.probes.estimate`` prices them, each
run's predicted steps and its start-up, ``RUN_S_PER_RANK`` a rank); ``--dry-run`` says
only that, so the flags can be cut to fit a window before anything runs.

Imports: simulator.compare, contracts, report.stats, simulator.engine, simulator.output,
pipelines.validate_cluster (its stages), calibrate (its plan and estimate), real.schemes.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import cli
from contracts.files import atomic_write_text
from pipelines import validate_cluster as vc
from pipelines.held_in import HELD_IN_STEPS, held_in_loop_s, with_held_in_steps

# python -m simulator.validate_phantom where that old path handed over (the program typed)
PROG = cli.program("python -m pipelines.validate_phantom")
SCHEMES = ("psgd", "async_avg", "gather_scatter", "allreduce", "ddp", "mpi_allreduce",
           "ps_sync", "ps_async")
BUILT_IN = {"cnn": "1,28,28", "ps_cnn": "1,28,28", "mlp": "1,28,28", "linear": "1,28,28",
            "vgg11": "3,32,32"}


@dataclass(frozen=True)
class Phantom:
    """One workload of the campaign: its file, time scale and the name its rows go by."""
    spec: str             # as given: NAME or FILE[@S]
    file: Path
    time_scale: float
    latency_only: bool = False    # --latency-workload: held-in runs for the latency only

    @property
    def tag(self) -> str:
        return f"{self.file.stem}-x{self.time_scale:g}"


def _latency_spec(text: str) -> str | None:
    """``--latency-workload``: one workload spec, or None for ``none``."""
    if str(text).strip().lower() == "none":
        return None
    specs = _workload_specs(text)
    if len(specs) != 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give one workload, or none")
    return specs[0]


def _workload_specs(text: str) -> list[str]:
    specs = [s.strip() for s in str(text).split(",") if s.strip()]
    for s in specs:
        name, _, scale = s.partition("@")
        if scale:
            cli.positive_float(scale)
        if not name.endswith(".toml") and name not in BUILT_IN:
            raise argparse.ArgumentTypeError(f"{name!r} is neither a workload file (.toml) nor a built-in "
                             f"model ({', '.join(BUILT_IN)})")
    if not specs:
        raise argparse.ArgumentTypeError(f"{text!r} names no workload")
    return specs


def build_parser() -> cli.Parser:
    p = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--out", default="validation-phantom", type=cli.output_folder,
                   help="folder for everything")
    p.add_argument("--workloads", default=["cnn"], type=_workload_specs,
                   help="workload files (FILE.toml, FILE.toml@S for time scale S) or built-in "
                        f"models measured here ({', '.join(BUILT_IN)}), comma-separated")
    p.add_argument("--latency-workload", default="cnn", type=_latency_spec, metavar="WORKLOAD",
                   help="a small model run beside --workloads at --calibrate-at and P up to "
                        "--calibrate-workers, for the schemes whose gloo latency a step the "
                        "held-in runs fit (allreduce, gather_scatter), where a large model's "
                        "epoch cannot resolve it; none: without (default: cnn)")
    p.add_argument("--bandwidths", default=["20mbit", "100mbit", "1gbit"], type=vc._rates,
                   help="shaped link rates, comma-separated (tc units)")
    p.add_argument("--calibrate-at", default=None, type=vc.tc_rate,
                   help="the one rate the link calibration sees (default: the first)")
    p.add_argument("--schemes", default=list(SCHEMES), metavar="NAMES",
                   type=cli.choice_list(SCHEMES), help="rank-based schemes, comma-separated, or all")
    p.add_argument("--workers", default=[2, 3, 4, 6, 8, 12, 16, 24, 32],
                   type=cli.worker_counts_up_to(vc.MAX_P, low=2), metavar="P",
                   help=f"{cli.WORKERS_HELP} (default: 2,3,4,6,8,12,16,24,32)")
    p.add_argument("--calibrate-workers", default=4, type=cli.int_in(1, 4),
                   help="points with P above this (or at another rate) are held out")
    p.add_argument("--steps", default=8, type=cli.int_in(3, 10**6),
                   help="steps of each worker a run (its first --warmup-steps left out)")
    p.add_argument("--warmup-steps", default=1, type=cli.positive_int, metavar="K",
                   help="each worker's first K steps of a run are warm-up, left out of its "
                        "time per epoch (TCP's windows still growing: docs/results/"
                        "phantom.md); at most --steps - 2")
    p.add_argument("--repeats", default=2, type=cli.int_in(1, 100), help="runs per point")
    p.add_argument("--max-run-s", default=240.0, type=cli.float_in(1, 86400),
                   help="a point whose run the simulator predicts longer than this is not run")
    p.add_argument("--budget", default=0.0, type=cli.nonnegative_float, metavar="MIN",
                   help="stop between two sweeps after this many minutes (0: no limit); run "
                        "the command again to resume")
    p.add_argument("--profile", default=None, type=cli.input_file,
                   help="use this profile instead of calibrating one (step 2)")
    p.add_argument("--server-probe", type=cli.input_folder, metavar="WORKDIR",
                   help="a server probe's workdir (python -m calibrate.probe --part server): "
                        "its real server's update and cold-update curve, for the profile's "
                        "models that have none; its table is kept as OUT/server_update.csv, "
                        "which a later comparison of OUT takes without the flag")
    p.add_argument("--force-calibration", action="store_true",
                   help="keep a compute profile whose fits are below calibrate's bar")
    p.add_argument("--skip-runs", action="store_true", help="only compare what OUT holds")
    p.add_argument("--dry-run", action="store_true",
                   help="print the campaign's runs and its expected minutes, run nothing")
    p.set_defaults(model="cnn", batch_size=32)       # what its calibrate --quick times
    return p


# ------------------------------------------------------------------ the campaign's inputs

def prepare_workloads(args, out: Path) -> list[Phantom]:
    """Every workload as a file in ``OUT/workloads`` (records name that copy, so the folder
    carries what its runs slept): a given file copied there, a built-in model measured
    there by ``calibrate.workload`` (once: a later piece reuses it)."""
    folder = out / "workloads"
    folder.mkdir(parents=True, exist_ok=True)
    got = []
    for spec, latency_only in workload_specs(args):
        name, _, scale = spec.partition("@")
        if name.endswith(".toml"):
            file = folder / Path(name).name
            text = Path(name).read_text()
            if not file.exists() or file.read_text() != text:
                atomic_write_text(file, text)
        else:
            file = folder / f"{name}.toml"
            if not file.exists():
                vc._run([sys.executable, "-m", "calibrate.workload", "--model", name,
                         "--input-shape", BUILT_IN[name], "--batch-size", "32", "--out",
                         str(file)], out / "logs" / f"workload-{name}.log", 1800, PROG)
        got.append(Phantom(spec, file.resolve(), float(scale or 1), latency_only))
    return got


def workload_specs(args) -> list[tuple[str, bool]]:
    """(spec, latency only) of every workload the campaign sweeps: ``--workloads``, then
    ``--latency-workload`` where it is not one of them and a scheme of ``--schemes`` has
    its latency a step fitted from held-in runs (``pipelines.held_in.HELD_IN_STEPS``)."""
    got = [(spec, False) for spec in args.workloads]
    extra = args.latency_workload
    names = {Path(spec.partition("@")[0]).stem for spec in args.workloads}
    if (extra and Path(extra.partition("@")[0]).stem not in names
            and set(args.schemes) & set(HELD_IN_STEPS)):
        got.append((extra, True))
    return got


def swept(wl: Phantom, rate: str, args) -> list[tuple[int, list[str]]]:
    """(P, schemes) the campaign runs ``wl`` at ``rate``: every one of ``--workers`` and
    ``--schemes``; a latency workload only where the comparison holds it in (the
    calibrated rate, P up to ``--calibrate-workers``) and only the schemes whose latency
    the held-in runs fit."""
    if not wl.latency_only:
        return [(p, list(args.schemes)) for p in args.workers]
    schemes = [s for s in args.schemes if s in HELD_IN_STEPS]
    if rate != calibrated_rate(args) or not schemes:
        return []
    return [(p, schemes) for p in args.workers if p <= args.calibrate_workers]


def calibrated_rate(args) -> str:
    """``--calibrate-at``, or the first of ``--bandwidths``."""
    return args.calibrate_at or args.bandwidths[0]


def planned_workloads(args, out: Path) -> list[Phantom] | str:
    """The workloads as ``prepare_workloads`` will have them, without writing anything
    (for ``--dry-run``): a given file where it is, a built-in model's file where an earlier
    piece measured it; or why one is not there yet."""
    got = []
    for spec, latency_only in workload_specs(args):
        name, _, scale = spec.partition("@")
        file = Path(name) if name.endswith(".toml") else out / "workloads" / f"{name}.toml"
        if not file.exists():
            return (f"--dry-run: {name} is measured by the campaign first (calibrate.workload); "
                    "give its workload file to estimate"
                    + (" (--latency-workload FILE, or none)" if latency_only else ""))
        got.append(Phantom(spec, file.resolve(), float(scale or 1), latency_only))
    return got


def batch_of(wl: Phantom) -> int:
    """The batch a workload was measured at: its sleeps are the measured times there."""
    from contracts.workload import load_workload
    return load_workload(wl.file).batch_size


def rate_tag(rate: str) -> str:
    return f"{vc.rate_bits_per_s(rate) // 10**6}mbit"


class Stops:
    """Where each scheme stopped, per workload and rate (``OUT/stops.json``): the P it
    stopped at and why; kept across pieces."""

    def __init__(self, path: Path):
        self.path = path
        self.rows = json.loads(path.read_text()) if path.exists() else {}

    def key(self, wl: Phantom, rate: str, scheme: str) -> str:
        return f"{wl.tag}|{rate_tag(rate)}|{scheme}"

    def stopped(self, wl: Phantom, rate: str, scheme: str, p: int) -> bool:
        row = self.rows.get(self.key(wl, rate, scheme))
        return row is not None and p >= row["workers"]

    def stop(self, wl: Phantom, rate: str, scheme: str, p: int, why: str) -> None:
        self.rows[self.key(wl, rate, scheme)] = {"workers": p, "why": why}
        atomic_write_text(self.path, json.dumps(self.rows, indent=1, sort_keys=True))
        print(f"{PROG}: {wl.tag} at {rate}: {scheme} stops at P = {p}: {why}", file=sys.stderr)


def predicted_run_s(scheme: str, p: int, wl: Phantom, rate: str, steps: int, profile,
                    link) -> float:
    """The simulator's time for one run of the point (its steps, not start-up), on the
    cluster the sweep runs it on: what ``--max-run-s`` is held against."""
    from simulator.compare import emulated_link
    from contracts.cluster import Cluster
    from contracts.workload import Workload, load_workload, slept
    from simulator.engine import simulate
    from simulator.engine.machine import machine
    from simulator.model.config import SchemeConfig
    w = slept(load_workload(wl.file), wl.time_scale, wl.tag)
    cluster = Cluster(hosts=p + 1, cores_per_host=1,
                      link=emulated_link(vc.rate_bits_per_s(rate), 0.0, link))
    mach = machine(profile, "", cluster, [(w, str(wl.file))])
    work = Workload(model=wl.tag, batch_per_worker=w.batch_size,
                    dataset_samples=steps * w.batch_size * p, epochs=1.0)
    return simulate(SchemeConfig(name=scheme), p, work, cluster, mach.profile).time_s


def sweep_point(args, out: Path, wl: Phantom, rate: str, p: int, schemes: list[str]) -> Path:
    """``real.sweep --cluster --compute phantom`` of ``schemes`` at P = ``p``."""
    batch = batch_of(wl)
    runs = out / "runs" / wl.tag / rate_tag(rate)
    n = len(schemes) * args.repeats * 2                 # each run may be retried once
    vc._run([sys.executable, "-m", "real.sweep", "--cluster", "--resume",
             "--schemes", ",".join(schemes), "--workers", f"{p}-{p}",
             "--repeats", str(args.repeats), "--retry-testbed-bound", "1",
             "--retry-disturbed", "1", "--compute", "phantom", "--workload", str(wl.file),
             "--time-scale", f"{wl.time_scale:g}", "--dataset", "synthetic", "--epochs", "1",
             "--batch-size", str(batch), "--train-size", str(args.steps * batch * p),
             "--test-size", "64", "--timeout", str(args.max_run_s * 3 + 120),
             "--out", str(runs), "--", "--threads", "1",
             "--warmup-steps", str(args.warmup_steps)],
            out / "logs" / f"sweep-{wl.tag}-{rate_tag(rate)}-P{p}.log",
            n * (args.max_run_s * 3 + 180), PROG)
    return runs


def faithless(runs: Path, scheme: str, p: int) -> str | None:
    """Why ``scheme`` at P = ``p`` has no faithful completed run in ``runs`` (the first
    testbed-bound run's reason, or that none completed), or None when it has one."""
    from contracts import record
    from simulator.compare import workers_of
    why = None
    for d in record.find_runs(runs):
        try:
            rec = record.read(d)
        except record.RecordError:
            continue
        if rec["config"].get("algorithm") != scheme or workers_of(rec) != p:
            continue
        if rec["status"] == "completed" and not rec.get("testbed_bound"):
            return None
        why = why or ("testbed-bound: " + "; ".join(rec.get("testbed", {}).get("reasons", []))
                      if rec["status"] == "completed" else f"run {rec['status']}")
    return why or "no run completed"


# A phantom run's wall time on this VM beyond the steps the simulator predicts for it:
# mpiexec through the namespaces, each rank's interpreter and imports on the two shared
# cores, MPI_Init, the record and the testbed's checks, all growing with the ranks:
# 1.8 s a rank (real.sweep's "ok in S s" of 64 runs of 2 to 13 ranks at 1 Gbit/s and
# 200 Mbit/s less their steps, phantom-11, -12 and a check at P = 12; the median run
# within 0.9 s of it; 2-core VM, quiet, 2026-11-27). CLUSTER_S brings 13 hosts up and
# down, LINK_S is calibrate.link with the copy probe (2 s, the same day; calibrate.link
# with its five launches for gloo's CPU a message 43-54 s at 200 Mbit/s, 2026-11-28).
RUN_S_PER_RANK = 1.8
CLUSTER_S = 5.0
LINK_S = 55.0


def planned_runs(args, out: Path, loads: list[Phantom], profile, link) -> list[dict]:
    """The runs the campaign would make now, in its order: per rate (``--calibrate-at``
    first), workload and P, the schemes not stopped in ``OUT/stops.json`` and not
    predicted past ``--max-run-s``, ``--repeats`` each, with the seconds one run takes
    (its predicted steps and ``RUN_S_PER_RANK`` a rank). Runs already measured
    under ``OUT/runs`` are counted again (a resumed campaign reuses them)."""
    from real.schemes import ranks_for
    stops, first = Stops(out / "stops.json"), calibrated_rate(args)
    got = []
    for rate in [first] + [r for r in args.bandwidths if r != first]:
        for wl in loads:
            for p, schemes in swept(wl, rate, args):
                for s in schemes:
                    if stops.stopped(wl, rate, s, p):
                        continue
                    t = predicted_run_s(s, p, wl, rate, args.steps, profile, link)
                    if t <= args.max_run_s:
                        got.append({"rate": rate, "workload": wl.tag, "workers": p, "scheme": s,
                                    "runs": args.repeats,
                                    "run_s": RUN_S_PER_RANK * ranks_for(s, p) + t})
    return got


def calibration_s(args, out: Path) -> float:
    """What the campaign's own calibration (``vc.calibrate_flags``) is expected to take
    (``calibrate.probes.estimate``), 0 where it uses a profile it has."""
    if args.profile or (out / "profile.json").exists():
        return 0.0
    from calibrate.__main__ import forwarded_plan_argv, parse_args, probe_steps, trimmed_plan
    from calibrate.probes import estimate
    from calibrate.probes.probe import build_plan
    cal = parse_args(vc.calibrate_flags(args, out))
    plan = trimmed_plan(build_plan(cal), cal.max_workers)
    steps = probe_steps(plan, out / "calibration", forwarded_plan_argv(cal, plan))
    return sum(estimate.expected_s(plan, [label for label, _ in steps], True).values())


def estimate(args, out: Path, loads: list[Phantom]) -> str:
    """The campaign's runs and its expected minutes on a quiet machine, said before it
    starts (and all ``--dry-run`` prints): the calibration, each rate's cluster (and the
    link's calibration), each point's runs; the retry of a testbed-bound or disturbed run
    on top."""
    from contracts import profile as profiles
    from contracts.cluster import load_link_calibration
    given = Path(args.profile) if args.profile else out / "profile.json"
    profile = profiles.load(given) if given.exists() else profiles.load_default()
    link = load_link_calibration(out / "link.toml") if (out / "link.toml").exists() else None
    runs = planned_runs(args, out, loads, profile, link)
    cal = calibration_s(args, out)
    lines, total = [f"  calibration: {cal / 60:.1f} min"] if cal else [], cal
    for rate in dict.fromkeys(r["rate"] for r in runs):
        at = [r for r in runs if r["rate"] == rate]
        linked = link is None and rate == calibrated_rate(args)
        secs = CLUSTER_S + LINK_S * linked + sum(r["runs"] * r["run_s"] for r in at)
        total += secs
        points = ", ".join(f"{p} ({len([r for r in at if r['workers'] == p])})"
                           for p in dict.fromkeys(r["workers"] for r in at))
        lines.append(f"  {rate}: {sum(r['runs'] for r in at)} runs, {secs / 60:.1f} min"
                     + (", the link calibrated first" if linked else "")
                     + f"; P (schemes): {points}")
    retries = sum(r["runs"] * r["run_s"] for r in runs)
    return "\n".join([f"{sum(r['runs'] for r in runs)} runs, about {total / 60:.1f} min on a "
                      "quiet machine, then the comparison:", *lines,
                      f"  a testbed-bound or disturbed run is tried once more: up to "
                      f"{retries / 60:.1f} min more if every run were"])


class OutOfBudget(Exception):
    """The piece's minutes are spent: stop between two sweeps."""


def run_at(rate: str, args, out: Path, loads: list[Phantom], stops: Stops, profile,
           deadline: float) -> None:
    """The cluster up at ``rate``; the link calibrated there if it is ``--calibrate-at``;
    then every workload's P in turn, each scheme until it stops."""
    from contracts.cluster import load_link_calibration
    link_toml = out / "link.toml"
    with vc.cluster_up(max(args.workers) + 1, rate, out / "logs" / f"cluster-{rate_tag(rate)}.log",
                       PROG):
        if rate == calibrated_rate(args) and not link_toml.exists():
            vc._run([sys.executable, "-m", "calibrate.link", "--out", str(link_toml),
                     "--workdir", str(out / "link")], out / "logs" / "link.log", 600, PROG)
            if not (out / COPIES).exists():         # the host's copies (calibrate.copy_probe)
                vc._run([sys.executable, "-m", "calibrate.copy_probe", "--out", str(out / COPIES)],
                        out / "logs" / "copies.log", 120, PROG)
        link = load_link_calibration(link_toml)
        for wl in loads:
            for p, plan in swept(wl, rate, args):
                schemes = [s for s in plan if not stops.stopped(wl, rate, s, p)]
                for s in list(schemes):
                    t = predicted_run_s(s, p, wl, rate, args.steps, profile, link)
                    if t > args.max_run_s:
                        stops.stop(wl, rate, s, p, f"a run would take {t / 60:.1f} min "
                                   f"(predicted; --max-run-s {args.max_run_s:g})")
                        schemes.remove(s)
                if not schemes:
                    continue
                if time.monotonic() > deadline:
                    raise OutOfBudget
                runs = sweep_point(args, out, wl, rate, p, schemes)
                for s in schemes:
                    why = faithless(runs, s, p)
                    if why:
                        stops.stop(wl, rate, s, p, why)


def campaign(args, out: Path) -> tuple[Path, bool]:
    """Steps 1-3; (the profile, whether every point was run or stopped)."""
    from contracts import profile as profiles
    deadline = time.monotonic() + (args.budget * 60 if args.budget else float("inf"))
    out.mkdir(parents=True, exist_ok=True)
    loads = prepare_workloads(args, out)
    print(f"{PROG}: {estimate(args, out, loads)}", file=sys.stderr)
    profile_path = vc.calibrate_profile(args, out, PROG) if args.profile or not \
        (out / "profile.json").exists() else out / "profile.json"
    profile = profiles.load(profile_path)
    stops = Stops(out / "stops.json")
    first = calibrated_rate(args)
    try:
        for rate in [first] + [r for r in args.bandwidths if r != first]:
            run_at(rate, args, out, loads, stops, profile, deadline)
    except OutOfBudget:
        return profile_path, False
    return profile_path, True


# ------------------------------------------------------------------ step 4: the comparison

def compared(out: Path, profile_path: Path, calibrate_workers: int, without: str = "",
             server_rows: tuple = (), runs: Path | None = None, copy_rows: tuple = (),
             link_values: dict | None = None):
    """Every phantom record under ``runs`` (default ``OUT/runs``) predicted on its cluster
    (``simulator.compare`` with the calibrated link, less the mechanism ``without`` names:
    ``WITHOUT``), with the held-out flags; the profile's models without a server update take
    ``server_rows``' (a server probe's ``server_update.csv``), a profile without the training
    loop's Python a step takes the held-in records' (``held_in_loop_s``; ``without`` LOOP:
    none, what it moves), gloo's latency a step of allreduce, gather and scatter is the
    held-in allreduce and gather_scatter runs' where there are any
    (``pipelines.held_in.with_held_in_steps``; ``without`` STEP: the profile's one-host
    probe), a profile without the host's copies takes ``copy_rows``' (a copy
    probe's rows, ``calibrate.copy_probe``), or else ``OUT/copies.csv``'s where the
    validation made one; ``link_values`` replace the calibrated link's fields of those names
    (``benchmarks.repredict --cpu-per-message``); without ``server_rows``, those
    ``--server-probe`` kept in ``OUT`` (``kept_server_rows``); (rows, the link) or a usage line."""
    from calibrate.fits.fit_compute import with_server_probe
    from calibrate.probes.copy_probe import read_rows, with_copy_probe
    from simulator.compare import compare
    from contracts import profile as profiles
    from contracts.checks import ConfigError
    from contracts.cluster import load_link_calibration
    from simulator.output.cluster_report import with_flags
    server_rows = kept_server_rows(out, server_rows)
    try:
        prof = with_server_probe(profiles.load(profile_path), list(server_rows))
        if not copy_rows and (out / COPIES).exists():
            try:
                copy_rows = tuple(read_rows(out / COPIES))
            except ValueError as e:
                return None, str(e)
        if copy_rows and not prof.copy_s_per_byte:
            prof = with_copy_probe(prof, list(copy_rows))
        link = load_link_calibration(out / "link.toml")
        if not prof.loop_s_per_step and without != LOOP:
            prof = replace(prof, loop_s_per_step=held_in_loop_s(runs or out / "runs", link,
                                                                calibrate_workers))
        link = replace(link, **(link_values or {}))
        fitted, notes = with_held_in_steps(runs or out / "runs", prof, link,
                                           calibrate_workers, [out / "workloads"])
        prof = prof if without == STEP else fitted
        if without in WITHOUT:
            link = replace(link, **WITHOUT[without])
        skipped: list = []
        df = compare(runs or out / "runs", prof, link=link, workloads=[out / "workloads"],
                     skipped=skipped, keep=("phantom",), buckets=without != BUCKETS)
    except (profiles.ProfileError, ConfigError) as e:
        return None, str(e)
    for where, why in skipped:
        print(f"{PROG}: skipped {where}: {why}", file=sys.stderr)
    if df.empty:
        return None, f"no completed phantom run records under {runs or out / 'runs'}"
    df["held_out"] = df["workers"] > calibrate_workers
    df = with_flags(df, link.shaped_bits_per_s)
    df.attrs["held_in_steps"] = "\n".join(notes)
    return df, link


COPIES = "copies.csv"        # the validation's copy probe (calibrate.copy_probe), beside link.toml

# the link calibration's mechanisms (calibrate.link), each one taken out for --mechanisms
WITHOUT = {"per-message CPU": {"cpu_s_per_message": 0.0, "cpu_s_per_byte": 0.0},
           "socket buffer": {"socket_buffer_bytes": 0.0},
           "ACK share": {"ack_share": 0.0},
           "payload share": {"payload_efficiency": 1.0}}
BUCKETS = "token buckets"     # the shapers' bursts (the records' burst_bytes), taken out too
LOOP = "loop's Python"        # the held-in records' loop outside the rows, taken out too
STEP = "held-in runs' latency"   # the held-in runs' latencies a step (allreduce's, gather's
                                  # and scatter's), likewise
MECHANISMS = (*WITHOUT, BUCKETS, LOOP, STEP)


def mechanisms(out: Path, profile_path: Path, calibrate_workers: int,
               server_rows: tuple = (), runs: Path | None = None) -> str:
    """Held-out median / worst error per scheme with the whole calibrated link and with each
    of its mechanisms taken out, on the same records (``OUT/mechanisms.md``): what each one
    moves."""
    import pandas as pd
    from report.stats import median_worst, scheme_sets
    rows = []
    for name in ["", *MECHANISMS]:
        df, _ = compared(out, profile_path, calibrate_workers, name, server_rows, runs)
        if df is None:
            continue
        held = df[df["held_out_p"] | df["unseen_rate"]]
        for scheme, g in scheme_sets(held):
            median, worst = median_worst(g["rel_error"])
            rows.append({"link": f"without {name}" if name else "as calibrated",
                         "scheme": scheme, "cell": f"{100 * median:.0f} / {100 * worst:.0f}%"})
    table = pd.DataFrame(rows).pivot(index="link", columns="scheme", values="cell")
    table = table.reindex(["as calibrated"] + [f"without {n}" for n in MECHANISMS])
    lines = ["| held-out median / worst | " + " | ".join(table.columns) + " |",
             "|---" * (len(table.columns) + 1) + "|"]
    lines += [f"| {i} | " + " | ".join(str(v) for v in r) + " |" for i, r in table.iterrows()]
    return "\n".join(lines) + "\n"


def unprobed_servers(out: Path, profile_path: Path, server_rows: tuple, df) -> list[str]:
    """The slept models of ``OUT/workloads`` that a parameter-server scheme of ``df`` ran
    and whose real update neither the profile nor ``server_rows`` measured: their server
    is priced by the profile's parameter line (``ServerCost``: one ``w.add_``, microseconds
    where the real update with its cold caches takes a fraction of a millisecond)."""
    from calibrate.fits.fit_compute import with_server_probe
    from contracts import profile as profiles
    from contracts.workload import load_workload
    if not df["scheme"].isin(["ps_sync", "ps_async"]).any():
        return []
    prof = with_server_probe(profiles.load(profile_path), list(server_rows))
    measured = {m.model for m in prof.models if m.server_update_s}
    slept = {load_workload(f).name for f in sorted((out / "workloads").glob("*.toml"))}
    return sorted(slept - measured)


def report(out: Path, profile_path: Path, calibrate_workers: int,
           server_rows: tuple = ()) -> int:
    """Step 4 on ``OUT/runs``, or on ``OUT/records.tar.xz`` where the folder has no runs
    (a shipped one); ``OUT/runs`` packed into that archive first
    (``contracts.record_archive``)."""
    from contracts import record_archive as archive
    try:
        if (out / archive.RUNS).is_dir():
            archive.pack(out)
        with archive.unpacked(out) as runs:
            return _report(out, profile_path, calibrate_workers, server_rows, runs)
    except archive.ArchiveError as e:
        return cli.usage_error(PROG, str(e))


def _report(out: Path, profile_path: Path, calibrate_workers: int, server_rows: tuple,
            runs: Path) -> int:
    from simulator.output.cluster_report import (
        breakdown_figure,
        error_table,
        figure,
        markdown_errors,
        markdown_table,
    )
    df, link = compared(out, profile_path, calibrate_workers, server_rows=server_rows,
                        runs=runs)
    if df is None:
        return cli.usage_error(PROG, link)
    df["held_out_any"] = df["held_out_p"] | df["unseen_rate"]
    errors = error_table(df)
    atomic_write_text(out / "compare.csv", df.to_csv(index=False))
    atomic_write_text(out / "errors.csv", errors.to_csv(index=False))
    stops = Stops(out / "stops.json").rows
    parts = [f"Link: OUT/link.toml (latency {link.latency_s * 1e6:.1f} us, payload "
             f"{link.payload_efficiency:.3f} of the shaped rate, measured at "
             f"{link.shaped_bits_per_s / 1e6:g} Mbit/s); held out: P > {calibrate_workers} "
             "or another rate", "", df.attrs["held_in_steps"], "", markdown_errors(errors), ""]
    unprobed = unprobed_servers(out, profile_path, server_rows, df)
    if unprobed:
        note = (f"The profile measured no server update of {', '.join(unprobed)}: the "
                "parameter server's update is priced by its parameter line (calibrate with "
                "--models NAME, or give --server-probe WORKDIR).")
        print(f"{PROG}: {note}", file=sys.stderr)
        parts += [note, ""]
    written = []
    for model, g in df.groupby("model"):
        parts += [f"## {model}", "", markdown_table(g), ""]
        written += [figure(g, out / f"compare-{model}.png"),
                    breakdown_figure(g, out / f"breakdown-{model}.png")]
    if stops:
        parts += ["## Where each scheme stopped", "", "| workload, rate, scheme | P | why |",
                  "|---|---|---|"] + [f"| {k.replace('|', ', ')} | {v['workers']} | {v['why']} |"
                                      for k, v in sorted(stops.items())]
    parts += ["", "## What each of the link's mechanisms moves", "",
              mechanisms(out, profile_path, calibrate_workers, server_rows, runs)]
    text = "\n".join(parts) + "\n"
    atomic_write_text(out / "table.md", text)
    print(text)
    print(f"wrote {out / 'compare.csv'}, {out / 'errors.csv'}, {out / 'table.md'}, "
          + ", ".join(map(str, written)), file=sys.stderr)
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


def run(args) -> int:
    out = Path(args.out)
    if args.warmup_steps > args.steps - 2:
        return cli.usage_error(PROG, f"--warmup-steps {args.warmup_steps} leaves fewer than 2 "
                                     f"of --steps {args.steps} measured: give more --steps")
    if calibrated_rate(args) not in args.bandwidths:
        return cli.usage_error(PROG, f"--calibrate-at {args.calibrate_at} is not one of "
                                     "--bandwidths")
    missing = [(s.partition("@")[0], latency) for s, latency in workload_specs(args)
               if s.partition("@")[0].endswith(".toml") and not Path(s.partition("@")[0]).is_file()]
    if missing:
        name, latency = missing[0]
        flag = "--latency-workload" if latency else "--workloads"
        return cli.usage_error(PROG, f"{flag}: {name} is not a file")
    profile_path = Path(args.profile) if args.profile else out / "profile.json"
    server_rows = server_probe_rows(args.server_probe) if args.server_probe else ()
    if isinstance(server_rows, str):
        return cli.usage_error(PROG, server_rows)
    if args.server_probe and not args.dry_run:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / SERVER_UPDATE,
                          (Path(args.server_probe) / SERVER_UPDATE).read_text())
    if args.dry_run:
        loads = planned_workloads(args, out)
        if isinstance(loads, str):
            return cli.usage_error(PROG, loads)
        print(estimate(args, out, loads))
        return 0
    if not args.skip_runs:
        if vc.cluster_tools_missing():
            return cli.usage_error(PROG, vc.cluster_tools_missing())
        try:
            profile_path, done = campaign(args, out)
        except (RuntimeError, OSError) as e:
            print(f"{PROG}: {e}", file=sys.stderr)
            return 1
        if not done:
            print(f"{PROG}: stopped after the --budget of {args.budget:g} min; the same "
                  "command resumes", file=sys.stderr)
    return report(out, profile_path, args.calibrate_workers, kept_server_rows(out, server_rows))


SERVER_UPDATE = "server_update.csv"   # a server probe's table, kept in OUT by --server-probe


def server_probe_rows(workdir: str | Path) -> tuple | str:
    """The rows of a server probe's ``server_update.csv`` under ``workdir``, or what is wrong."""
    from calibrate.probes.rawio import CalibrationError, read_rows
    try:
        return tuple(read_rows(Path(workdir) / SERVER_UPDATE).to_dict("records"))
    except CalibrationError as e:
        return f"--server-probe: {e} (python -m calibrate.probe --part server makes it)"


def kept_server_rows(out: Path, given: tuple = ()) -> tuple:
    """``given`` server probe rows, or else those ``--server-probe`` kept in ``OUT`` (a
    shipped folder compares again as it was compared); () where neither."""
    if given or not (out / SERVER_UPDATE).is_file():
        return tuple(given)
    rows = server_probe_rows(out)
    return () if isinstance(rows, str) else rows


if __name__ == "__main__":
    sys.exit(main())
