"""A worker's compute as sleeps: what ``ctx.compute`` is in a phantom run.

``PhantomCompute`` has the interface of ``real.training.step.RealCompute``: the
schemes call ``forward_backward`` (the stand-in model's layer chain, see
``real.phantom.model``) and ``update`` (a sleep of the workload's update
time). Everything else a scheme does stays real: its messages, the copies
into and out of flat buffers, the division by P, the server's update, the
averaging and mixing of weights.

How far behind its plan a rank is when its compute hands over to the
scheme's communication is the one part of the sleeps' lateness that can
reach a step: every sleep's lateness is taken off the next sleep, so within
the chain it cancels, but what is still owed when backward ends (the
sleeper's debt: the last sleep's lateness and the stand-in's work since) is
paid back only after the communication, in the update. A synchronising call
waits for the latest rank, so a step is stretched by at most the largest of
the ranks' debts at that moment. ``forward_backward`` notes it every step
(``behind_s``); ``summary`` hands it to the record, and ``real.records.testbed``
judges the sum over the steps against the run's time.

Imports: real.phantom (model, plan, sleep).
"""
from __future__ import annotations

from .model import PhantomModel
from .plan import PhantomPlan
from .sleep import Sleeper


class PhantomCompute:
    mode = "phantom"

    def __init__(self, plan: PhantomPlan, sleeper: Sleeper | None = None):
        self.plan = plan
        self.sleeper = sleeper or Sleeper()
        self.stand_in: PhantomModel | None = None
        self.behind_s: list[float] = []     # the debt as each step's backward ended

    def model(self) -> PhantomModel:
        """The stand-in model, sleeping through this compute's sleeper."""
        self.stand_in = PhantomModel(self.plan, self.sleeper)
        return self.stand_in

    def forward_backward(self, model, x, y, scale: float = 1.0) -> None:
        """Forward and backward of the stand-in (``model`` may be DDP's wrapper of it);
        no loss: nothing is computed."""
        model.zero_grad(set_to_none=True)
        model(x).backward()
        # the lag before the tare is charged: the stand-in's own work stands for work the
        # real layer's measured time holds, not for lateness
        self.behind_s.append(self.sleeper.debt_s)
        self.sleeper.charge(self.stand_in.tare_tail_s if self.stand_in else 0.0)

    def summary(self) -> dict | None:
        """The sleeper's summary (``Sleeper.summary``) and how far behind its plan this rank
        was as each step's backward ended (``behind_s``, one per step, in s); None when
        nothing slept."""
        s = self.sleeper.summary()
        if s is None:
            return None
        return {**s, "behind_s": [round(b, 7) for b in self.behind_s]}

    def update(self, optimizer, batch: int) -> None:
        self.sleeper.sleep(self.plan.update_s * self.plan.factor(batch))

    def step(self, model, optimizer, x, y) -> None:
        self.forward_backward(model, x, y)
        self.update(optimizer, len(y))
