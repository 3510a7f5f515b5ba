"""Where a real rank's compute departs from ``calibrate.workload``'s step, in one process.

Under ``mpirun -n P`` every rank times, in rounds that interleave them so the machine's
drift falls on all alike, ``--steps`` steps of each of

* ``bench free``: ``calibrate.workload``'s step (its ``Bench``: forward, cross-entropy,
  backward, SGD step, zero_grad) on its random batch, ranks unsynchronised;
* ``bench lock-step``: the same after a barrier, so the ranks compute at the same moments
  as a synchronous run's do;
* ``real step free``: ``real.training.step.RealCompute``'s step (zero_grad, forward,
  nll_loss, backward, SGD step) on the rank's slice of the synthetic dataset's global
  batches, as ``real.train`` cuts them;
* ``real step + allreduce``: mpi_allreduce's iteration (the same compute, then the flat
  gradient buffer's copies, MPI Allreduce and the division by P), its compute timed.

and prints each phase's median per rank. With ``--threads`` (``real.train``'s threads
beside its training: the load meter, the rows' stream to the recorder) running too.
Same CNN, batch 64 per rank, one torch thread, as ``real.phantom_check`` runs them:

    mpirun -n 2 python benchmarks/phantom_step_parts.py
    mpirun -bind-to core -n 2 python benchmarks/phantom_step_parts.py --threads

Run it on a quiet machine (``/work/bin/quiet`` here); docs/phantom.md quotes its output.
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import cli  # noqa: E402

PROG = "python benchmarks/phantom_step_parts.py"


def phases(world, rank: int, size: int) -> dict:
    """The four phases' step functions, each returning its timed seconds."""
    import torch
    from mpi4py import MPI

    from calibrate.probes.workload import Bench, load_model
    from real.training.data import load_dataset
    from real.training.models import build_model
    from real.training.step import RealCompute, Shard, flat_grads, load_flat_grads
    bench = Bench(load_model("cnn", (1, 28, 28), 10), "cnn", (1, 28, 28), 64, "cpu", 0)
    torch.manual_seed(0)
    model = build_model("cnn", (1, 28, 28), 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = load_dataset("synthetic", train_size=12800, test_size=256)
    shard = Shard(torch.from_numpy(data.train_x), torch.from_numpy(data.train_y))
    batches = [(x, y) for x, y, _ in shard.global_batches(64 * size, rank, size, 0)]
    compute, turn = RealCompute(), [0]

    def batch():
        turn[0] += 1
        return batches[turn[0] % len(batches)]

    def timed(f):
        t = time.perf_counter()
        f()
        return time.perf_counter() - t

    def bench_lock_step():
        world.Barrier()
        return timed(lambda: bench.step(64))

    def real_step():
        x, y = batch()
        return timed(lambda: compute.step(model, opt, x, y))

    def real_allreduce():
        x, y = batch()
        compute_s = timed(lambda: compute.forward_backward(model, x, y))
        buf = flat_grads(model).numpy()
        world.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        buf /= size
        load_flat_grads(model, torch.from_numpy(buf))
        return compute_s + timed(opt.step)

    return {"bench free": lambda: timed(lambda: bench.step(64)),
            "bench lock-step": bench_lock_step, "real step free": real_step,
            "real step + allreduce": real_allreduce}


def build_parser() -> cli.Parser:
    p = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=cli.positive_int, default=40,
                   help="steps of a phase in each round")
    p.add_argument("--rounds", type=cli.positive_int, default=4, help="rounds over the phases")
    p.add_argument("--threads", action="store_true",
                   help="run real.train's load meter and row stream beside the training")
    return p


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


def run(args) -> int:
    import torch
    from mpi4py import MPI
    torch.set_num_threads(1)
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    if args.threads:
        from real.records.load import RankMeter
        from real.records.timing import IterationLog
        meter = RankMeter(1).start()         # noqa: F841  (samples until the process ends)
        IterationLog(rank).stream(lambda rows: None)
    steps = phases(world, rank, size)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for f in steps.values():                 # warm-up, untimed
        for _ in range(3):
            f()
    for _ in range(args.rounds):
        for name, f in steps.items():
            world.Barrier()
            times[name] += [f() for _ in range(args.steps)]
    medians = world.gather({k: statistics.median(v) for k, v in times.items()}, root=0)
    if rank == 0:
        for name in steps:
            print(f"{name:<24}" + "  ".join(f"rank {r}: {m[name] * 1e3:7.3f} ms"
                                            for r, m in enumerate(medians)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
