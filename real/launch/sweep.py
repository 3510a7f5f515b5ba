"""Run a scheme for several worker counts, collect the records, draw the speedup graph.

    python -m real.sweep --schemes psgd --workers 1-5 --dataset fashion-mnist --epochs 1 --out runs/

Each point (scheme, P, repeat) is one ``real.train`` run in its own process
group (rank-based schemes under mpirun), with a time limit. A failed point is
recorded with its cause and the sweep goes on. Results: ``OUT/results.csv``
(one row per run), ``OUT/summary.csv``, ``OUT/speedup.png``, ``OUT/accuracy.png``,
``OUT/accuracy-time.png`` (test accuracy against training time) and, with
``--target-accuracy A``, ``OUT/time_to_target.csv``. Flags after ``--`` go to
``real.train`` unchanged.

A point's record is reused only when it completed with the settings this sweep
would give it (its digest, ``contracts.record.RESULT_SETTINGS``); one that
failed is run again, and says so. A folder that holds runs of other settings is
refused before anything runs, in one line: ``--resume`` runs this sweep's points there
(those of other settings anew, replacing them; other runs stay and are left out of
the table, which says how many), ``--fresh`` runs every point anew. The table, the
CSVs and the plots hold only the runs of this sweep's settings.

Every record says whether other processes took CPU the run asked for
(``disturbed``, ``real.records.load``): the table marks such points, ``--retry-disturbed N``
runs them again (up to N times, each after waiting for a quiet machine; likewise
``--retry-testbed-bound N`` the runs whose machine did not stay faithful,
``real.records.testbed``), and an
efficiency above 1 always comes with a warning. Every point's ranks run the same
threads (``real.launch.sweep_launch.threads_for``), P = 1 included; the table states them.
Ranks can run beyond this machine: ``--hostfile FILE`` (``mpirun -f``),
``--launcher srun`` (in a Slurm allocation), ``--cluster`` (the emulated cluster
named by ``--prefix``); see ``real.launch.sweep_launch``. ``--compute phantom --workload
FILE [--time-scale S]`` makes every point a phantom run (``real.phantom``): real
messages, the compute a sleep of the workload's measured times; the table shows
such points as ``scheme (phantom)``, without accuracy.


Every flag, and every flag after ``--``, is checked before the first point
starts (``check_args``: ``real.train``'s own parser judges a point's command);
``--dry-run`` stops there and prints the points. A point that runs past
``--timeout`` is stopped (SIGTERM to its launcher, which passes it to every
rank's recorder, ``real.launch.supervise``; SIGKILL to whatever is left) and its
record says so; Ctrl-C stops the running point the same way, records it as
interrupted and ends the sweep with exit code 130.

Imports: tqdm, real (accuracy_report, cluster, load, plots, results, schemes, sweep_launch),
cli, contracts.record; each run is ``real.train`` in a subprocess.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from real import schemes
from real.records import failures, plots, results
from real.training.data import DATASETS
from real.launch.dist import isolated
from real.training.models import MODELS
from real.launch.sweep_launch import threads_flag
from contracts import record
import cli

PROG = "python -m real.sweep"


def build_parser() -> cli.Parser:
    p = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--schemes", "--algorithm", dest="algorithm", default=["psgd"],
                   type=cli.choice_list(schemes.SCHEMES), metavar="NAMES",
                   help=f"scheme(s), comma-separated, or all: {', '.join(schemes.SCHEMES)} "
                        "(--algorithm: its old name)")
    p.add_argument("--workers", default=[1, 2], type=cli.worker_counts_up_to(MAX_CLUSTER_RANKS),
                   metavar="P", help=f"{cli.WORKERS_HELP} (at most 4 per core here; with "
                                     "--cluster, its hosts; default: 1-2)")
    p.add_argument("--repeats", default=1, type=cli.int_in(1, 1000), help="runs per point")
    p.add_argument("--model", default="cnn", choices=MODELS, metavar="NAME",
                   help=f"model: {', '.join(MODELS)}")
    p.add_argument("--dataset", default="fashion-mnist", choices=DATASETS, metavar="NAME",
                   help=f"dataset: {', '.join(DATASETS)}")
    p.add_argument("--epochs", default=1, type=cli.positive_int, help="passes over the data")
    p.add_argument("--batch-size", default=64, type=cli.positive_int, help="per worker")
    p.add_argument("--train-size", default=None, type=cli.positive_int,
                   help="training samples (all by default)")
    p.add_argument("--test-size", default=None, type=cli.positive_int,
                   help="test samples (all by default)")
    p.add_argument("--out", default="sweep", type=cli.output_folder,
                   help="folder for records, results.csv and plots")
    p.add_argument("--timeout", default=3600.0, type=cli.float_in(1, 1e7),
                   help="seconds one run may take before it is stopped and recorded as failed")
    again = p.add_mutually_exclusive_group()
    again.add_argument("--fresh", action="store_true",
                       help="run every point anew, even one that completed with these settings")
    again.add_argument("--resume", action="store_true",
                       help="in a folder that holds runs of other settings: reuse the points "
                            "that completed with these settings, run the others anew")
    again.add_argument("--force", action="store_true", dest="fresh", help=argparse.SUPPRESS)
    p.add_argument("--cluster", action="store_true",
                   help="run rank-based schemes across the emulated cluster that "
                        "`python -m real.cluster up` made (one rank per host, round robin)")
    p.add_argument("--ranks-per-host", default=1, type=cli.positive_int,
                   help="with --cluster: ranks placed on each host before the next")
    p.add_argument("--prefix", default="psgd",
                   help="with --cluster: the cluster's prefix (real.cluster up --prefix)")
    p.add_argument("--hostfile", default=None,
                   help="run rank-based schemes with mpirun -f FILE (MPICH host[:slots] lines)")
    p.add_argument("--launcher", default="mpirun", choices=("mpirun", "srun"),
                   help="what starts the ranks of rank-based schemes (srun: in a Slurm allocation)")
    p.add_argument("--threads", default="same", type=threads_flag, metavar="T",
                   help="torch threads per rank: a number for every point; same: every point "
                        "cores // the most ranks a point puts on this host (P = 1 included); "
                        "per-point: cores // its own ranks (speedups then mix threads with "
                        "ranks)")
    p.add_argument("--retry-disturbed", default=0, type=cli.nonnegative_int, metavar="N",
                   help="run a point again, up to N times, while other processes disturb it")
    p.add_argument("--retry-testbed-bound", default=0, type=cli.nonnegative_int, metavar="N",
                   help="run a point again, up to N times, while its record says the machine "
                        "was not faithful (testbed-bound, real.records.testbed)")
    p.add_argument("--quiet-wait", default=120.0, type=cli.positive_float,
                   help="seconds to wait for a quiet machine before a retry")
    p.add_argument("--dry-run", action="store_true",
                   help="check every flag, print the points and their commands, run nothing")
    add_accuracy_arguments(p)
    from real.launch.train import add_compute_arguments
    add_compute_arguments(p)
    return p


def add_accuracy_arguments(p) -> None:
    g = p.add_argument_group("accuracy over time")
    g.add_argument("--eval-every", default=0, type=cli.nonnegative_int, metavar="N",
                   help="test accuracy every N iterations at P = 1 (every N/P at P workers: the "
                        "same samples between points), besides every epoch end")
    g.add_argument("--target-accuracy", default=None, type=cli.accuracy, metavar="A",
                   help="each run trains until its test accuracy reaches A (checked at its epoch "
                        "ends) and records when it first did (OUT/time_to_target.csv; 'not "
                        "reached in E epochs' otherwise)")
    g.add_argument("--max-epochs", default=None, type=cli.positive_int, metavar="E",
                   help="with --target-accuracy: the most epochs a run trains (default: --epochs)")


def accuracy_flags(args, p: int) -> list[str]:
    """real.train's flags for the accuracy curve of a point with ``p`` workers."""
    every = 0 if args.eval_every == 0 else max(1, round(args.eval_every / p))
    flags = ["--eval-every", str(every)]
    if args.target_accuracy is not None:
        flags += ["--target-accuracy", repr(args.target_accuracy)]
    return flags

MAX_RANKS = 4 * (os.cpu_count() or 1)       # ranks of one point on this machine (4 per core)
MAX_CLUSTER_RANKS = 1024                    # the parser's bound; check_args knows the cluster
SWEEP_SETS = ("--schemes", "--algorithm", "--run-id", "--out", "--repeat", "--progress-file", "--workers",
              "--model", "--dataset", "--epochs", "--batch-size", "--train-size", "--test-size",
              "--compute", "--workload", "--time-scale")
POINT_TAG_ENV = "PSGD_SWEEP_POINT"          # marks every process of the running point
STOP_WAIT_S = 15.0                          # a stopped point's launcher and recorders end by then


def check_args(args, extra: list[str], cluster) -> str | None:
    """Why this sweep cannot run, or None: flags after ``--`` that the sweep sets itself,
    a point ``real.train`` would refuse (its own parser judges each scheme's command),
    more ranks than the machine or the emulated cluster holds."""
    from real.launch import train
    given = sorted({a.split("=")[0] for a in extra if a.split("=")[0] in SWEEP_SETS})
    if given:
        return (f"{', '.join(given)} after -- is set by the sweep for every point; give it to "
                f"{PROG} itself (see --help)")
    remote = args.hostfile or args.launcher == "srun"     # (their own checks: sweep_launch)
    limit = (cluster.n_hosts * args.ranks_per_host if cluster else
             MAX_CLUSTER_RANKS if remote else MAX_RANKS)
    for alg in args.algorithm:
        scheme = schemes.SCHEMES[alg]
        ranks = scheme.ranks(max(args.workers))
        if scheme.own_processes and ranks > MAX_RANKS:
            return (f"--workers: {alg} at P = {max(args.workers)} starts {ranks} processes on this machine, "
                    f"more than {MAX_RANKS} (4 per core)")
        if scheme.rank_based and ranks > limit:
            where = (f"the {cluster.n_hosts} hosts of the cluster at {args.ranks_per_host} per host"
                     if cluster else f"this machine ({MAX_RANKS}: 4 per core)")
            return (f"--workers: {alg} at P = {max(args.workers)} needs {ranks} ranks, more than "
                    f"{where}")
    for alg in args.algorithm:
        p = max(args.workers)
        argv, _ = train_command(alg, p, f"{alg}-P{p}-r0", args, extra)
        said = io.StringIO()
        try:
            with contextlib.redirect_stderr(said):
                targs = train.parse_args(argv[argv.index("real.train") + 1:])
        except SystemExit:
            return (said.getvalue().strip().split(": error: ", 1)[-1].replace(
                "(see python -m real.train --help)", "(a flag after -- is for real.train)"))
        scheme = schemes.SCHEMES[alg]
        ranks = (min(scheme.ranks(p), args.ranks_per_host if cluster else p + 1)
                 if scheme.rank_based else 1)
        problem = train.data_size_problem(targs, ranks) if targs.compute == "real" else None
        if problem:
            return problem
    return None


def points(args) -> list[tuple[str, int, int]]:
    """(algorithm, workers, repeat) to run; serial only exists at P = 1.

    Repeat by repeat: every point once, then every point again. The machine's
    speed drifts by several percent over minutes (other tenants, clocks); with a
    point's repeats run back to back, that drift would move one scheme's points
    together and hide in a narrow CI. Spread over the sweep, it shows in the CI.
    """
    return [(a, p, r) for r in range(args.repeats) for a in args.algorithm for p in args.workers
            if not schemes.SCHEMES[a].single_process or p == 1]


def compute_flags(args) -> list[str]:
    """real.train's model and compute flags: a phantom point's model is its workload's, so
    ``--model`` goes with it only when given (real.train refuses one that differs)."""
    if getattr(args, "compute", "real") == "real":
        return ["--model", args.model]
    return ((["--model", args.model] if getattr(args, "model_given", False) else [])
            + ["--compute", "phantom", "--workload", str(Path(args.workload).resolve()),
               "--time-scale", repr(args.time_scale)])


def train_command(alg: str, p: int, run_id: str, args, extra: list[str],
                  cluster=None) -> tuple[list[str], dict]:
    """The command of one point and the environment it adds."""
    py = [sys.executable, "-m", "real.train", "--schemes", alg, "--run-id", run_id,
          "--out", str(args.out), "--dataset", args.dataset,
          "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
          "--repeat", run_id.rsplit("-r", 1)[1]] + compute_flags(args)
    for flag in ("train_size", "test_size"):
        if getattr(args, flag):
            py += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    py += extra
    scheme = schemes.SCHEMES[alg]
    ranks = scheme.ranks(p)
    if not scheme.rank_based:
        return py + (["--workers", str(p)] if scheme.own_processes else []), {}
    hostfile = ["-f", str(Path(args.hostfile).resolve())] if args.hostfile else []
    if getattr(args, "launcher", "mpirun") == "srun":
        from real.launch.sweep_launch import srun_command
        return srun_command(alg, ranks, py), {}
    if cluster is None:               # local: in a network of its own (only loopback)
        launch = [mpirun(), *hostfile, "-n", str(ranks)] + py
        return (launch if "--download" in extra or hostfile else isolated(launch)), {}
    from real import cluster as emu
    env = emu.rank_env(cluster, cluster_facts(args, alg, cluster))
    return emu.mpirun_command(cluster, ranks, py, args.ranks_per_host,
                              hostfile=hostfile[1] if hostfile else None), env


def cluster_facts(args, alg: str, cluster) -> dict | None:
    """What a point's record says of the emulated cluster it ran on: the cluster's state and
    how the sweep placed the ranks (None: the point runs on this host, not in the cluster)."""
    if cluster is None or not schemes.SCHEMES[alg].rank_based or args.launcher == "srun":
        return None
    return cluster.to_json() | {"ranks_per_host": args.ranks_per_host,
                                "hostfile": str(Path(args.hostfile).resolve())
                                if args.hostfile else None}


def mpirun() -> str:
    """The mpirun of this environment (the mpich wheel puts it next to python)."""
    here = Path(sys.executable).parent / "mpirun"
    found = str(here) if here.exists() else shutil.which("mpirun")
    if not found:
        raise FileNotFoundError("mpirun not found: pip install mpich (or load your MPI module)")
    return found


class Interrupted(Exception):
    """Ctrl-C while a point ran: the point is stopped and recorded; the sweep ends."""


def run_point(cmd: list[str], log_path: Path, timeout_s: float, env: dict | None = None,
              progress_file: Path | None = None, label: str = "") -> tuple[int, str]:
    """Run one point in its own session; returns (exit code, cause if it failed).
    While it runs, a bar shows its iterations (from the ``--progress-file`` rank 0 keeps).
    Past ``timeout_s`` the point is stopped; Ctrl-C stops it and raises ``Interrupted``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    bar = _PointBar(progress_file, label)
    tag = f"{os.getpid()}-{label}-{time.monotonic_ns()}"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env=os.environ | (env or {}) | {POINT_TAG_ENV: tag})
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                try:
                    code = proc.wait(timeout=min(0.5, max(0.0, deadline - time.monotonic())))
                    break
                except subprocess.TimeoutExpired:
                    if time.monotonic() >= deadline:
                        stop_point(proc, signal.SIGTERM, tag)
                        return -9, f"timed out after {timeout_s:.0f} s (real.sweep --timeout)"
                    bar.poll()
        except KeyboardInterrupt:
            old = signal.signal(signal.SIGINT, signal.SIG_IGN)     # a second Ctrl-C waits too
            try:
                stop_point(proc, signal.SIGINT, tag)
            finally:
                signal.signal(signal.SIGINT, old)
            raise Interrupted(label) from None
        finally:
            bar.close()
    if code == 0:
        return 0, ""
    tail = [ln.strip() for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()]
    return code, f"exit code {code}: {tail[-1] if tail else 'no output'}"


def stop_point(proc: subprocess.Popen, sig: int, tag: str) -> None:
    """Stop a running point: ``sig`` to its launcher (mpirun passes it to every rank; a
    rank's recorder stops the rank and notes why), then SIGKILL to its process group and
    to every process that carries the point's tag (ranks in sessions of their own)."""
    try:
        os.kill(proc.pid, sig)
        proc.wait(timeout=STOP_WAIT_S)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    for pid in [proc.pid] + _tagged(tag):
        try:
            os.killpg(pid, signal.SIGKILL) if pid == proc.pid else os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait()


def _tagged(tag: str) -> list[int]:
    """The processes started for one point (they inherit its tag), as far as /proc shows."""
    mark = f"{POINT_TAG_ENV}={tag}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if mark in f.read().split(b"\0"):
                        pids.append(int(entry))
            except OSError:
                continue
    return pids


class _PointBar:
    """A second progress bar, under the sweep's, for the iterations of the running point."""

    def __init__(self, path: Path | None, label: str):
        from tqdm import tqdm
        self.path = path
        self.bar = tqdm(total=None, desc=label, unit="it", disable=None if path else True,
                        leave=False, position=1)

    def poll(self) -> None:
        try:
            done, total = map(int, self.path.read_text().split())
        except (OSError, ValueError, AttributeError):
            return
        if self.bar.total != total:
            self.bar.reset(total=total)
        self.bar.n = done
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()
        if self.path:
            self.path.unlink(missing_ok=True)


def is_completed(run_dir: Path) -> bool:
    """A completed record whose two files read whole (a damaged one is run again)."""
    try:
        if record.read(run_dir)["status"] != "completed":
            return False
        record.read_iterations(run_dir)
        return True
    except record.RecordError:
        return False


def record_failure(run_dir: Path, alg: str, p: int, rep: int, cause: str, cmd,
                   status: str = "failed", stopped: bool = False,
                   settings: dict | None = None) -> None:
    """Keep the cause of a point that did not finish: once rank 0's recorder is done, its
    record (naming the rank and how it ended) stays, with what the sweep knows in front
    when the sweep stopped the point; a point that left no record gets one here."""
    failures.wait_for_recorder(run_dir.parent, run_dir.name, STOP_WAIT_S)
    try:
        rec = record.read(run_dir)
    except record.RecordError:
        rec = None
    if rec is not None and rec["status"] != "completed":
        if stopped:
            failures.amend_cause(run_dir, cause, status)
        return
    rec = record.RunRecord(run_id=run_dir.name, status=status,
                           failure={"cause": cause, "rank": None},
                           config={"algorithm": alg, "repeat": rep, "command": cmd},
                           environment={"workers": p, "ranks": p},
                           identity=record.identity(settings) if settings else None)
    record.write(rec, run_dir.parent)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    return cli.command(PROG, build_parser().parse_args, lambda args: run(args, argv, extra), argv)


def run(args, argv: list[str], extra: list[str]) -> int:
    """The sweep of ``args``; ``argv``, the flags as given, ``extra``, real.train's after --."""
    try:
        mpirun()
    except FileNotFoundError as e:
        return cli.usage_error(PROG, str(e))
    args.model_given = any(a == "--model" or a.startswith("--model=") for a in argv)
    if args.max_epochs is not None:
        if args.target_accuracy is None:
            return cli.usage_error(PROG, "--max-epochs goes with --target-accuracy; "
                                         "without a target, give --epochs")
        args.epochs = args.max_epochs
    cluster = None
    if args.cluster:
        from real.cluster import read_state
        try:
            cluster = read_state(args.prefix)
        except ValueError as e:
            return cli.usage_error(PROG, f"--cluster: {e}")
        if cluster is None:
            return cli.usage_error(PROG, f"--cluster: no emulated cluster '{args.prefix}' is up; "
                                         "start one with `python -m real.cluster up --hosts N "
                                         "--bandwidth 100mbit`")
    todo = points(args)
    problem = _launch_problem(args, todo, cluster) or check_args(args, extra, cluster)
    if problem is not None:
        return cli.usage_error(PROG, problem) if problem else 2
    if args.dry_run:
        return dry_run(args, extra, cluster)
    from real.launch.sweep_launch import thread_note
    plan = {pt: planned_settings(args, *pt, extra, cluster, todo) for pt in todo}
    problem = reuse_problem(args, plan)
    if problem:
        return cli.usage_error(PROG, problem)
    note = thread_note(args, todo)
    if note:
        print(f"{PROG}: note: {note}", file=sys.stderr)
    try:
        run_points(args, extra, cluster, todo, plan)
    except Interrupted as e:
        print(f"{PROG}: interrupted during {e}; recorded as interrupted in "
              f"{Path(args.out) / str(e)}", file=sys.stderr)
        return 130
    return report(Path(args.out), args, plan)


def run_id_of(alg: str, p: int, rep: int) -> str:
    return f"{alg}-P{p}-r{rep}"


def point_flags(args, alg: str, p: int, extra: list[str], todo) -> list[str]:
    """real.train's flags of one point beyond its fixed ones: the accuracy curve, the
    flags after --, and the point's threads (unless given after --: then those, everywhere)."""
    from real.launch.sweep_launch import threads_for
    given = any(a == "--threads" or a.startswith("--threads=") for a in extra)
    threads = None if given else threads_for(args, alg, p, todo)
    return accuracy_flags(args, p) + extra + (["--threads", str(threads)] if threads else [])


def planned_settings(args, alg: str, p: int, rep: int, extra: list[str], cluster,
                     todo) -> dict:
    """The result settings the record of this point will carry (``real.records.identity``):
    ``real.train``'s own parser reads the point's command, as the run will."""
    from real.launch import train
    from real.records.identity import run_settings
    cmd, _ = train_command(alg, p, run_id_of(alg, p, rep), args,
                           point_flags(args, alg, p, extra, todo))
    targs = train.parse_args(cmd[cmd.index("real.train") + 1:])
    return run_settings(targs, p, cluster_facts(args, alg, cluster))


def point_state(run_dir: Path, settings: dict) -> tuple[str, str]:
    """What the folder of a point holds: ("new" | "same" | "other" | "unfinished", why)."""
    from real.records.identity import record_settings
    if not run_dir.exists():
        return "new", ""
    try:
        rec = record.read(run_dir)
        if rec["status"] != "completed":
            return "unfinished", f"its record is {rec['status']}"
        record.read_iterations(run_dir)
    except record.RecordError as e:
        return "unfinished", f"its record cannot be read: {e}"
    old = record_settings(rec)
    if record.config_digest(old) == record.config_digest(settings):
        return "same", ""
    return "other", record.settings_difference(old, settings)


def strays(out: Path, plan: dict) -> list[tuple[Path, str]]:
    """Records in ``out`` that are no point of this sweep and were run with other settings
    than its table's (``record.PER_POINT_SETTINGS`` aside): (folder, how they differ)."""
    from real.records.identity import record_settings
    ids = {run_id_of(*pt) for pt in plan}
    tables = {record.config_digest(st, record.PER_POINT_SETTINGS): st for st in plan.values()}
    found = []
    for d in record.find_runs(out):
        if d.name in ids:
            continue
        try:
            rec = record.read(d)
        except record.RecordError:
            continue
        old = record_settings(rec)
        if rec["status"] != "completed":
            continue
        if record.config_digest(old, record.PER_POINT_SETTINGS) not in tables:
            found.append((d, record.settings_difference(old, next(iter(tables.values())),
                                                        record.PER_POINT_SETTINGS)))
    return found


def reuse_problem(args, plan: dict) -> str | None:
    """Why this sweep will not run in its folder: it holds completed runs of other settings
    (of this sweep's points, or others its table would mix in), and neither --resume nor
    --fresh says what to do with them."""
    if args.resume or args.fresh:
        return None
    out = Path(args.out)
    other = [(out / run_id_of(*pt), why) for pt, st in plan.items()
             for state, why in [point_state(out / run_id_of(*pt), st)] if state == "other"]
    other += strays(out, plan)
    if not other:
        return None
    where, why = other[0]
    return (f"{out} holds {len(other)} run(s) of other settings ({where.name}: {why}); "
            "--resume runs this sweep there (its points of other settings anew; the others "
            "left out of the table), --fresh runs every point anew, or give another --out")


def dry_run(args, extra: list[str], cluster) -> int:
    todo = points(args)
    for alg, p, rep in todo:
        cmd, _ = train_command(alg, p, run_id_of(alg, p, rep), args,
                               point_flags(args, alg, p, extra, todo), cluster)
        print(" ".join(cmd))
    return 0


def run_points(args, extra: list[str], cluster, todo, plan: dict) -> None:
    from tqdm import tqdm
    out, reused = Path(args.out), 0
    for alg, p, rep in tqdm(todo, desc="sweep", unit="run", disable=None):
        run_id = run_id_of(alg, p, rep)
        state, why = point_state(out / run_id, plan[(alg, p, rep)])
        if state == "same" and not args.fresh and not retries(args, retry_mark(out / run_id)):
            reused += 1
            continue
        if state in ("other", "unfinished") and not args.fresh:
            print(f"{run_id}: run anew ({'settings differ: ' if state == 'other' else ''}"
                  f"{why})", file=sys.stderr)
        point_extra = point_flags(args, alg, p, extra, todo)
        for attempt in range(max(args.retry_disturbed, args.retry_testbed_bound) + 1):
            if attempt:
                _wait_for_quiet(args.quiet_wait)
            mark = run_one(args, alg, p, rep, point_extra, cluster, plan[(alg, p, rep)])
            if attempt >= retries(args, mark):
                break
            print(f"{run_id}: retry {attempt + 1} of {retries(args, mark)} (--retry-{mark})",
                  file=sys.stderr)
    if reused:
        print(f"{PROG}: reused {reused} run(s) that completed with these settings "
              "(--fresh runs them anew)", file=sys.stderr)


def run_one(args, alg: str, p: int, rep: int, point_extra: list[str], cluster,
            settings: dict | None = None) -> str | None:
    """Run one point once and record how it ended; the mark that may run it again if it
    ran but was disturbed or testbed-bound (``retry_mark``), else None."""
    out, run_id = Path(args.out), run_id_of(alg, p, rep)
    progress = (out / "logs" / f".{run_id}.progress").resolve()
    cmd, env = train_command(alg, p, run_id, args,
                             point_extra + ["--progress-file", str(progress)], cluster)
    t0 = time.monotonic()
    try:
        code, cause = run_point(cmd, out / "logs" / f"{run_id}.log", args.timeout, env,
                                progress, run_id)
    except Interrupted:
        record_failure(out / run_id, alg, p, rep, "interrupted by the user (Ctrl-C in "
                       "real.sweep)", cmd, status="interrupted", stopped=True, settings=settings)
        raise
    mark = retry_mark(out / run_id) if code == 0 else None
    status = "ok" if code == 0 else f"FAILED ({cause})"
    print(f"{run_id}: {status}{f' but {mark.upper()}' if mark else ''} in "
          f"{time.monotonic() - t0:.1f} s", file=sys.stderr)
    if code != 0:
        record_failure(out / run_id, alg, p, rep, cause, cmd, stopped=code == -9,
                       settings=settings)
    return mark


def _launch_problem(args, todo, cluster) -> str | None:
    """What stops the sweep before it starts: a bad hostfile, a too small Slurm allocation."""
    from real.launch.sweep_launch import allocation_problem, read_hostfile, srun
    if args.launcher == "srun" and (args.cluster or args.hostfile):
        return "--launcher srun places ranks itself: leave out --cluster and --hostfile"
    try:
        if args.hostfile:
            read_hostfile(args.hostfile, cluster)
        if args.launcher == "srun":
            srun()
    except (ValueError, FileNotFoundError) as e:
        return str(e)
    return None if args.cluster else allocation_problem(todo)


def retry_mark(run_dir: Path) -> str | None:
    """Why a completed run may be run again: ``disturbed`` (other processes took CPU it
    asked for), ``testbed-bound`` (the machine, not what it stands for, set its pace;
    ``real.records.testbed``), or None."""
    try:
        rec = record.read(run_dir)
    except record.RecordError:
        return None
    if record.is_disturbed(rec):
        return "disturbed"
    return "testbed-bound" if record.is_testbed_bound(rec) else None


def retries(args, mark: str | None) -> int:
    """How many times a point with ``mark`` may run again (--retry-disturbed,
    --retry-testbed-bound)."""
    return {"disturbed": args.retry_disturbed,
            "testbed-bound": args.retry_testbed_bound}.get(mark, 0)


def _wait_for_quiet(limit_s: float) -> None:
    from real.records.load import wait_for_quiet
    waited = wait_for_quiet(limit_s)
    print(f"{PROG}: {'quiet' if waited['quiet'] else 'still busy'} after {waited['waited_s']:.0f} s "
          f"(other processes: {waited['busy_cores']} cores)", file=sys.stderr)


def report(out: Path, args=None, plan: dict | None = None) -> int:
    df = results.collect(out, warn=lambda d, why: print(f"{PROG}: skipped {d}: {why}",
                                                        file=sys.stderr))
    if plan is not None:
        df, note = of_this_sweep(df, plan)
        if note:
            print(f"{PROG}: {note}", file=sys.stderr)
    if df.empty:
        print(f"{PROG}: no run records in {out}", file=sys.stderr)
        return 1
    _write_csv(df, out / "results.csv")
    summary = results.summarize(df)
    failed = df[df["status"] != "completed"]
    for _, r in failed.iterrows():
        print(f"failed: {r.run_id}: {r.failure}", file=sys.stderr)
    for _, r in df[df["disturbed"].eq(True)].iterrows():      # NaN for failed runs
        print(f"disturbed: {r.run_id}: {r.load_note}", file=sys.stderr)
    if summary.empty:
        return 1
    _write_csv(summary, out / "summary.csv")
    plots.speedup_plot(summary, out / "speedup.png")
    plots.accuracy_plot(summary, out / "accuracy.png")
    cli.print_out(results.format_table(summary))
    from real.records.accuracy_report import report as accuracy_report
    text = accuracy_report(out, getattr(args, "target_accuracy", None), set(df["run_id"]))
    if text:
        cli.print_out(text)
    print(f"\nwrote {out / 'results.csv'}, {out / 'summary.csv'}, {out / 'speedup.png'}, "
          f"{out / 'accuracy.png'}")
    return 0 if failed.empty else 1


def of_this_sweep(df, plan: dict):
    """The rows of this sweep's points and of runs with its table's settings, and a line
    that says how many others the folder holds ("" when none)."""
    ids = {run_id_of(*pt) for pt in plan}
    tables = {record.config_digest(st, record.PER_POINT_SETTINGS) for st in plan.values()}
    keep = df["run_id"].isin(ids) | df["table_digest"].isin(tables)
    left = df[~keep]
    if left.empty:
        return df, ""
    return (df[keep].reset_index(drop=True),
            f"left out {len(left)} run(s) of other settings in the folder "
            f"({', '.join(left['run_id'].head(3))}{', ...' if len(left) > 3 else ''}): the "
            "table holds this sweep's settings only")


def _write_csv(df, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    df.to_csv(tmp, index=False)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
