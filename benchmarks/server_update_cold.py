"""The parameter server's update with warm and with cold caches.

    python benchmarks/server_update_cold.py --model cnn --repeats 60

Times ``real.schemes.ps.server_update`` (the function both servers call; the
calibration's server probe times it back to back and after idle waits of sleeping polls,
the curve the simulated server charges) on one thread, its median over
``--repeats`` calls, with something else run before each call:

* *nothing*: back to back, as the server probe times it;
* *a busy Python loop* of about 2 ms: the core kept busy, the update's memory untouched;
* *a sleep* of 2 ms: the core idle in between;
* *30 ms of sleeping polls*: what a phantom run's server does between two updates (its
  workers sleep their compute), ``real.launch.dist.wait``'s sleeps doubling up to 1 ms;
* *a 64 MiB write*: the caches evicted;
* *a forward and backward* of another copy of the model at batch 64: what a worker
  sharing the server's core does between two of its updates.

On one host the runs' servers (``server_update_median_s``) share their cores with
workers that compute between two updates; a gap between the probe and those runs
that the last rows close is the caches'. Run it on a quiet machine.

Imports: numpy, torch, cli, calibrate.probes.compute_probe, real (schemes.ps, training.models).
"""
from __future__ import annotations

import statistics
import sys
import time

import cli

PROG = "python benchmarks/server_update_cold.py"


def build_parser() -> cli.Parser:
    ap = cli.Parser(prog=PROG, description=__doc__.splitlines()[0])
    from calibrate.probes.plan import ALL_MODELS
    ap.add_argument("--model", default="cnn", choices=ALL_MODELS, help="the model")
    ap.add_argument("--repeats", default=60, type=cli.positive_int,
                    help="timed calls per row (five more first, not timed)")
    return ap


def run(a) -> int:
    import numpy as np
    import torch
    import torch.nn.functional as F

    from calibrate.probes.compute_probe import LR, make_model, synthetic_batch
    from real.schemes.ps import server_update
    from real.training.models import flat_params
    torch.set_num_threads(1)
    model = make_model(a.model)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    w = flat_params(model).numpy()
    grad = np.full(w.size, 1e-3, dtype=np.float32)
    other, (x, y) = make_model(a.model, seed=1), synthetic_batch(a.model, 64)
    junk = np.zeros(64 * 2**20 // 8)

    def busy():
        end = time.perf_counter() + 0.002
        while time.perf_counter() < end:
            pass

    def step():
        other.zero_grad()
        F.cross_entropy(other(x), y).backward()

    def polls(wait_s=0.030, poll_s=0.001):
        """The phantom server's wait for the pushes: sleeps doubling from 50 us to 1 ms."""
        end, nap = time.perf_counter() + wait_s, 50e-6
        while time.perf_counter() < end:
            time.sleep(min(nap, poll_s))
            nap *= 2

    before = {"nothing": lambda: None, "a busy Python loop (2 ms)": busy,
              "a sleep (2 ms)": lambda: time.sleep(0.002),
              "30 ms of sleeping polls (1 ms)": polls,
              "a 64 MiB write": lambda: junk.fill(1.0),
              "a forward and backward of the model": step}
    lines = [f"{a.model}: {w.size:,} parameters; median of {a.repeats} updates, one thread"]
    for name, between in before.items():
        times = []
        for i in range(5 + a.repeats):
            between()
            t0 = time.perf_counter()
            server_update(model, opt, grad, w)
            if i >= 5:
                times.append(time.perf_counter() - t0)
        lines.append(f"after {name:<38} {statistics.median(times) * 1e3:.3f} ms")
    cli.print_out(*lines)
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
