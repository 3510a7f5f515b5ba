"""What a replay holds while it walks a schedule: weights, optimizer state, curve points.

Shared weights (``weights: shared`` in the schedule) are one flat vector and
its version count. An update computed on an older version (staleness) reads
a copy of that version; a copy is made only when the weights are about to
move past a version that some later update still reads, and dropped once its
last reader is applied, so at most one version per worker in flight is held.
Updates with the same ``applied`` version are one synchronous step: their
gradients are averaged (weighted by samples, as the real schemes' scaling
does) and applied once.

Replicas (``weights: replicas``) are one vector per worker; ``average`` and
``mix`` events move weights between them and the holder.

Every worker of ``real.train`` seeds torch's generator alike and builds the
model, so each draws its dropout masks from its own copy of the same stream.
The replay keeps one generator state per worker and runs each worker's
batch with it (the parts of a synchronous step one by one), so the masks are
the ones the real workers draw.

SGD is ``torch.optim.SGD``'s rule on flat vectors: ``buf = m * buf + g``
(``buf = g`` the first time), ``w -= lr * buf`` (``buf = g`` when m = 0);
the learning rate drops by ``lr_decay`` per epoch of the optimizer that
applies the update (a parameter server's epoch counts its updates).

Imports: torch, real.training.models, real.schemes, real.training.step.
"""
from __future__ import annotations

import time
from collections import Counter

import torch

from real.training.models import flat_params, load_flat_params
from real.schemes import SCHEMES
from real.training.step import evaluate, flat_grads, forward_backward


class ReplayState:
    def __init__(self, header, model, data, order, settings):
        self.h, self.model, self.order = header, model, order
        self.train_x, self.train_y = torch.from_numpy(data.train_x), torch.from_numpy(data.train_y)
        self.test_x, self.test_y = torch.from_numpy(data.test_x), torch.from_numpy(data.test_y)
        self.lr0, self.momentum, self.decay = settings.lr, settings.momentum, settings.lr_decay
        self.shared = header.weights == "shared"
        w0 = flat_params(model)
        self.w, self.version = w0.clone(), 0
        self.snapshots: dict[int, torch.Tensor] = {}
        self.stale_reads: Counter = Counter()
        self.replicas = [] if self.shared else [w0.clone() for _ in range(header.workers)]
        self.holder = w0.clone() if header.evaluate == "holder" else None
        self.buffers: dict = {}
        start = torch.get_rng_state()          # after the model's initialisation, as every rank
        self.rng = [start.clone() for _ in range(header.workers)]
        self.group: list[dict] = []
        self.pending: dict[int, dict] = {}      # psgd points: step -> {worker: weights}, time
        self.points: list[dict] = []
        self.losses: list[float] = []
        self.updates = self.forward_passes = 0
        self.peak_versions, self.eval_s = 1, 0.0

    # --- the walk --------------------------------------------------------------

    def run(self, events: list[dict]) -> None:
        self.stale_reads = Counter(e["read"] for e in events
                                   if e["kind"] == "update" and e["read"] < e["applied"])
        self._point(0.0, 0, 0.0, self._model_weights())
        handlers = {"update": self._update, "average": self._average, "mix": self._mix,
                    "eval": self._eval}
        for e in events:
            if self.group and (e["kind"] != "update" or e["applied"] != self.group[0]["applied"]):
                self._step_shared()
            handlers[e["kind"]](e)
        if self.group:
            self._step_shared()
        last = max((p["step"] for p in self.points), default=0)
        self._point(self.h.time_s, last, self.h.iterations_per_worker / self.h.iterations_per_epoch,
                    self._model_weights())

    def _update(self, e: dict) -> None:
        if self.shared:
            self.group.append(e)
            return
        w = self.replicas[e["worker"]]
        grad, loss = self._gradient(w, e)
        self._apply(w, grad, e["worker"], e["epoch"])
        self.losses.append(loss)
        self.updates += 1

    def _step_shared(self) -> None:
        """Apply the pending synchronous step (or single asynchronous update)."""
        group, self.group = self.group, []
        parts = []                                  # (samples, mean gradient, mean loss)
        for e in sorted(group, key=lambda e: e["shard"]):
            weights = self.w if e["read"] == self.version else self.snapshots[e["read"]]
            g, l_mean = self._gradient(weights, e)
            parts.append((len(self._indices(e)), g, l_mean))
        total = sum(n for n, _, _ in parts)
        grad = parts[0][1] if len(parts) == 1 else sum(g * (n / total) for n, g, _ in parts)
        loss = sum(l_mean * n for n, _, l_mean in parts) / total
        if self.stale_reads[self.version] > 0:      # a later update still reads this version
            self.snapshots[self.version] = self.w.clone()
            self.peak_versions = max(self.peak_versions, len(self.snapshots) + 1)
        first = group[0]
        scheme = SCHEMES[self.h.scheme]
        key = first["worker"] if scheme.optimizer_per_worker else "shared"
        epoch = (first["applied"] // self.h.updates_per_epoch if scheme.epochs_by_updates
                 else first["epoch"])
        self._apply(self.w, grad, key, epoch)
        self.version += 1
        for e in group:
            if e["read"] < e["applied"]:
                self.stale_reads[e["read"]] -= 1
                if self.stale_reads[e["read"]] == 0:
                    self.snapshots.pop(e["read"], None)
        self.losses.append(loss)
        self.updates += len(group)

    def _average(self, e: dict) -> None:
        mean = torch.stack([self.replicas[w] for w in e["workers"]]).sum(0) / len(e["workers"])
        for w in e["workers"]:
            self.replicas[w].copy_(mean)

    def _mix(self, e: dict) -> None:
        self.holder.mul_(1.0 - e["weight"]).add_(self.replicas[e["worker"]], alpha=e["weight"])
        if e["reply"]:
            self.replicas[e["worker"]].copy_(self.holder)

    def _eval(self, e: dict) -> None:
        if self.h.evaluate != "average":
            self._point(e["t"], e["step"], e["epoch"], self._model_weights())
            return
        at = self.pending.setdefault(e["step"], {"replicas": {}, "t": 0.0, "epoch": e["epoch"]})
        at["replicas"][e["worker"]] = self.replicas[e["worker"]].clone()
        at["t"] = max(at["t"], e["t"])
        if len(at["replicas"]) == self.h.workers:
            del self.pending[e["step"]]
            mean = torch.stack(list(at["replicas"].values())).mean(0)
            self._point(at["t"], e["step"], at["epoch"], mean)

    # --- SGD and evaluation ---------------------------------------------------------

    def _indices(self, e: dict) -> torch.Tensor:
        return self.order.indices(e["shard"], e["epoch"], e["batch"])

    def _gradient(self, weights: torch.Tensor, e: dict) -> tuple[torch.Tensor, float]:
        """Mean gradient and loss of update ``e``'s batch at ``weights``, drawing the
        worker's own dropout masks."""
        idx = self._indices(e)
        load_flat_params(self.model, weights)
        torch.set_rng_state(self.rng[e["worker"]])
        loss = forward_backward(self.model, self.train_x[idx], self.train_y[idx])
        self.rng[e["worker"]] = torch.get_rng_state()
        self.forward_passes += 1
        return flat_grads(self.model), loss

    def _apply(self, w: torch.Tensor, grad: torch.Tensor, key, epoch: int) -> None:
        lr = self.lr0 * (1.0 - self.decay) ** epoch
        if self.momentum:
            buf = self.buffers.get(key)
            if buf is None:
                buf = self.buffers[key] = grad.clone()
            else:
                buf.mul_(self.momentum).add_(grad)
            grad = buf
        w.add_(grad, alpha=-lr)

    def _model_weights(self) -> torch.Tensor:
        """The model a user would get now: shared weights, the replicas' mean, the holder's."""
        if self.shared:
            return self.w
        if self.holder is not None:
            return self.holder
        return torch.stack(self.replicas).mean(0)

    def _point(self, t: float, step: int, epoch: float, weights: torch.Tensor) -> None:
        t0 = time.monotonic()
        load_flat_params(self.model, weights)
        loss, acc = evaluate(self.model, self.test_x, self.test_y)
        self.eval_s += time.monotonic() - t0
        self.points.append({"step": step, "epoch": epoch, "train_s": t, "test_loss": loss,
                            "test_accuracy": acc})
