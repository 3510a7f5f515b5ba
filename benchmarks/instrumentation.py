"""What the run record's instrumentation costs: instrumented serial step vs a plain PyTorch loop.

    python benchmarks/instrumentation.py [--iterations 200] [--repeats 7] [--threads 1]

Both loops train the same model on the same batches (synthetic data, batch 64).
The plain loop is the PyTorch-examples loop (zero_grad, forward, nll_loss,
backward, step). The instrumented one is ``real.training.step.local_epochs`` with its
IterationLog, i.e. exactly what ``real.train --schemes serial`` runs.
The two alternate, after a warm-up, so drift on a shared machine hits both;
the overhead is the ratio of their median per-iteration times.

Imports: torch, real (context, dist, models, step, timing).
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import cli  # noqa: E402
from real.launch.context import RunContext  # noqa: E402
from real.launch.dist import Launch, SingleComm  # noqa: E402
from real.training.models import build_model  # noqa: E402
from real.training.step import Shard, local_epochs  # noqa: E402
from real.records.timing import IterationLog  # noqa: E402

PROG = "python benchmarks/instrumentation.py"


def plain_loop(model, opt, shard, batch, seed) -> None:
    for x, y in shard.batches(batch, seed):
        opt.zero_grad(set_to_none=True)
        loss = F.nll_loss(model(x), y)
        loss.backward()
        opt.step()
        loss.item()           # the instrumented loop reads the loss too


def instrumented_loop(model, opt, shard, batch, seed) -> None:
    cfg = SimpleNamespace(epochs=1, batch_size=batch, lr_decay=0.0, seed=seed)
    ctx = RunContext(cfg=cfg, launch=Launch("single", 0, 1, 1), comm=SingleComm(), model=model,
                     optimizer=opt, shard=shard, log=IterationLog(0))
    for _ in local_epochs(ctx, ctx.log):
        pass


def build_parser() -> cli.Parser:
    p = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--iterations", type=int, default=200)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--model", default="cnn")
    return p


def run(args) -> int:
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    batch = 64
    n = args.iterations * batch
    shard = Shard(torch.randn(n, 1, 28, 28), torch.randint(0, 10, (n,)))
    model = build_model(args.model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    plain_loop(model, opt, Shard(shard.x[:20 * batch], shard.y[:20 * batch]), batch, 0)  # warm-up
    times = {"plain": [], "instrumented": []}
    for r in range(args.repeats):
        for name, loop in (("plain", plain_loop), ("instrumented", instrumented_loop)):
            t0 = time.perf_counter()
            loop(model, opt, shard, batch, r)
            times[name].append((time.perf_counter() - t0) / args.iterations)
    plain, inst = (statistics.median(times[k]) for k in ("plain", "instrumented"))
    print(f"model {args.model}, batch {batch}, {args.threads} thread(s), "
          f"{args.iterations} iterations x {args.repeats} repeats (medians)")
    print(f"plain PyTorch loop : {1e3 * plain:.3f} ms/iteration")
    print(f"instrumented loop  : {1e3 * inst:.3f} ms/iteration")
    print(f"overhead           : {100 * (inst / plain - 1):+.2f} %")
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
