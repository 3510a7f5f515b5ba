"""Train one model with one scheme and write a run record.

    python -m real.train --algorithm serial --dataset fashion-mnist --epochs 1
    mpirun -n 4 python -m real.train --algorithm psgd --average-every 0
    torchrun --nproc-per-node 2 -m real.train --algorithm allreduce --global-batch 256
    python -m real.train --algorithm hogwild --workers 4
    mpirun -n 5 python -m real.train --algorithm ps_async        # 4 workers + the server

The same script runs single-process, under mpirun and under torchrun (see
``real.dist``). Rank 0 shows progress, prints the loss every ``--log-every``
iterations, evaluates the final model and writes ``OUT/RUN_ID/``.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import sys

from . import cli, schemes

DEFAULT_TIMEOUT_S = 120.0


def build_parser() -> cli.Parser:
    from .data import DATASETS
    from .dist import MPI_ALLREDUCE_ALGORITHMS
    from .models import MODELS, PRESETS
    from .schemes.async_avg import DEFAULT_K as ASYNC_AVG_DEFAULT_K
    p = cli.Parser(prog="python -m real.train", description=__doc__.split("\n")[0])
    p.add_argument("--algorithm", default="serial", type=cli.choice_list(schemes.SCHEMES, False),
                   help=f"scheme: {', '.join(schemes.SCHEMES)}")
    p.add_argument("--model", default="cnn", choices=MODELS, metavar="NAME",
                   help=f"model: {', '.join(MODELS)}")
    p.add_argument("--dataset", default=None, choices=DATASETS, metavar="NAME",
                   help=f"dataset: {', '.join(DATASETS)} (default: the model's own)")
    p.add_argument("--data-dir", default=None, help="folder holding the dataset files")
    p.add_argument("--download", action="store_true", help="download a missing dataset (checksummed)")
    p.add_argument("--train-size", type=cli.positive_int, default=None,
                   help="use only this many training samples (all by default)")
    p.add_argument("--test-size", type=cli.positive_int, default=None,
                   help="use only this many test samples (all by default)")
    p.add_argument("--epochs", type=cli.positive_int, default=1)
    p.add_argument("--batch-size", type=cli.positive_int, default=64, help="per worker")
    p.add_argument("--global-batch", type=cli.positive_int, default=None,
                   help="samples per step over all workers (per worker: G / P, must divide); "
                        "default: batch size * P")
    p.add_argument("--lr", type=cli.positive_float, default=0.05, help="learning rate")
    p.add_argument("--momentum", type=float, default=0.0)
    p.add_argument("--lr-decay", type=float, default=0.0,
                   help="fraction the learning rate drops after each epoch (seed 001: 0.01)")
    p.add_argument("--preset", default=None, choices=sorted(PRESETS),
                   help="flag defaults of an exercise sheet (explicit flags win)")
    p.add_argument("--average-every", type=cli.nonnegative_int, default=0,
                   help="psgd: average weights every K iterations (0: once, at the end); "
                        f"async_avg: exchange with the holder every K (0: {ASYNC_AVG_DEFAULT_K})")
    p.add_argument("--workers", type=cli.positive_int, default=None,
                   help="hogwild: processes to start (rank-based schemes take P from the launcher)")
    p.add_argument("--mpi-allreduce", default="auto", choices=MPI_ALLREDUCE_ALGORITHMS,
                   help="mpi_allreduce: MPICH's algorithm (MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM)")
    p.add_argument("--threads", type=cli.positive_int, default=None,
                   help="torch threads per rank (default: cores // ranks on this host)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--repeat", type=cli.nonnegative_int, default=0,
                   help="index of this repetition (set by real.sweep; recorded)")
    p.add_argument("--timeout", type=cli.positive_float, default=DEFAULT_TIMEOUT_S,
                   help="seconds a rank waits for a peer before the run is declared failed")
    p.add_argument("--log-every", type=cli.positive_int, default=20, help="print the loss every N iterations")
    p.add_argument("--out", default="runs", help="folder that receives the run record")
    p.add_argument("--run-id", default=None, help="name of the record folder (default: scheme-P-time)")
    p.add_argument("--dry-run", action="store_true",
                   help="smoke test: 256 training and test samples, one epoch")
    return p


def parse_args(argv=None):
    from .models import PRESETS
    parser = build_parser()
    first = parser.parse_args(argv)
    if first.preset:
        parser.set_defaults(**PRESETS[first.preset])
        first = parser.parse_args(argv)
    first.algorithm = first.algorithm[0]
    if first.dry_run:
        first.train_size, first.test_size, first.epochs = 256, 256, 1
    if first.data_dir and not os.path.isdir(first.data_dir):
        parser.error(f"--data-dir {first.data_dir} does not exist")
    if first.workers is not None and first.algorithm in schemes.RANK_BASED:
        launched = _launched_world_size()
        if launched is not None and launched != schemes.ranks_for(first.algorithm, first.workers):
            parser.error(f"--workers {first.workers} does not match the {launched} ranks launched "
                         f"({first.algorithm} takes P from mpirun / torchrun)")
    if not 0 <= first.lr_decay < 1:
        parser.error(f"--lr-decay {first.lr_decay} must be in [0, 1)")
    return first


def _launched_world_size() -> int | None:
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "WORLD_SIZE"):
        if var in os.environ:
            return int(os.environ[var])
    return None


def environment(launch, threads: int) -> dict:
    import numpy
    import torch
    versions = {"python": platform.python_version(), "torch": torch.__version__,
                "numpy": numpy.__version__}
    if launch.kind == "mpi":
        import mpi4py
        from mpi4py import MPI
        versions["mpi4py"] = mpi4py.__version__
        versions["mpi"] = MPI.Get_library_version().splitlines()[0].strip()
    # An emulated cluster (real.sweep --cluster) names itself: hosts, addresses, shaping.
    cluster = json.loads(os.environ["PSGD_CLUSTER"]) if os.environ.get("PSGD_CLUSTER") else None
    return {"host": socket.gethostname(), "cores": os.cpu_count(), "platform": platform.platform(),
            "cpu": _cpu_model(), "launcher": launch.kind, "ranks": launch.world_size,
            "ranks_per_host": launch.local_size, "threads_per_rank": threads,
            "versions": versions, "cluster": cluster}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def weights_digest(model) -> str:
    from .models import flat_params
    return hashlib.sha256(flat_params(model).numpy().tobytes()).hexdigest()[:16]


def main(argv=None) -> int:
    try:
        args = parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    from .runner import run
    code = run(args)
    if "TORCHELASTIC_RUN_ID" in os.environ:
        # Under torchrun a worker sometimes aborts in C++ teardown ("terminate called
        # without an active exception") after everything is written and the gloo
        # group destroyed; leave without running static destructors.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
