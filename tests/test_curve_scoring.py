"""Scoring a run's curve after training: rank 0 scores alone, outside the hang watch.

A long run has many evaluation points; scoring them all can take longer than
``--timeout``. The recorder (``real.launch.supervise``) watches the ``sync`` phase for a
rank that waits for a peer too long, so rank 0 must leave that phase before it
scores, or a 10-epoch run is stopped as hung after its last iteration."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from real.records import curve


class Beats:
    def __init__(self, log):
        self.log = log

    def phase(self, name):
        self.log.append(("phase", name))


def test_rank_0_leaves_the_watched_phase_before_it_scores(monkeypatch):
    log: list = []

    def evaluate(model, x, y):
        log.append(("evaluate", None))
        return 0.5, 0.9
    monkeypatch.setattr("real.training.step.evaluate", evaluate)
    model = torch.nn.Linear(4, 3)
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    points = [{"step": s, "epoch": s / 10, "t": 1.0 + s, "weights": weights} for s in (5, 10)]
    ctx = SimpleNamespace(
        curve=SimpleNamespace(points=points, paused_s=0.0),
        cfg=SimpleNamespace(algorithm="mpi_allreduce", eval_every=5, target_accuracy=None,
                            epochs=1),
        launch=SimpleNamespace(is_root=True), model=model, heartbeat=Beats(log))
    data = SimpleNamespace(test_x=np.zeros((6, 4), np.float32), test_y=np.zeros(6, np.int64))
    fields = curve.scored_curve(ctx, data, t_start=1.0, t_end=12.0, initial=weights)
    assert log[0] == ("phase", "eval")
    assert [kind for kind, _ in log[1:]] == ["evaluate"] * 4     # start, 2 points, final
    assert [p["step"] for p in fields["curve"]] == [0, 5, 10, 10]


def test_other_ranks_leave_scoring_to_rank_0(monkeypatch):
    log: list = []
    ctx = SimpleNamespace(curve=SimpleNamespace(points=[], paused_s=0.0),
                          cfg=SimpleNamespace(algorithm="mpi_allreduce"),
                          launch=SimpleNamespace(is_root=False), heartbeat=Beats(log))
    assert curve.scored_curve(ctx, None, 0.0, 1.0, None) == {}
    assert log == []
