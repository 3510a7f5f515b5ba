"""``python -m simulator.predict --workers 16``: predicted time per epoch and speedup, P = 1..N.

With no options: P workers on hosts like the profile's (``simulator/data/default_profile.json``
unless ``--profile``): as many ranks per host as it has cores, hosts growing with P, on the
profile's measured network or, where it has none, an assumed one the output names
(``describe.resolve_cluster``). ``--hosts 1`` is the one host it was measured on. It prints
a header in plain words (model, epoch, machine, hosts, network, the speedup's baseline, and
each flag that won over a file), the time per epoch per scheme at a few P in human units
(``--full``: every row) and writes ``speedup.png``, ``predictions.csv`` and ``.json`` (seconds
in named columns) to ``--out``. On accelerator hosts (``--preset``, a cluster file with
[device]) it names the mechanisms the engines applied (``engine.mechanisms``: compute beside
NCCL, the step in its precision, DDP's exposed last bucket and own calls, the input pipeline,
the optimizer's step that the step holds, once every ``--accumulation-steps`` iterations,
and with ``--no-sync`` DDP's gradients crossing once in as many: ``engine.no_sync``);
``--full`` and the json give each one's cost at each P and its source. Bad input: one line on stderr, exit code 2.

``--target-accuracy`` (the training time to a test accuracy) trains the real model along
each predicted schedule: that is a pipeline's work, ``python -m pipelines.predict``, which
this command hands the whole command line to (the old path, kept for a release), so that
the simulator never starts ``real`` itself.

Imports: tqdm, cli, contracts, simulator (describe, question), simulator.engine (run,
sweep), simulator.model (config, schemes), simulator.output (predictions, plots).
"""
from __future__ import annotations

import os
import sys
import time
from functools import partial

from simulator import describe, question
import cli
from contracts import profile as profile_mod
from contracts.cluster import MAX_CORES_PER_HOST, MAX_HOSTS, PLACEMENTS
from contracts.files import atomic_write_text
from simulator.engine.run import simulate
from simulator.engine.sweep import sweep
from simulator.model.config import ALGORITHMS, ENGINES, FIDELITIES
from simulator.model.schemes import SCHEMES
from simulator.model.schemes.holder import DEFAULT_K as ASYNC_AVG_DEFAULT_K
from simulator.output.predictions import metadata, written
from simulator.describe import DATASETS, DEFAULT_BATCH, DEFAULT_DATASET

PROG = "python -m simulator.predict"
EPILOG = """columns of --full and predictions.csv:
  epoch_s    predicted wall time of one epoch (s); time_s: of the whole run (--epochs)
  speedup    against the baseline, the fastest scheme at P0 = --baseline (1: the fastest
             single worker): its epoch_s / epoch_s; efficiency = speedup * P0 / P
  compute_s, comm_s, wait_s   per worker over the run: own work, time in communication,
             time blocked until the slowest rank (or the server) is there; horovod's
             wait_s is a step's time after its backward with no allreduce of its own in
             flight: the background loop's cycle (--cycle-ms), waiting for the next tick
  stale      mean staleness: updates applied between a worker's read of the weights and
             the update of its own gradient (asynchronous schemes)
  eng        which engine made the row: fast (vectorised closed form) or des (SimPy events)
Schemes: serial, psgd, async_avg and hogwild train alone and average or share weights;
gather_scatter, allreduce, ddp and mpi_allreduce synchronise gradients every step;
ps_sync and ps_async use a parameter server (one more rank)."""


def build_parser(prog: str = PROG) -> cli.Parser:
    """The prediction's flags; ``prog`` names the command that reads them (this one, or
    ``pipelines.predict``, which reads the same)."""
    p = cli.Parser(prog=prog, description=__doc__.split("\n\n")[0].replace(PROG, prog),
                   epilog=EPILOG)
    p.add_argument("--workers", type=cli.worker_counts, default=cli.worker_counts("16"),
                   metavar="P", help=f"{cli.WORKERS_HELP} (default: 16)")
    p.add_argument("--schemes", "--algorithm", dest="schemes", nargs="+", default=["all"],
                   metavar="NAME",
                   help=f"schemes, comma or space separated, or all: {', '.join(SCHEMES)} "
                        "(--algorithm: real.train's old name; default: all)")
    p.add_argument("--profile", type=cli.input_file,
                   help="profile JSON of python -m calibrate "
                        "(default: the one shipped, simulator/data/default_profile.json)")
    p.add_argument("--model", default=None,
                   help="model of the profile (default: cnn; --workload names its own)")
    p.add_argument("--batch-size", type=cli.positive_int, default=None,
                   help=f"samples per step PER WORKER (default: the --workload file's, else "
                        f"{DEFAULT_BATCH})")
    p.add_argument("--baseline", type=cli.one_worker_count(), default=1, metavar="P0",
                   help="speedup and efficiency against the fastest scheme at P0 workers "
                        "(1: the fastest single worker)")
    d = p.add_mutually_exclusive_group()
    d.add_argument("--dataset", choices=sorted(DATASETS), default=None,
                   help=f"sets the training set's size (default: {DEFAULT_DATASET})")
    d.add_argument("--dataset-size", type=cli.positive_int, help="samples in the training set")
    t = p.add_mutually_exclusive_group()
    t.add_argument("--epochs", type=cli.positive_float, default=1.0, help="epochs to simulate")
    t.add_argument("--iterations", type=cli.positive_int,
                   help="iterations per worker (instead of epochs)")
    p.add_argument("--accumulation-steps", type=cli.positive_int, default=1, metavar="K",
                   help="on accelerator hosts: the optimizer steps once every K iterations "
                        "(gradient accumulation as PyTorch runs it: K backward passes, then "
                        "optimizer.step() and zero_grad()); the workload's step holds one "
                        "update (its measured.update, else the model's per-tensor SGD), paid "
                        "once in K; the gradients still cross every iteration unless "
                        "--no-sync; CPU hosts: 1 only")
    p.add_argument("--no-sync", action="store_true",
                   help="with --accumulation-steps K: DDP runs K - 1 of every K iterations "
                        "inside no_sync(), so its gradients cross once in K, over the last "
                        "backward (its buffers are still broadcast every forward); other "
                        "schemes exchange every iteration")
    p.add_argument("--threads", type=cli.positive_int, default=None,
                   help="threads per worker process (default: cores // ranks per host, as "
                        "real.train picks)")
    add_cluster_args(p.add_argument_group(
        "cluster (default: the machine the profile was measured on)"))
    s = p.add_argument_group("schemes")
    add_average_every(s)
    s.add_argument("--exchange-every", type=cli.nonnegative_int, default=None, metavar="K",
                   help="async_avg alone: exchange every K steps (default: --average-every)")
    s.add_argument("--allreduce-algorithm", choices=ALGORITHMS, default="auto",
                   help="the allreduce algorithm of mpi_allreduce (real.train's --mpi-allreduce) "
                        "and of the NCCL collectives (auto: as the library picks; "
                        "hierarchical: Horovod 0.15+'s HOROVOD_HIERARCHICAL_ALLREDUCE, "
                        "reduce_broadcast: Horovod 0.13.6-0.14's, or Caffe2's with gloo)")
    s.add_argument("--bucket-mb", type=cli.float_in(1e-6, 2**20), default=25.0, help="ddp bucket size (MiB)")
    s.add_argument("--fidelity", choices=FIDELITIES, default="auto",
                   help="communication: analytic (each collective's closed form on the "
                        "placement), message (every message over the simulated links), or auto "
                        "(analytic where it is the message model, else message)")
    s.add_argument("--engine", choices=ENGINES, default="auto",
                   help="des: SimPy events; fast: vectorised closed form (synchronous schemes); "
                        "auto: fast where it is exact")
    g = p.add_argument_group("heterogeneity")
    g.add_argument("--heterogeneity", type=cli.float_in(0, 10), default=0.0,
                   help="coefficient of variation of the workers' speeds")
    g.add_argument("--stragglers", type=cli.nonnegative_int, default=0,
                   help="slow ranks (the last ones)")
    g.add_argument("--straggler-slowdown", type=cli.float_in(1, 1e6), default=2.0,
                   help="how many times slower a straggler steps")
    o = p.add_argument_group("output")
    o.add_argument("--seed", type=cli.seed, default=0, help="seed of the step-time draws")
    o.add_argument("--jobs", type=cli.positive_int, default=os.cpu_count() or 1,
                   help="processes that simulate in parallel, at most this machine's cores (the "
                        "rows do not depend on it; default: this machine's cores)")
    o.add_argument("--format", choices=("table", "csv", "json"), default="table",
                   help="what to print: the summary table, or every row as CSV or JSON")
    o.add_argument("--full", action="store_true",
                   help="print every scheme and P with compute, communication, waiting, staleness")
    o.add_argument("--out", default="predictions", type=cli.output_folder,
                   help="folder for predictions.csv, predictions.json and speedup.png")
    o.add_argument("--no-plot", action="store_true", help="do not write speedup.png")
    o.add_argument("--trace", type=cli.output_file(),
                   help="write a Chrome trace (JSON) of the first scheme at the largest P")
    describe.add_arguments(p)
    add_target_arguments(p)
    return p


def add_cluster_args(c) -> None:
    """The cluster flags (a file, or hosts, cores, link and placement), for ``predict`` and
    every command that simulates as it does (``pipelines.replay``)."""
    c.add_argument("--cluster", type=cli.input_file,
                   help="cluster TOML file ([cluster] cores_per_host, hosts (optional: else "
                        "they grow with P); [link])")
    h = c.add_mutually_exclusive_group()
    h.add_argument("--hosts", type=cli.int_in(1, MAX_HOSTS),
                   help="number of hosts, whatever P is (1: the profile's one host; default: "
                        "as many as P ranks fill)")
    h.add_argument("--ranks-per-host", type=cli.int_in(1, cli.MAX_WORKERS), metavar="K",
                   help="hosts grow with P: ceil(ranks / K) hosts, K ranks on each (default: "
                        "a host's cores)")
    c.add_argument("--cores-per-host", type=cli.int_in(1, MAX_CORES_PER_HOST),
                   help="cores of each host (default: the profile's, or the cluster file's)")
    c.add_argument("--bandwidth", type=cli.bandwidth,
                   help="link payload rate per host and direction, e.g. 10gbit, 100mbit, "
                        "1.25GB/s (default: the profile's measured link, the file's, or the "
                        f"assumed link of preset {describe.ASSUMED_NETWORK})")
    c.add_argument("--latency", type=cli.duration,
                   help="one-way latency of a message, end to end, e.g. 20us (default: as "
                        "--bandwidth)")
    c.add_argument("--placement", choices=PLACEMENTS,
                   help="round_robin: rank r on host r mod H; packed: fill a host first "
                        "(default: the file's; round_robin on fixed hosts, packed where they "
                        "grow)")
    c.add_argument("--shared-cores", action="store_true",
                   help="all hosts share one pool of --cores-per-host cores (the emulated cluster)")


def add_target_arguments(parser) -> None:
    """``--target-accuracy``, the replay's evaluation interval and ``--dry-run``: read by
    ``pipelines.predict``, which this command hands them to."""
    g = parser.add_argument_group("time to accuracy (trains the real model along each "
                                  "predicted schedule: needs torch and the dataset, and takes "
                                  "about one serial training run per replay; said up front)")
    g.add_argument("--target-accuracy", type=cli.accuracy, default=None, metavar="A",
                   help="also predict the training time to test accuracy A within --epochs "
                        "(python -m pipelines.replay has more options)")
    g.add_argument("--eval-every", type=cli.nonnegative_int, default=0, metavar="N",
                   help="with --target-accuracy: evaluation points every N iterations at P = 1 "
                        "(N/P at P), besides every epoch end")
    g.add_argument("--dry-run", action="store_true",
                   help="with --target-accuracy: list the training runs it would make and "
                        "about how long they take, and train none")


def add_average_every(group) -> None:
    """``--average-every K``, as real.train reads it (``--avg-every``: its other name)."""
    group.add_argument("--average-every", "--avg-every", dest="average_every",
                       type=cli.nonnegative_int, default=0, metavar="K",
                       help="psgd: average weights every K steps (0: once, at the end); "
                            f"async_avg: exchange with the holder every K (0: "
                            f"{ASYNC_AVG_DEFAULT_K}), as real.train")


def main(argv: list[str] | None = None) -> int:
    return cli.command(PROG, build_parser().parse_args, partial(run, argv=argv), argv,
                       (profile_mod.ProfileError, ValueError))


def run(args, argv: list[str] | None = None) -> int:
    """The prediction; with ``--target-accuracy``, ``pipelines.predict`` on the same
    command line (``argv``; None: this program's)."""
    if args.target_accuracy is not None:
        return cli.hand_over("pipelines.predict", argv, PROG)
    q, _ = predict(args)
    if args.trace:
        write_trace(args, q)
    return 0


def predict(args) -> tuple[question.Question, list[dict]]:
    """Resolve the question, simulate every point, write and print the outputs; the
    question and the rows, for what follows (``--trace``, ``pipelines.predict``)."""
    from tqdm import tqdm
    q = question.resolve(args)
    t0 = time.perf_counter()
    with tqdm(total=len(q.sweep.points), desc="predict", unit="run", disable=None, leave=False,
              delay=1.0, file=sys.stderr) as bar:     # silent when stderr is not a terminal
        rows = sweep(q.sweep, bar.update, jobs=args.jobs,
                     meanwhile=None if args.no_plot else _preload_plot)
    meta = metadata(q, rows, time.perf_counter() - t0, args.ranks_per_host)
    written(args, rows, meta)
    return q, rows


def _preload_plot() -> None:
    from simulator.output.plots import preload
    preload()


def write_trace(args, q: question.Question) -> None:
    """A Chrome trace of the first scheme at the largest P (P = 1 for serial)."""
    import json
    cfg = q.schemes[0]
    pt = q.point(cfg, 1 if SCHEMES[cfg.name].single_worker else max(q.workers))
    job = q.sweep
    r = simulate(cfg, pt.workers, job.workload, pt.cluster, job.profile, job.seed,
                 job.heterogeneity, trace=True)
    atomic_write_text(args.trace, json.dumps(r.trace))
    print(f"wrote {args.trace} ({len(r.trace['traceEvents'])} events)", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
