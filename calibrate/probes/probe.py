"""``python -m calibrate.probe``: run one part of the micro-benchmarks, save the raw rows.

Parts (``--part``), each writing tidy CSV (one row per timed repetition) into ``--workdir``:

``compute``  step / eval times per model, batch, threads  -> compute_steps.csv,
                                                              compute_eval.csv, models.json
``sharing``  k single-thread processes at once            -> sharing.csv
``server``   parameter-server sum + update                -> server.csv
             the real server's update per model            -> server_update.csv
``scheduler`` two busy processes on one core: time slice  -> scheduler.csv
              the same let loose: balance delay            -> balance.csv
              two gloo ranks training on one core: wake wait -> wake.csv
``comm``     under ``mpirun -n P``: MPI (+ gloo) collectives -> comm_P{P}_{algorithm}.csv / .json

Examples::

    python -m calibrate.probe --part compute --models cnn --batches 16,32
    mpirun -n 2 python -m calibrate.probe --part comm --algorithm ring --allreduce-only

Every part also writes ``{part}_meta.json``: host, cores, device, versions and the command,
and the compute, sharing, server and comm parts their run-to-run ``spread``
(``calibrate.fits.quality.spread``), with a warning on stderr where it is above the stated limit.
``--device cuda`` makes the compute part step the models on the GPU (timed with
``torch.cuda.synchronize``); the other parts are about the host's cores and stay on CPU.

Imports: numpy, scipy, torch, calibrate (comm_probe, compute_probe, plan, rawio,
sched_probe), real.launch.devices, cli.
"""
from __future__ import annotations

import argparse
import os
import platform
import shlex
import socket
import sys
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import cli
from cli import Parser

from calibrate.probes import plan as planmod
from calibrate.fits import quality
from calibrate.probes.rawio import CalibrationError, write_json, write_rows

PARTS = ("compute", "sharing", "server", "scheduler", "comm")


MAX_BATCH = 8192                  # a probe's batch; a larger one is a typo (and memory)
MAX_SERVER_PARAMS = 10**9
MAX_MESSAGE_BYTES = 2**34


def add_plan_args(p: argparse.ArgumentParser) -> None:
    """Flags shared with ``python -m calibrate``; unset ones keep the plan's value. Each value
    is checked by its type (``cli``) before anything runs."""
    cores = planmod.host_cores()
    ranks = planmod.MAX_RANKS_PER_CORE * cores
    p.add_argument("--quick", action="store_true", help="small plan (about a minute in all)")
    unset = argparse.SUPPRESS      # unset flags keep the plan's value, named in the help
    flags = {
        "--models": (cli.choice_list(planmod.ALL_MODELS, allow_all=False),
                     f"comma-separated (default: {','.join(planmod.ALL_MODELS)})"),
        "--batches": (cli.int_list(1, MAX_BATCH),
                      "batch sizes (default: 16,32,64,128,256; quick: 16,64)"),
        "--threads": (cli.int_list(1, cores), "torch threads per process (default: 1..cores)"),
        "--sharing": (cli.int_list(1, ranks),
                      "k processes at once (default: 1..2*cores; quick: 1,2,2*cores)"),
        "--server-params": (cli.int_list(1, MAX_SERVER_PARAMS, scientific=True),
                            "server tensor sizes (default: 1e3..1e7)"),
        "--sizes": (cli.int_list(1, MAX_MESSAGE_BYTES, scientific=True),
                    "message sizes in bytes (default: 4..64Mi in powers of 4)"),
        "--workers": (cli.worker_counts_up_to(ranks, low=2),
                      f"P for the comm probes, {cli.WORKERS_HELP}; P = 1 is left out (nothing to "
                      "communicate) (default: 2..2*cores; quick: 2)"),
        ("--mpi-allreduce", "--algorithms"): (
            cli.choice_list(planmod.MPI_ALGORITHMS, allow_all=False),
            f"MPI allreduce algorithms, as real.train's --mpi-allreduce names them (default: "
            f"{','.join(planmod.MPI_ALGORITHMS)}; quick: auto,ring; --algorithms: its old name)"),
    }
    for flag, (kind, text) in flags.items():
        names = flag if isinstance(flag, tuple) else (flag,)
        p.add_argument(*names, dest=names[-1].lstrip("-").replace("-", "_"), default=unset,
                       type=kind, help=text)
    p.add_argument("--repeats", type=cli.int_in(1, 100_000), default=unset,
                   help="every repeat count (steps, messages, server) set to this number")
    p.add_argument("--timeout-s", type=cli.float_in(1, 86400), default=unset,
                   help="per subprocess (default: 600; quick: 120)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where the compute probe steps the models (cuda: GPU 0, one host thread)")


def build_plan(args: argparse.Namespace) -> planmod.ProbePlan:
    cores = planmod.host_cores()
    plan = planmod.quick_plan(cores) if args.quick else planmod.full_plan(cores)
    fields = {"models": "models", "batches": "batches", "threads": "threads",
              "sharing": "sharing_ks", "server_params": "server_params",
              "sizes": "comm_sizes_bytes", "workers": "comm_workers",
              "algorithms": "comm_algorithms"}
    for flag, name in fields.items():
        value = getattr(args, flag, None)
        if value is not None:                  # a tuple (or list) from the flag's type
            plan = replace(plan, **{name: tuple(value)})
    if getattr(args, "repeats", None) is not None:
        n = args.repeats
        plan = replace(plan, step_repeats_min=n, step_repeats_max=n, comm_repeats_small=n,
                       comm_repeats_large=n, server_repeats=n)
    if getattr(args, "timeout_s", None) is not None:
        plan = replace(plan, timeout_s=args.timeout_s)
    if getattr(args, "device", "cpu") == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise CalibrationError("--device cuda: no CUDA device here; probe the CPU with "
                                   "--device cpu")
        # a GPU step does not depend on the host's BLAS threads: one unless asked
        plan = replace(plan, device="cuda",
                       threads=plan.threads if getattr(args, "threads", None) else (1,))
    planmod.check_plan(plan, cores)
    return plan


def describe_host(device: str = "cpu") -> dict:
    import numpy
    import scipy
    import torch

    from real.launch.devices import describe
    return {"host": socket.gethostname(), "cores": planmod.host_cores(),
            "device": describe(torch.device(device)),
            "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "load_avg_1min": round(os.getloadavg()[0], 2),     # > 0 before we start: a busy host
            "versions": {"python": platform.python_version(), "torch": torch.__version__,
                         "numpy": numpy.__version__, "scipy": scipy.__version__,
                         "platform": platform.platform()}}


def command_line(module: str, argv) -> str:
    return f"python -m {module} " + shlex.join(argv)


def run_compute(plan, out: Path) -> None:
    from calibrate.probes import compute_probe as cp
    steps, evals = [], []
    for model in plan.models:
        for threads in plan.threads:
            for batch in plan.batches:
                steps += cp.step_rows(plan, model, threads, batch)
            evals += cp.eval_rows(plan, model, threads, max(plan.batches))
    write_rows(out / "compute_steps.csv", steps)
    write_rows(out / "compute_eval.csv", evals)
    write_json(out / "models.json", cp.model_shapes(plan.models))


def run_sharing(plan, out: Path) -> None:
    from calibrate.probes import compute_probe as cp
    rows = []
    for k in plan.sharing_ks:
        rows += cp.sharing_rows(plan, k)
    write_rows(out / "sharing.csv", rows)


def run_server(plan, out: Path) -> None:
    from calibrate.probes import compute_probe as cp
    rows = []
    for params in plan.server_params:
        rows += cp.server_rows(plan, params)
    write_rows(out / "server.csv", rows)
    write_rows(out / "server_update.csv",
               [row for name in plan.models for row in cp.server_update_rows(plan, name)])


def run_scheduler(plan, out: Path) -> None:
    from calibrate.probes import sched_probe
    rows = sched_probe.off_core_rows(plan.slice_s)
    if not rows:
        raise CalibrationError("cannot pin processes to a core here (no sched_setaffinity)")
    write_rows(out / "scheduler.csv", rows)
    balance = sched_probe.balance_rows(plan.balance_tries)
    if balance:                          # needs 2 cores and sched_getcpu; else fluid cores
        write_rows(out / "balance.csv", balance)
    wake = sched_probe.wake_rows(plan.sharing_model, plan.sharing_batch, plan.wake_steps)
    if wake:                             # else woken ranks are taken to start at once
        write_rows(out / "wake.csv", wake)


def run_comm(plan, out: Path, algorithm: str, with_gloo: bool, other_ops: bool,
             command: str) -> None:
    from calibrate.probes import comm_probe
    result = comm_probe.run(plan, algorithm, with_gloo, other_ops)
    if result is None:          # not rank 0
        return
    rows, info = result
    stem = f"comm_P{info['workers']}_{algorithm}"
    write_rows(out / f"{stem}.csv", rows)
    info["spread"] = part_spread(out / f"{stem}.csv", "comm",
                                 f"comm probe P={info['workers']} {algorithm}",
                                 bool(info.get("oversubscribed")))
    write_json(out / f"{stem}.json", {**describe_host(), **info, "command": command})


def part_spread(table: Path, part: str, what: str, oversubscribed: bool = False) -> dict:
    """The run-to-run spread of a part's table (``quality.spread``), said on stderr in one
    line when it is above the limit; it goes into the part's meta file."""
    from calibrate.probes.rawio import read_rows
    found = quality.spread(read_rows(table), part, oversubscribed)
    said = quality.spread_warning(what, found)
    if said:
        print(f"calibrate.probe: {said}", file=sys.stderr, flush=True)
    return found


def build_parser() -> Parser:
    p = Parser(prog="python -m calibrate.probe", description=__doc__.split("\n")[0])
    p.add_argument("--part", choices=PARTS, required=True, help="which probe to run")
    p.add_argument("--workdir", default="calibration", type=cli.output_folder,
                   help="folder for the raw measurements")
    p.add_argument("--algorithm", default="auto", choices=planmod.MPI_ALGORITHMS,
                   help="MPI allreduce algorithm (comm part; sets "
                   f"{planmod.ALGORITHM_ENV} before MPI init)")
    p.add_argument("--allreduce-only", action="store_true",
                   help="comm part: only MPI allreduce (runs for the non-default algorithms)")
    p.add_argument("--no-gloo", action="store_true", help="comm part: skip torch.distributed/gloo")
    add_plan_args(p)
    return p


def parse_args(argv):
    return build_parser().parse_args(argv)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return cli.command("python -m calibrate.probe", parse_args, lambda args: run(args, argv), argv,
                       (CalibrationError,))


def run(args, argv: list[str]) -> int:
    from real.launch.dist import listen_locally
    listen_locally()              # before MPI starts: local ranks listen on loopback only
    plan = build_plan(args)
    out = Path(args.workdir)
    command = command_line("calibrate.probe", argv)
    if args.part == "comm":
        size = int(os.environ.get("PMI_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE", "0")))
        if size < 2:
            raise CalibrationError("--part comm runs under mpirun with at least 2 ranks: "
                                   "mpirun -n 2 python -m calibrate.probe --part comm")
        if size > planmod.MAX_RANKS_PER_CORE * planmod.host_cores():
            raise CalibrationError(f"mpirun -n {size} is more than this machine can run "
                                   f"({planmod.MAX_RANKS_PER_CORE} per core)")
        run_comm(plan, out, args.algorithm, not args.no_gloo, not args.allreduce_only,
                 f"mpirun -n {size} {command}")
        return 0
    {"compute": run_compute, "sharing": run_sharing, "server": run_server,
     "scheduler": run_scheduler}[args.part](plan, out)
    extra = ({"sharing_model": plan.sharing_model, "sharing_batch": plan.sharing_batch}
             if args.part == "sharing" else {})
    if args.part in quality.SPREAD_OF:
        extra["spread"] = part_spread(out / quality.SPREAD_OF[args.part][0], args.part,
                                      f"{args.part} probe")
    write_json(out / f"{args.part}_meta.json", {**describe_host(plan.device if args.part ==
                                                                "compute" else "cpu"),
                                                "command": command, **extra})
    return 0


if __name__ == "__main__":
    sys.exit(main())
