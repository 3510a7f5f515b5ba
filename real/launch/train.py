"""Train one model with one scheme and write a run record.

    python -m real.train --schemes serial --dataset fashion-mnist --epochs 1
    mpirun -n 4 python -m real.train --schemes psgd --average-every 0
    torchrun --nproc-per-node 2 -m real.train --schemes allreduce --global-batch 256
    srun -n 4 python -m real.train --schemes ddp --device cuda     # under Slurm, one GPU per rank
    python -m real.train --schemes hogwild --workers 4
    mpirun -n 5 python -m real.train --schemes ps_async        # 4 workers + the server

The same script runs single-process, under mpirun, torchrun and srun, on one host or many
(``real.launch.launchers``), on CPU or GPU (``real.launch.devices``). Rank 0 shows progress,
prints the loss every ``--log-every`` iterations, evaluates the final model and writes
``OUT/RUN_ID/``. The record holds test accuracy against training time (``results.curve``, points
every ``--eval-every`` iterations and at every epoch end, see ``real.records.curve``).

Imports: real (data, dist, launchers, models, runner, schemes), cli.
"""
from __future__ import annotations

import os
import sys

from real import schemes
import cli

PROG = "python -m real.train"
DEFAULT_TIMEOUT_S = 120.0
RANKS_PER_CORE = 4                  # more processes or threads than this per core: a typo
COMPUTE_MODES = ("real", "phantom")
FLOAT32_BYTES = 4


def local_limit() -> int:
    """The most processes (or threads) one run may start per host: RANKS_PER_CORE per core."""
    return RANKS_PER_CORE * (os.cpu_count() or 1)


def build_parser() -> cli.Parser:
    from real.training.data import DATASETS
    from real.launch.dist import MPI_ALLREDUCE_ALGORITHMS
    from real.training.models import MODELS, PRESETS
    from real.schemes.async_avg import DEFAULT_K as ASYNC_AVG_DEFAULT_K
    p = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--schemes", "--algorithm", dest="algorithm", default="serial",
                   type=cli.choice_list(schemes.SCHEMES, False), metavar="NAME",
                   help=f"the scheme (one): {', '.join(schemes.SCHEMES)} (--algorithm: its old "
                        "name)")
    p.add_argument("--model", default="cnn", choices=MODELS, metavar="NAME",
                   help=f"model: {', '.join(MODELS)} (a phantom run's: its workload's)")
    p.add_argument("--dataset", default=None, choices=DATASETS, metavar="NAME",
                   help=f"dataset: {', '.join(DATASETS)} (default: the model's own)")
    p.add_argument("--data-dir", default=None, type=cli.input_folder,
                   help="folder holding the dataset files")
    p.add_argument("--download", action="store_true", help="download a missing dataset (checksummed)")
    p.add_argument("--train-size", type=cli.positive_int, default=None,
                   help="use only this many training samples (all by default)")
    p.add_argument("--test-size", type=cli.positive_int, default=None,
                   help="use only this many test samples (all by default)")
    p.add_argument("--epochs", type=cli.positive_int, default=1, help="passes over the training set")
    p.add_argument("--batch-size", type=cli.positive_int, default=64, help="per worker")
    p.add_argument("--global-batch", type=cli.positive_int, default=None,
                   help="samples per step over all workers (per worker: G / P, must divide); "
                        "default: batch size * P")
    cli.add_sgd_flags(p)
    p.add_argument("--preset", default=None, choices=sorted(PRESETS),
                   help="the settings of one of the exercise sheets the project started from "
                        "(seed001: lr 1, 1%% decay per epoch, batch 100, 5 epochs); "
                        "flags given explicitly win")
    p.add_argument("--average-every", "--avg-every", dest="average_every",
                   type=cli.nonnegative_int, default=0, metavar="K",
                   help="psgd: average weights every K iterations (0: once, at the end); "
                        f"async_avg: exchange with the holder every K (0: {ASYNC_AVG_DEFAULT_K})")
    p.add_argument("--workers", type=cli.one_worker_count(1, local_limit()), default=None,
                   metavar="P", help="hogwild: processes to start (rank-based schemes take P from "
                                     f"the launcher); {cli.ONE_WORKER_HELP}")
    p.add_argument("--mpi-allreduce", default="auto", choices=MPI_ALLREDUCE_ALGORITHMS,
                   help="mpi_allreduce: MPICH's algorithm (MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                   help="where each rank computes: cpu, or cuda (one GPU per rank; real.launch.devices)")
    p.add_argument("--backend", default="auto", choices=("auto", "gloo", "nccl"),
                   help="torch.distributed backend of gather_scatter, allreduce, ddp "
                        "(auto: nccl with --device cuda, gloo on CPU)")
    p.add_argument("--threads", type=cli.int_in(1, local_limit()), default=None,
                   help="torch threads per rank (default: cores // ranks on this host)")
    p.add_argument("--seed", type=cli.seed, default=1,
                   help="seed of the weights and the data order (rank r draws from seed + r)")
    p.add_argument("--repeat", type=cli.nonnegative_int, default=0,
                   help="index of this repetition (set by real.sweep; recorded)")
    p.add_argument("--timeout", type=cli.float_in(1, 1e6), default=DEFAULT_TIMEOUT_S,
                   help="seconds a rank may wait for a peer (or go without finishing an "
                        "iteration) before the run is declared failed")
    p.add_argument("--warmup-steps", type=cli.positive_int, default=1, metavar="K",
                   help="each worker's first K steps are warm-up: run like the others and "
                        "recorded, and left out of the time per epoch comparisons measure "
                        "(connections opening, TCP's windows growing; "
                        "simulator.compare.steady_epoch_s)")
    p.add_argument("--log-every", type=cli.positive_int, default=20, help="print the loss every N iterations")
    p.add_argument("--eval-every", type=cli.nonnegative_int, default=0,
                   help="test accuracy every N iterations of the evaluating worker, besides every "
                        "epoch end (0: epoch ends only); scored after training (real.records.curve)")
    p.add_argument("--target-accuracy", type=cli.accuracy, default=None,
                   help="stop at the end of the epoch in which test accuracy reaches this, and "
                        "record the training time it first did (or that it was not reached "
                        "in --epochs)")
    p.add_argument("--out", default="runs", type=cli.output_folder,
                   help="folder that receives the run record")
    p.add_argument("--run-id", default=None, type=cli.run_id,
                   help="name of the record folder (default: scheme-P-time)")
    p.add_argument("--dry-run", action="store_true",
                   help="smoke test: 256 training and test samples, one epoch")
    p.add_argument("--progress-file", default=None, type=cli.output_file(),
                   help="rank 0 keeps 'iterations_done total' in this file (real.sweep reads it)")
    add_compute_arguments(p)
    return p


def add_compute_arguments(p) -> None:
    """``--compute``, ``--workload``, ``--time-scale``: real.train's and real.sweep's."""
    g = p.add_argument_group("phantom compute (docs/phantom.md)")
    g.add_argument("--compute", default="real", choices=COMPUTE_MODES,
                   help="real: train the model; phantom: every message real, each layer's "
                        "forward and backward a sleep of the --workload file's measured time, "
                        "no data loaded and no accuracy measured")
    g.add_argument("--workload", default=None, type=cli.input_file, metavar="FILE",
                   help="with --compute phantom: the workload TOML file (python -m "
                        "calibrate.workload, or by hand: contracts/workload.py); "
                        "the run's model is the file's")
    g.add_argument("--time-scale", default=1.0, type=time_scale, metavar="S",
                   help="with --compute phantom: every compute time is multiplied by S (time "
                        "dilation: S = 1000 puts a 25 Gbit/s cluster's compute to "
                        "communication ratio on 25 Mbit/s links)")


def time_scale(text: str) -> float:
    """A time scale: a positive, finite number."""
    import argparse
    import math
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a positive number: give the factor every compute time is "
            "multiplied by, e.g. 1 (as measured) or 1000")
    return value


def compute_problem(args, argv) -> str | None:
    """Why the compute flags do not go together, or None; loads the phantom's workload,
    which sets ``args.model`` to the file's model and ``args.workload_sha256`` to its digest
    (a result setting: ``contracts.record.RESULT_SETTINGS``)."""
    if args.compute == "real":
        for flag, given in (("--workload", args.workload is not None),
                            ("--time-scale", args.time_scale != 1.0)):
            if given:
                return f"{flag} goes with --compute phantom (a real run computes for real)"
        return None
    if not schemes.SCHEMES[args.algorithm].phantom:
        return (f"--compute phantom runs the rank-based schemes ({', '.join(schemes.RANK_BASED)}); "
                f"{args.algorithm} sends no messages to keep real: run it with --compute real")
    if args.workload is None:
        return ("--compute phantom needs --workload FILE (python -m calibrate.workload --model "
                "cnn --input-shape 1,28,28 --batch-size 64 --out cnn.toml makes one)")
    for flag, given in (("--target-accuracy", args.target_accuracy is not None),
                        ("--eval-every", args.eval_every)):
        if given:
            return (f"{flag}: a phantom run measures no accuracy (its weights never train); "
                    "leave it out, or run with --compute real")
    from real.phantom.plan import PhantomError, load_plan
    try:
        plan = load_plan(args.workload, args.time_scale)
    except PhantomError as e:
        return str(e)
    name, args.workload_sha256 = plan.workload.name, plan.sha256
    said = [a for a in argv if a == "--model" or a.startswith("--model=")]
    if said and args.model != name:
        return (f"--model {args.model}: a phantom run's model is its workload's ({name} in "
                f"{args.workload}); leave --model out")
    args.model = name
    return None


def parse_args(argv=None):
    from real.training.models import PRESETS
    parser = build_parser()
    first = parser.parse_args(argv)
    if first.preset:
        parser.set_defaults(**PRESETS[first.preset])
        first = parser.parse_args(argv)
    if len(first.algorithm) != 1:
        parser.error(f"--schemes/--algorithm takes one scheme (got {', '.join(first.algorithm)}); "
                     "python -m real.sweep runs several")
    first.algorithm = first.algorithm[0]
    if first.dry_run:
        first.train_size, first.test_size, first.epochs = 256, 256, 1
    if first.data_dir and not os.path.isdir(first.data_dir):
        parser.error(f"--data-dir {first.data_dir} does not exist")
    if first.workers is not None and schemes.SCHEMES[first.algorithm].rank_based:
        from real.launch.launchers import LaunchError, launched_world_size
        try:
            launched = launched_world_size()
        except LaunchError as e:
            parser.error(str(e))
        if launched is not None and launched != schemes.SCHEMES[first.algorithm].ranks(
                first.workers):
            parser.error(f"--workers {first.workers} does not match the {launched} ranks launched "
                         f"({first.algorithm} takes P from mpirun / torchrun / srun)")
    if not 0 <= first.lr_decay < 1:
        parser.error(f"--lr-decay {first.lr_decay} must be in [0, 1)")
    problem = compute_problem(first, argv if argv is not None else sys.argv[1:])
    if problem:
        parser.error(problem)
    problem = data_size_problem(first) if first.compute == "real" else None
    if problem:
        parser.error(problem)
    return first


def data_size_problem(args, ranks_here: int | None = None) -> str | None:
    """Why the training data would not fit in this machine's memory, or None: every rank on
    the host (``ranks_here``; default: as launched) holds the whole set as float32
    (hogwild's processes share one copy)."""
    from contracts.checks import ConfigError, fits_in_memory

    from real.training.data import sample_shape
    from real.training.models import DEFAULT_DATASET
    dataset = args.dataset or DEFAULT_DATASET[args.model]
    shape, default_train, default_test = sample_shape(dataset)
    if not dataset.startswith("synthetic"):      # a real set has what it has
        for flag, asked, has in (("--train-size", args.train_size, default_train),
                                 ("--test-size", args.test_size, default_test)):
            if asked and asked > has:
                return f"{flag} {asked} is more than the {has} samples of {dataset}"
    samples = (args.train_size or default_train) + (args.test_size or default_test)
    ranks = ranks_here or (1 if schemes.SCHEMES[args.algorithm].own_processes
                           else _launched_local_size())
    per_sample = FLOAT32_BYTES * shape[0] * shape[1] * shape[2]
    try:
        # generating or normalising a set holds about two copies at once
        fits_in_memory(f"--train-size {args.train_size or default_train} ({dataset}, "
                       f"{ranks} rank(s) on this host)", 2 * ranks * samples * per_sample)
    except ConfigError as e:
        return str(e)
    return None


def _launched_local_size() -> int:
    for var in ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "LOCAL_WORLD_SIZE"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return _launched_world_size() or 1


def _launched_world_size() -> int | None:
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "WORLD_SIZE"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return None


def main(argv=None) -> int:
    return cli.command(PROG, parse_args, train, argv)


def train(args) -> int:
    """One rank's run; a failure goes to its recorder (``real.launch.supervise``) as well."""
    from real.launch.runner import run
    try:
        code = run(args)
    except OSError as e:    # the file system refused a write: one line (the record is whole or absent)
        from real.launch.supervise import Heartbeat
        Heartbeat.from_env().failed(f"rank {cli.launched_rank()}: {e.strerror}: {e.filename}")
        return cli.io_error(PROG, e)
    except Exception as e:  # noqa: BLE001 - the recorder (real.launch.supervise) names the failure
        import traceback

        from real.launch.runner import _failure_cause
        from real.launch.supervise import Heartbeat
        traceback.print_exc()
        Heartbeat.from_env().failed(_failure_cause(e, cli.launched_rank()))
        return 1
    if "TORCHELASTIC_RUN_ID" in os.environ or schemes.SCHEMES[args.algorithm].talks == "torch":
        # A gloo rank sometimes aborts in C++ teardown ("terminate called without an
        # active exception"), under torchrun and under mpirun alike, after everything
        # is written and the gloo group destroyed; leave without static destructors
        # (but finalize MPI: hydra ends every rank when one leaves without it).
        from real.launch.dist import finalize_mpi
        finalize_mpi()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def launched_main() -> int:
    """``python -m real.train``: the rank runs under its recorder (``real.launch.supervise``)."""
    from real.launch.supervise import supervised, wanted
    argv = sys.argv[1:]
    if wanted() and not {"-h", "--help"} & set(argv):
        return supervised(argv)
    return main(argv)


if __name__ == "__main__":
    sys.exit(launched_main())
