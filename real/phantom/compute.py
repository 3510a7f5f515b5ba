"""A worker's compute as sleeps: what ``ctx.compute`` is in a phantom run.

``PhantomCompute`` has the interface of ``real.step.RealCompute``: the
schemes call ``forward_backward`` (the stand-in model's layer chain, see
``real.phantom.model``) and ``update`` (a sleep of the workload's update
time). Everything else a scheme does stays real: its messages, the copies
into and out of flat buffers, the division by P, the server's update, the
averaging and mixing of weights.

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

    def model(self) -> PhantomModel:
        """The stand-in model, sleeping through this compute's sleeper."""
        self.stand_in = PhantomModel(self.plan, self.sleeper)
        return self.stand_in

    def forward_backward(self, model, x, y, scale: float = 1.0) -> None:
        """Forward and backward of the stand-in (``model`` may be DDP's wrapper of it);
        no loss: nothing is computed."""
        model.zero_grad(set_to_none=True)
        model(x).backward()
        self.sleeper.charge(self.stand_in.tare_tail_s if self.stand_in else 0.0)

    def update(self, optimizer, batch: int) -> None:
        self.sleeper.sleep(self.plan.update_s * self.plan.factor(batch))

    def step(self, model, optimizer, x, y) -> None:
        self.forward_backward(model, x, y)
        self.update(optimizer, len(y))
