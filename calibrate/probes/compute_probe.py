"""Compute probes: what one SGD step, k processes on C cores and a server update cost.

* ``step_rows``: one forward + backward + SGD update on synthetic data, per model,
  batch size and torch thread count; each phase timed apart (``backward_s`` gives
  the backward share that DDP can overlap with communication).
* ``eval_rows``: a no-grad forward over a batch, per sample.
* ``sharing_rows``: k single-thread processes (spawned, released together by a
  barrier) step the same model until one shared deadline; the slowdown of each
  against k = 1 is how the OS shares C cores among k runnable processes.
* ``server_rows``: the parameter server's ``sum of m gradients`` and
  ``w -= lr * g`` on a flat float32 tensor, against parameter count.
* ``server_update_rows``: the update the real server runs
  (``real.schemes.ps.server_update``: the gradient into the model's tensors, torch's
  SGD step, the weights out as one vector) on each model, at its parameter count.

Warm-up steps are run and thrown away; every timed repetition is one row. With
``plan.device == "cuda"`` the step and eval probes run on the GPU and each phase is
timed after ``torch.cuda.synchronize`` (CUDA queues work and returns at once).

Imports: torch, calibrate (plan, rawio), real (training.models, schemes.ps).
"""
from __future__ import annotations

import multiprocessing as mp
import time

import torch
import torch.nn.functional as F

from calibrate.probes.plan import ProbePlan
from calibrate.probes.rawio import CalibrationError

INPUT_SHAPE = {"vgg11": (3, 32, 32)}      # the others read 28x28 grey images
DEFAULT_SHAPE = (1, 28, 28)
NUM_CLASSES = 10
LR = 0.01


def make_model(name: str, seed: int = 0):
    from real.training.models import build_model
    torch.manual_seed(seed)
    return build_model(name, INPUT_SHAPE.get(name, DEFAULT_SHAPE), NUM_CLASSES)


def synthetic_batch(name: str, batch: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((batch, *INPUT_SHAPE.get(name, DEFAULT_SHAPE)), generator=g)
    return x, torch.randint(0, NUM_CLASSES, (batch,), generator=g)


def _clock(device: str):
    """perf_counter, after the GPU's queued work where there is a GPU."""
    if device != "cuda":
        return time.perf_counter

    def after_sync():
        torch.cuda.synchronize()
        return time.perf_counter()
    return after_sync


def timed_step(model, optimizer, x, y, device: str = "cpu") -> tuple[float, float, float]:
    """(forward_s, backward_s, update_s) of one SGD step; CPU ops are synchronous, CUDA's
    are waited for."""
    now = _clock(device)
    t0 = now()
    optimizer.zero_grad(set_to_none=True)
    loss = F.nll_loss(model(x), y)
    t1 = now()
    loss.backward()
    t2 = now()
    optimizer.step()
    t3 = now()
    return t1 - t0, t2 - t1, t3 - t2


def _repeats(plan: ProbePlan, step_s: float) -> int:
    want = int(plan.point_s / max(step_s, 1e-6))
    return max(plan.step_repeats_min, min(plan.step_repeats_max, want))


def step_rows(plan: ProbePlan, model_name: str, threads: int, batch: int) -> list[dict]:
    torch.set_num_threads(threads)
    dev = plan.device
    model = make_model(model_name).to(dev)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = (t.to(dev) for t in synthetic_batch(model_name, batch))
    warm = [sum(timed_step(model, opt, x, y, dev)) for _ in range(max(1, plan.warmup_steps))]
    rows = []
    for rep in range(_repeats(plan, warm[-1])):
        fwd, bwd, upd = timed_step(model, opt, x, y, dev)
        rows.append({"model": model_name, "threads": threads, "batch": batch, "rep": rep,
                     "device": dev,
                     "forward_s": fwd, "backward_s": bwd, "update_s": upd,
                     "step_s": fwd + bwd + upd})
    return rows


@torch.no_grad()
def eval_rows(plan: ProbePlan, model_name: str, threads: int, batch: int) -> list[dict]:
    torch.set_num_threads(threads)
    now = _clock(plan.device)
    model = make_model(model_name).to(plan.device).eval()
    x = synthetic_batch(model_name, batch)[0].to(plan.device)
    for _ in range(max(1, plan.warmup_steps)):
        model(x)
    rows = []
    for rep in range(plan.step_repeats_min):
        t0 = now()
        model(x)
        dt = now() - t0
        rows.append({"model": model_name, "threads": threads, "batch": batch, "rep": rep,
                     "eval_s": dt, "eval_s_per_sample": dt / batch})
    return rows


def model_shapes(names) -> dict[str, dict]:
    from real.training.models import layer_param_counts, param_count, tensor_param_counts
    out = {}
    for name in names:
        m = make_model(name)
        out[name] = {"param_count": int(param_count(m)),
                     "layer_param_counts": [int(c) for c in layer_param_counts(m)],
                     "tensor_param_counts": [int(c) for c in tensor_param_counts(m)],
                     "input_shape": list(INPUT_SHAPE.get(name, DEFAULT_SHAPE))}
    return out


# ---------------------------------------------------------------- processor sharing

def _sharing_worker(proc: int, k: int, model_name: str, batch: int, warmup: int,
                    window_s: float, barrier, queue) -> None:
    torch.set_num_threads(1)
    model = make_model(model_name)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = synthetic_batch(model_name, batch, seed=proc)
    for _ in range(max(1, warmup)):
        timed_step(model, opt, x, y)
    barrier.wait()
    deadline = time.monotonic() + window_s       # barrier releases all k within microseconds
    rows, rep = [], 0
    while time.monotonic() < deadline:
        rows.append({"k": k, "proc": proc, "rep": rep, "step_s": sum(timed_step(model, opt, x, y))})
        rep += 1
    queue.put(rows)


def sharing_rows(plan: ProbePlan, k: int) -> list[dict]:
    """Step times of k single-thread processes running at once.

    A fork server with torch preloaded starts them in well under a second each
    (spawn would import torch k times) without inheriting this process's OpenMP pool.
    """
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "real.training.models", "calibrate.probes.compute_probe"])
    barrier, queue = ctx.Barrier(k), ctx.Queue()
    procs = [ctx.Process(target=_sharing_worker, daemon=True,
                         args=(i, k, plan.sharing_model, plan.sharing_batch, plan.warmup_steps,
                               plan.sharing_window_s, barrier, queue)) for i in range(k)]
    for p in procs:
        p.start()
    try:
        return _collect(procs, queue, plan.timeout_s, k)
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()


def _collect(procs, queue, timeout_s: float, k: int) -> list[dict]:
    """Rows from every worker; fail fast when one dies instead of waiting out the timeout."""
    import queue as queuemod
    rows, done, deadline = [], 0, time.monotonic() + timeout_s
    while done < len(procs):
        try:
            rows += queue.get(timeout=0.5)
            done += 1
        except queuemod.Empty:
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise CalibrationError(f"sharing probe: a worker of k={k} died "
                                       f"(exit code {dead[0]})") from None
            if time.monotonic() > deadline:
                raise CalibrationError(f"sharing probe with k={k} processes did not finish "
                                       f"within {timeout_s:.0f} s") from None
    return rows


# ---------------------------------------------------------------- parameter server

def server_rows(plan: ProbePlan, params: int) -> list[dict]:
    """Server cost on one thread: ``acc = g_1 + ... + g_m`` (m - 1 timed adds), then
    ``w -= lr * acc``."""
    torch.set_num_threads(1)
    w = torch.zeros(params)
    grads = [torch.full((params,), 1e-3) for _ in range(plan.server_grads)]
    acc = torch.zeros(params)
    rows = []
    for rep in range(-plan.warmup_steps, plan.server_repeats):
        acc.copy_(grads[0])
        t0 = time.perf_counter()
        for g in grads[1:]:
            acc.add_(g)                  # m - 1 additions: the reduction, gamma per byte
        t1 = time.perf_counter()
        w.add_(acc, alpha=-LR)           # the update itself
        t2 = time.perf_counter()
        if rep >= 0:
            rows.append({"params": params, "grads": plan.server_grads, "rep": rep,
                         "adds": plan.server_grads - 1, "sum_s": t1 - t0, "update_s": t2 - t1})
    return rows


def server_update_rows(plan: ProbePlan, name: str) -> list[dict]:
    """The real server's update on model ``name`` on one thread (``real.schemes.ps``'s
    ``server_update``, the function ``serve_sync`` and ``serve_async`` call, with the
    optimizer the run builds at its default momentum 0), one row per repetition and idle
    wait. Before each update the probe waits ``idle_s`` (``plan.server_idle_s``) as a
    waiting server does: in ``real.launch.dist.wait``'s sleeping polls (50 us doubling up
    to ``SLEEPING_WAITS``' 1 ms), so each row is the update after that long off the core
    (``idle_s`` 0: back to back). The waits take turns within a repetition."""
    import numpy as np

    from real.launch.dist import SLEEPING_WAITS, WAIT_SLEEP_ENV
    from real.schemes.ps import server_update
    from real.training.models import flat_params
    torch.set_num_threads(1)
    model = make_model(name)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    w = flat_params(model).numpy()
    grad = np.full(w.size, 1e-3, dtype=np.float32)
    poll_s = float(SLEEPING_WAITS[WAIT_SLEEP_ENV])
    rows = []
    for rep in range(-plan.warmup_steps, plan.server_repeats):
        for idle_s in plan.server_idle_s:
            idle(idle_s, poll_s)
            t0 = time.perf_counter()
            server_update(model, opt, grad, w)
            t1 = time.perf_counter()
            if rep >= 0:
                rows.append({"model": name, "params": int(w.size), "rep": rep,
                             "idle_s": idle_s, "update_s": t1 - t0})
    return rows


class _Until:
    """A request ``real.launch.dist.wait`` polls that completes at ``end`` (perf_counter)."""

    def __init__(self, end: float):
        self.end = end

    def Test(self) -> bool:  # noqa: N802 (MPI's name)
        return time.perf_counter() >= self.end


def idle(idle_s: float, poll_s: float) -> None:
    """``idle_s`` seconds spent as a waiting server spends them: ``real.launch.dist.wait``
    polling a request that completes then, sleeping between polls up to ``poll_s``."""
    from real.launch.dist import wait
    if idle_s > 0:
        wait(_Until(time.perf_counter() + idle_s), 60.0 + idle_s, "the idle wait", poll_s=poll_s)
