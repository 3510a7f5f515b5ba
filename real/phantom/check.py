"""Check the substitution: a phantom run and the real run agree in time per iteration.

    python -m real.phantom_check --out phantom-check                  # every rank-based scheme
    python -m real.phantom_check --out pc --schemes ps_sync,ps_async --workers 1 --repeats 5
    python -m real.phantom_check --out pc --schemes ddp,mpi_allreduce --workers 4,8,15 \
        --bind-to-core --time-limit 200                # a 16-core machine, a core a rank

On one host at P = 2 (``--workers``, one count or several), every rank-based scheme runs for
real (the seed-000 CNN, synthetic data) and as a phantom of the CNN's workload, measured
here by ``calibrate.workload`` (per-worker batch, one torch thread as each rank has) as
the ranks compute: P processes at once under the runs' own ``mpirun`` and binding,
``--measurements`` sets of them, each measured when its first phantom run comes
(``WorkloadSets``); each rank of phantom run r sleeps its own process's times from set r
(a step's time differs by up to half between processes here, and a synchronous run waits
for its slowest rank). ``--workload FILE``
gives every rank one file instead. The runs alternate real, phantom, real, ... so the
machine's drift falls on both alike. A run's time per iteration is the mean over its
workers of (compute + communication + waiting) per iteration, the first ``--warmup``
iterations left out (start-up, DDP's bucket rebuild, first messages).

A scheme passes when the phantom's mean lies within 5% of the real mean beyond the
compute's own spread: the half-widths of the two modes' 95% confidence intervals over
their runs, as shares of their means, added in quadrature. ``--time-limit`` starts no
run that many seconds after the start and judges what ran (the runs left are counted).
Runs marked disturbed (other processes took CPU) are left out and counted; a scheme with
fewer than two undisturbed runs of a mode is not judged, nor one whose real ranks shared
cores (more ranks than cores, as the run's record says: ``real.records.testbed``): the
row says testbed-bound. Output: a table on stdout, ``OUT/phantom_check.csv`` (one row
per scheme), ``OUT/runs/`` (every record), ``OUT/logs/`` and ``OUT/workload/`` (every
measurement, ``cnn-P{P}-set{r}-w{i}.toml``: worker i of phantom run r; and
``measurements.csv``: each set's steps and the cores other processes used meanwhile: a
set measured while they used a quarter core or more is disturbed and measured again, up
to three times).

Imports: pandas, real (schemes, sweep), cli, contracts (files, record, workload), report.stats;
calibrate.workload runs as a subprocess.
"""
from __future__ import annotations

import math
import statistics
import sys
import time
from pathlib import Path

from real import schemes
from contracts import record
import cli

PROG = "python -m real.phantom_check"
AGREEMENT = 0.05                 # the issue's bar: within 5% beyond the compute's spread
MODES = ("real", "phantom")
WORKLOAD_STEPS = 50              # calibrate.workload's timed steps (its default: 10)
MEASURE_TRIES = 3                # a set measured while other processes took CPU: again


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
    p.add_argument("--workers", default=[2], type=worker_counts, metavar="P",
                   help="workers of the runs (the parameter server adds a rank): N (P = N), "
                        "a list 4,8,15 or a range 2-4")
    p.add_argument("--bind-to-core", action="store_true",
                   help="bind each rank to a core of its own (mpirun -bind-to core): a machine "
                        "with a core for every rank")
    p.add_argument("--time-limit", default=None, type=cli.positive_float, metavar="S",
                   help="start no run S seconds after the check's start (the workload's "
                        "measurement included); judge what ran")
    p.add_argument("--measurements", default=3, type=cli.int_in(1, 100),
                   help="sets of P workload measurements per P (phantom run r takes set r "
                        "mod this: a file per worker)")
    p.add_argument("--alone", action="store_true",
                   help="measure the workload one process at a time (default: P at once "
                        "under mpirun, as the ranks compute)")
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


def worker_counts(text: str) -> list[int]:
    """``--workers``: a lone N is P = N; else the counts of ``cli.worker_counts``."""
    item = str(text).strip()
    return [cli.int_in(1, 64)(item)] if item.isdigit() else cli.worker_counts(item, 64)


def workload_problem(path: str | None) -> str | None:
    """Why ``--workload`` cannot drive the check's phantoms (None: it can, or none given):
    it must drive a phantom and be the CNN's, as the real runs are."""
    if path is None:
        return None
    from real.phantom.plan import PhantomError, load_plan
    try:
        name = load_plan(path).workload.name
    except PhantomError as e:
        return str(e)
    if name != "cnn":
        return (f"--workload {path}: its model is {name}, the real runs' is the CNN: give a "
                "workload of the cnn, or leave --workload out to measure it here")
    return None


class WorkloadSets:
    """The phantom ranks' workload files: the CNN's workload at the per-worker batch and one
    thread, measured as the ranks compute: a set of P ``calibrate.workload`` processes at
    once under the runs' own ``mpirun`` (the same binding: ``--bind-to-core``), a file
    each (``--alone``: one process at a time), ``--measurements`` sets per P; rank i of
    phantom run r takes set (r mod sets)'s file i. A set is measured when its first phantom
    run comes, so the machine's drift falls on it as on the runs around it, and a time
    limit spends nothing on sets of points it never reaches. ``fixed``: ``--workload``,
    one file for every rank, nothing measured.

    Why sets and not one file: the same step differs by up to half between processes on
    the 2-core VM (11.5-19.2 ms a step among the processes of one quiet hour, steady within
    each process), a synchronous run goes at its slowest rank's pace, and a phantom whose
    ranks all sleep one median measurement stands for equal ranks. Each phantom rank
    sleeps a measured process's times instead, so a phantom run draws its ranks' speeds as
    a real run does."""

    def __init__(self, args, out: Path, fixed: Path | None = None):
        self.args, self.folder, self.fixed = args, out / "workload", fixed
        self.sets: dict[tuple[int, int], list[Path]] = {}
        self.log: list[dict] = []

    def files(self, workers: int, run: int) -> list[Path]:
        """The files of phantom run ``run`` at P = ``workers``, worker i's the i-th."""
        if self.fixed is not None:
            return [self.fixed]
        key = (workers, run % self.args.measurements)
        if key not in self.sets:
            self.sets[key] = self._measure(*key)
        return self.sets[key]

    def steps(self) -> list[float]:
        """Every measured step (s)."""
        from contracts.workload import load_workload
        return [load_workload(f).step_s for files in self.sets.values() for f in files]

    def _measure(self, workers: int, k: int) -> list[Path]:
        """Set ``k`` at P = ``workers``, measured again (up to ``MEASURE_TRIES`` times) while
        other processes used a quarter core or more; every try in measurements.csv."""
        import pandas as pd

        from contracts.files import atomic_write_text
        from contracts.workload import load_workload
        from real.records.load import OTHERS_MIN_CORES
        self.folder.mkdir(parents=True, exist_ok=True)
        files = [self.folder / f"cnn-P{workers}-set{k}-w{i}.toml" for i in range(workers)]
        for attempt in range(1, MEASURE_TRIES + 1):
            others = measure_set(self.args, files)
            disturbed = others is not None and others >= OTHERS_MIN_CORES
            steps_ms = [load_workload(f).step_s * 1e3 for f in files]
            self.log.append({"workers": workers, "set": k, "attempt": attempt,
                             "others_cores": others, "disturbed": disturbed,
                             "steps_ms": " ".join(f"{t:.3f}" for t in steps_ms)})
            atomic_write_text(self.folder / "measurements.csv",
                              pd.DataFrame(self.log).to_csv(index=False))
            print(f"{PROG}: P = {workers}, workload set {k}: steps "
                  f"{', '.join(f'{t:.2f}' for t in steps_ms)} ms "
                  f"({'one at a time' if self.args.alone else f'{workers} at a time'})"
                  + (f"; other processes used {others:.2f} cores meanwhile" + (
                      "; measuring again" if attempt < MEASURE_TRIES else
                      f"; kept after {MEASURE_TRIES} tries (disturbed)") if disturbed else ""),
                  file=sys.stderr)
            if not disturbed:
                break
        return files


def measure_set(args, files: list[Path]) -> float | None:
    """One set: ``calibrate.workload`` into each of ``files``, all at once under mpirun
    (the process of MPI rank i writes file i), or one after another with ``--alone``.
    Returns the cores other processes used meanwhile (the machine's busy CPU less the
    set's own, as ``real.records.load`` judges a run disturbed; None without /proc/stat)."""
    import resource
    import subprocess

    from real.launch.sweep import mpirun
    from real.records.load import busy_cpu_s
    def own_cpu_s() -> float:
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        return ru.ru_utime + ru.ru_stime
    busy0, own0, t0 = busy_cpu_s(), own_cpu_s(), time.monotonic()
    measure = [sys.executable, "-m", "calibrate.workload", "--model", "cnn", "--input-shape",
               "1,28,28", "--batch-size", str(args.batch_size), "--threads", "1",
               "--steps", str(WORKLOAD_STEPS)]
    if args.alone:
        cmds = [measure + ["--out", str(f)] for f in files]
    else:           # the rank picks its file: hydra sets PMI_RANK in each process
        pattern = str(files[0]).replace("-w0.toml", "-w${PMI_RANK}.toml")
        bind = ["-bind-to", "core"] if args.bind_to_core else []
        cmds = [[mpirun(), *bind, "-n", str(len(files)), "sh", "-c",
                 " ".join(measure) + f' --out "{pattern}"']]
    for cmd in cmds:
        try:
            done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True, timeout=args.timeout, check=False)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"calibrate.workload took over --timeout {args.timeout:g} s "
                               "(a larger --timeout, or fewer --workers)") from None
        if done.returncode:
            raise RuntimeError(f"calibrate.workload exited {done.returncode}: "
                               f"{done.stderr[-300:]}")
    busy1, own1, wall = busy_cpu_s(), own_cpu_s(), time.monotonic() - t0
    missing = [f.name for f in files if not f.exists()]
    if missing:
        raise RuntimeError(f"calibrate.workload wrote no {', '.join(missing)}")
    if busy0 is None or busy1 is None:
        return None
    return round(max(0.0, (busy1 - busy0) - (own1 - own0)) / max(wall, 1e-9), 3)


def rank_command(args, alg: str, workers: int, run_id: str, workload: Path | None) -> list[str]:
    """One rank's real.train command (a phantom's with ``workload``)."""
    cmd = [sys.executable, "-m", "real.train",
           "--schemes", alg, "--model", "cnn", "--dataset", "synthetic", "--train-size",
           str(args.train_size), "--test-size", "256", "--batch-size", str(args.batch_size),
           "--average-every", str(args.average_every), "--threads", "1",
           "--run-id", run_id, "--out", str(Path(args.out) / "runs")]
    if workload is not None:
        cmd += ["--compute", "phantom", "--workload", str(workload)]
    return cmd


def run_command(args, alg: str, workers: int, mode: str, run_id: str,
                workloads: list[Path]) -> list[str]:
    """The launch of one run. A phantom's ranks take ``workloads`` in turn (MPMD: one
    section of mpirun's command line per rank): worker i the i-th file, the parameter
    server's rank (whose model is not slept) the first."""
    from real.launch.sweep import mpirun
    bind = ["-bind-to", "core"] if args.bind_to_core else []
    ranks = schemes.ranks_for(alg, workers)
    if mode == "real":
        return [mpirun(), *bind, "-n", str(ranks), *rank_command(args, alg, workers, run_id, None)]
    first = schemes.first_worker_rank(alg)
    cmd = [mpirun(), *bind]
    for rank in range(ranks):
        worker = max(0, rank - first)
        cmd += (([":"] if rank else []) + ["-n", "1"] +
                rank_command(args, alg, workers, run_id, workloads[worker % len(workloads)]))
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


def run_all(args, workloads: WorkloadSets, start: float) -> dict:
    """(scheme, P, mode) -> [(time per iteration, disturbed, shared cores)], runs
    alternating the modes; phantom run r at P takes ``workloads.files(P, r)``; none
    started ``--time-limit`` seconds after ``start`` (``time.monotonic``) or later."""
    # the largest P first (what a machine of many cores is for, if --time-limit cuts), each
    # P's runs together, rounds over the schemes and modes within it
    points = [(rep, workers, alg, mode) for workers in sorted(args.workers, reverse=True)
              for rep in range(args.repeats) for alg in args.schemes for mode in MODES]
    times: dict = {}
    for i, (rep, workers, alg, mode) in enumerate(points):
        if args.time_limit is not None and time.monotonic() - start > args.time_limit:
            print(f"{PROG}: --time-limit {args.time_limit:g} s reached; {len(points) - i} "
                  f"run(s) not started", file=sys.stderr)
            break
        files = workloads.files(workers, rep) if mode == "phantom" else []
        one_run(args, files, times, f"{alg}-P{workers}-{mode}-r{rep}", (alg, workers, mode))
    return times


def one_run(args, workloads: list[Path], times: dict, run_id: str, key: tuple) -> None:
    """Run one point and add its (time per iteration, disturbed, shared cores) to
    ``times[key]``; shared cores: the record's CPU check found more ranks than cores on a
    machine (``real.records.testbed.cpu_check``)."""
    from real.launch.sweep import run_point
    out = Path(args.out)
    t0 = time.monotonic()
    code, cause = run_point(run_command(args, key[0], key[1], key[2], run_id, workloads),
                            out / "logs" / f"{run_id}.log", args.timeout, label=run_id)
    if code != 0:
        print(f"{run_id}: FAILED ({cause})", file=sys.stderr)
        return
    rec = record.read(out / "runs" / run_id)
    t = time_per_iteration(out / "runs" / run_id, args.warmup)
    shared = bool(((rec.get("testbed") or {}).get("checks", {}).get("cpu") or {})
                  .get("shared_cores"))
    times.setdefault(key, []).append((t, record.is_disturbed(rec), shared))
    print(f"{run_id}: {t * 1e3:.3f} ms per iteration"
          f"{' (disturbed)' if record.is_disturbed(rec) else ''}"
          f"{' (ranks share cores)' if shared else ''} in {time.monotonic() - t0:.0f} s",
          file=sys.stderr)


def verdicts(times: dict, schemes_: list[str], workers: list[int]) -> list[dict]:
    """One row per scheme and P: the modes' means and CIs, the difference and the verdict."""
    return [verdict(times, alg, p) for p in workers for alg in schemes_]


def verdict(times: dict, alg: str, workers: int) -> dict:
    """The phantom agrees when its mean lies within 5% of the real mean beyond the two
    modes' spreads (each the half-width of its runs' 95% CI as a share of its mean, added
    in quadrature: the phantom's holds its ranks' measured steps, drawn per run). Real
    runs whose ranks shared cores (more ranks than cores) are not judged: a phantom stands
    for ranks with a core each (its sleeps need none), so the row is testbed-bound."""
    from report.stats import mean_ci95
    runs = {m: [(r + (False,))[:3] for r in times.get((alg, workers, m), [])] for m in MODES}
    kept = {m: [t for t, bad, _ in runs[m] if not bad] for m in MODES}
    left = sum(bad for m in MODES for _, bad, _ in runs[m])
    shared = any(sh for _, _, sh in runs["real"])
    (real, real_ci), (ph, ph_ci) = (mean_ci95(kept[m]) for m in MODES)
    spread = math.hypot(real_ci / real, ph_ci / ph) if real and ph else float("nan")
    diff = (ph - real) / real if real else float("nan")
    judged = min(len(kept["real"]), len(kept["phantom"])) >= 2 and not shared
    ok = judged and abs(diff) <= AGREEMENT + spread
    return {"scheme": alg, "workers": workers, "real_ms": real * 1e3,
            "real_ci_ms": real_ci * 1e3, "phantom_ms": ph * 1e3, "phantom_ci_ms": ph_ci * 1e3,
            "runs": min(len(kept["real"]), len(kept["phantom"])), "disturbed_left_out": left,
            "difference": diff, "allowed": AGREEMENT + spread, "agrees": bool(ok),
            "judged": judged, "testbed_bound": shared}


def table(rows: list[dict]) -> str:
    lines = [(f"{'scheme':<15}{'P':>3}{'real ms/it':>18}{'phantom ms/it':>18}{'diff':>8}{'allowed':>9}"
              f"{'runs':>6}  verdict")]
    for r in rows:
        lines.append(f"{r['scheme']:<15}{r['workers']:>3}{r['real_ms']:>10.3f} ± {r['real_ci_ms']:<5.3f}"
                     f"{r['phantom_ms']:>10.3f} ± {r['phantom_ci_ms']:<5.3f}"
                     f"{r['difference']:>+8.1%}{r['allowed']:>9.1%}{r['runs']:>6}  "
                     + ("agrees" if r["agrees"] else "MISSES" if r["judged"] else
                        "testbed-bound: the real ranks shared cores" if r.get("testbed_bound")
                        else "not judged: fewer than 2 undisturbed runs of a mode")
                     + (f" ({r['disturbed_left_out']} disturbed left out)"
                        if r["disturbed_left_out"] else ""))
    return "\n".join(lines)


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


def run(args) -> int:
    problem = workload_problem(args.workload)
    if problem:
        return cli.usage_error(PROG, problem)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    workloads = WorkloadSets(args, out, Path(args.workload) if args.workload else None)
    try:
        print(f"{PROG}: {len(args.schemes)} scheme(s) x 2 modes x {args.repeats} runs at "
              f"P = {', '.join(map(str, args.workers))}, workload "
              f"{args.workload or out / 'workload'}", file=sys.stderr)
        times = run_all(args, workloads, start)
    except (FileNotFoundError, RuntimeError) as e:     # no mpirun; calibrate.workload failed
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    steps = workloads.steps()
    rows = verdicts(times, args.schemes, args.workers)
    import pandas as pd

    from contracts.files import atomic_write_text
    atomic_write_text(out / "phantom_check.csv", pd.DataFrame(rows).to_csv(index=False))
    cli.print_out(f"phantom against real, P = {', '.join(map(str, args.workers))} on one host"
                  f"{', a core a rank' if args.bind_to_core else ''}, "
                  f"{time.strftime('%Y-%m-%d')}; time per iteration, mean ± 95% CI over runs; "
                  + (f"workload {Path(args.workload).name}" if args.workload else
                     f"each phantom rank a measured process's workload (steps "
                     f"{min(steps) * 1e3:.1f}-{max(steps) * 1e3:.1f} ms, median "
                     f"{statistics.median(steps) * 1e3:.1f})" if steps else
                     "no phantom run started"), table(rows))
    return 1 if any(r["judged"] and not r["agrees"] for r in rows) else 0

if __name__ == "__main__":
    sys.exit(main())
