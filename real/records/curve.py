"""Test accuracy over training time in a real run: snapshots during training, scores after.

Where a run evaluates (``--eval-every N``): after the evaluating process's
step whenever N of its iterations have passed since the last point, at the
end of each of its epochs and after its last step; plus the initial weights
(time 0) and the final model (at the end of training). The simulator puts
its evaluation points at the same places (``simulator.model.schedule_log``).

What is evaluated is the model a user would get if training stopped there
(``EVALUATED``): the common weights of the synchronous schemes, the average
of the workers' weights for psgd, the holder's mix for async_avg, the
server's weights for the parameter servers, the shared model for hogwild.

During training the evaluating process only copies the weights (and notes
how long the copy took, which is taken out of the point's time); every
point is scored on the test set after training, outside the timed span, so
evaluation neither lengthens training nor lets other processes run ahead
while one evaluates. psgd's average of the workers' copies is formed after
training too (one allreduce per point); its time is the latest worker's.

With ``--target-accuracy A`` the evaluating process also scores its point at
the end of each of its epochs at once (that time too is taken out), and once
A is reached every process stops at its next chance (``CurveLog.stop``): the
schemes carry the decision on their own messages (a broadcast where all
ranks meet each epoch, a flag in the parameter server's and the holder's
replies, a shared event for hogwild's processes).

Imports: numpy, torch, real.training.models, real.training.step, contracts.curve.
"""
from __future__ import annotations

import copy
import time
from collections.abc import Callable

import numpy as np
import torch

from real import schemes
from contracts.curve import describe_time, time_to_target

EVALUATED = {"serial": "common weights", "gather_scatter": "common weights",
             "allreduce": "common weights", "ddp": "common weights",
             "mpi_allreduce": "common weights", "ps_sync": "server's weights",
             "ps_async": "server's weights", "psgd": "average of the workers' weights",
             "async_avg": "holder's mix", "hogwild": "shared model"}


class CurveLog:
    """The evaluation points one process takes: (step, epoch, time, weights copy)."""

    def __init__(self, eval_every: int, per_epoch: int, total: int,
                 weights: Callable[[], torch.Tensor] | None, target: float | None = None,
                 score: Callable[[torch.Tensor], float] | None = None):
        self.eval_every, self.per_epoch, self.total = eval_every, max(1, per_epoch), total
        self.weights = weights          # None: this process does not evaluate
        self.points: list[dict] = []
        self.paused_s = 0.0
        self.target, self.score = target, score   # score(weights) -> test accuracy
        self.stop = False               # the target is reached: training ends

    def reached(self, weights: torch.Tensor | None = None) -> bool:
        """At an epoch end, with a target: score the latest point (or ``weights``) now.
        Sets ``stop`` once the target is reached; False without a target."""
        if self.target is None or self.score is None or (weights is None and not self.points):
            return False
        t0 = time.monotonic()
        accuracy = self.score(self.points[-1]["weights"] if weights is None else weights)
        self.paused_s += time.monotonic() - t0
        self.stop = self.stop or accuracy >= self.target
        return self.stop

    def agree(self, ctx, weights: torch.Tensor | None = None) -> bool:
        """Where every rank meets at each epoch end: rank 0 decides (scoring ``weights`` or
        its latest point), every rank learns it. No message without a target."""
        if self.target is None:
            return False
        t0 = time.monotonic()
        decision = self.reached(weights) if ctx.launch.is_root else None
        self.stop = bool(ctx.comm.bcast_obj(decision))
        if not ctx.launch.is_root:
            self.paused_s += time.monotonic() - t0
        return self.stop

    def after_step(self, steps_done: int, per_epoch: int | None = None,
                   total: int | None = None, every: int | None = None) -> None:
        """Copy the weights if ``steps_done`` is an evaluation point."""
        if self.weights is None:
            return
        per_epoch, total = per_epoch or self.per_epoch, total or self.total
        every = self.eval_every if every is None else every
        if not ((every and steps_done % every == 0) or steps_done % per_epoch == 0
                or steps_done == total):
            return
        t0 = time.monotonic()
        w = self.weights()
        w = w.detach().clone() if isinstance(w, torch.Tensor) else torch.from_numpy(np.copy(w))
        self.points.append({"step": steps_done, "epoch": steps_done / per_epoch,
                            "t": t0 - self.paused_s, "weights": w})
        self.paused_s += time.monotonic() - t0


def scored_curve(ctx, data, t_start: float, t_end: float, initial: torch.Tensor | None) -> dict:
    """Every rank calls this after training; rank 0 gets the results fields, others {}.

    ``t_start`` / ``t_end`` bound the training span on the evaluating process's clock.
    """
    points = ctx.curve.points
    if schemes.SCHEMES[ctx.cfg.algorithm].every_worker_evaluates:
        points = _average_over_workers(ctx, points)
    if not ctx.launch.is_root:
        return {}
    if ctx.heartbeat is not None:
        # rank 0 alone from here: scoring waits for no peer, and a long run's points take
        # longer than --timeout, which the recorder would take for a hang
        ctx.heartbeat.phase("eval")
    from real.training.models import load_flat_params
    from real.training.step import evaluate
    scratch = copy.deepcopy(ctx.model)
    test_x, test_y = torch.from_numpy(data.test_x), torch.from_numpy(data.test_y)
    t0 = time.monotonic()
    curve = []
    for p in [{"step": 0, "epoch": 0.0, "t": t_start, "weights": initial}] + points:
        load_flat_params(scratch, torch.as_tensor(p["weights"]))
        loss, acc = evaluate(scratch, test_x, test_y)
        curve.append({"step": p["step"], "epoch": p["epoch"],
                      "train_s": max(0.0, p["t"] - t_start), "test_loss": loss,
                      "test_accuracy": acc})
    loss, acc = evaluate(ctx.model, test_x, test_y)     # the final model, at the end
    # (on this process's clock; psgd's points take the latest worker's, which can be later
    # when this one waited for it at an epoch end: the end is never before the last point)
    end_s = max(t_end - t_start - ctx.curve.paused_s, curve[-1]["train_s"])
    curve.append({"step": curve[-1]["step"], "epoch": curve[-1]["epoch"],
                  "train_s": end_s, "test_loss": loss, "test_accuracy": acc})
    fields = {"curve": curve, "curve_model": EVALUATED[ctx.cfg.algorithm],
              "eval_every": ctx.cfg.eval_every, "curve_eval_s": time.monotonic() - t0,
              "curve_snapshot_s": ctx.curve.paused_s}
    if ctx.cfg.target_accuracy is not None:
        fields["epochs_trained"] = curve[-1]["epoch"]
    return fields | target_fields(curve, ctx.cfg.target_accuracy, ctx.cfg.epochs)


def target_fields(curve: list[dict], target: float | None, epochs: float) -> dict:
    """``target_accuracy``, ``time_to_target_s`` (None when not reached) and a note."""
    if target is None:
        return {}
    t = time_to_target(curve, target)
    note = (f"reached {target:g} after {describe_time(t, epochs)} of training" if t is not None
            else describe_time(None, epochs))
    return {"target_accuracy": target, "time_to_target_s": t, "target_reached": t is not None,
            "target_note": note}


def scorer(model, data) -> Callable[[torch.Tensor], float]:
    """score(flat weights) -> test accuracy, on a copy of ``model`` (for ``--target-accuracy``)."""
    from real.training.models import load_flat_params
    from real.training.step import evaluate
    scratch = copy.deepcopy(model)
    test_x, test_y = torch.from_numpy(data.test_x), torch.from_numpy(data.test_y)

    def score(weights) -> float:
        load_flat_params(scratch, torch.as_tensor(weights))
        return evaluate(scratch, test_x, test_y)[1]
    return score


def agreed_stop(ctx, weights: torch.Tensor | None = None) -> bool:
    """``CurveLog.agree`` for a context that may have no curve log."""
    return ctx.curve is not None and ctx.curve.agree(ctx, weights)


def psgd_agreed_stop(ctx) -> bool:
    """psgd's epoch end with a target: the workers' mean is scored (one allreduce)."""
    if ctx.curve is None or ctx.cfg.target_accuracy is None:
        return False
    t0 = time.monotonic()
    from real.training.models import flat_params
    flat = flat_params(ctx.model).numpy().copy()
    ctx.comm.allreduce_sum_(flat)
    flat /= ctx.comm.size
    ctx.curve.paused_s += time.monotonic() - t0
    return agreed_stop(ctx, torch.from_numpy(flat))


def _average_over_workers(ctx, points: list[dict]) -> list[dict]:
    """psgd: the mean of the workers' copies at each point, at the latest worker's time."""
    times = ctx.comm.allgather_obj([p["t"] for p in points])
    out = []
    for i, p in enumerate(points):
        flat = p["weights"].numpy().copy()
        ctx.comm.allreduce_sum_(flat)
        flat /= ctx.comm.size
        out.append({**p, "t": max(ts[i] for ts in times), "weights": torch.from_numpy(flat)})
    return out
