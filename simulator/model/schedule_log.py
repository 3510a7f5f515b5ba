"""The update schedule as a simulated run makes it (the events of ``contracts.schedule``).

The scheme loops report through their ``Recorder``: every update (which
worker, which batch, the weights version read and the one it was applied
to), every averaging and mixing of weights, and the evaluation points, which
fall where ``real.train`` evaluates: after the evaluating worker's step when
``eval_every`` of its iterations have passed since the last point, at the
end of each of its epochs, and after its last step. Nothing is recorded
unless the run asked for a schedule, so predictions cost what they did.

Imports: the standard library only.
"""
from __future__ import annotations


class SharedWeights:
    """A version counter of weights that several simulated processes change (hogwild)."""

    def __init__(self):
        self.version = 0


class ScheduleLog:
    def __init__(self, iterations_per_epoch: int, iterations: int, eval_every: int,
                 workers: int):
        self.per_epoch = iterations_per_epoch
        self.iterations = iterations
        self.eval_every = eval_every
        self.workers = workers
        self.events: list[dict] = []
        self._averaged: set = set()
        self._arrived: dict[int, int] = {}

    def update(self, t: float, worker: int, i: int, read: int, applied: int,
               shard: int | None = None) -> None:
        """Iteration ``i`` of ``worker``: its batch ``i mod per_epoch`` of epoch
        ``i div per_epoch``."""
        epoch, batch = divmod(i, self.per_epoch)
        self.events.append({"t": t, "kind": "update", "worker": worker,
                            "shard": worker if shard is None else shard, "epoch": epoch,
                            "batch": batch, "read": read, "applied": applied})

    def average(self, t: float, workers: tuple[int, ...], key) -> None:
        """Once per averaging round ``key``: the first participant out of the collective
        reports it (every update before it has happened, none after it yet)."""
        if key in self._averaged:
            return
        self._averaged.add(key)
        self.events.append({"t": t, "kind": "average", "workers": list(workers)})

    def mix(self, t: float, worker: int, weight: float, reply: bool) -> None:
        self.events.append({"t": t, "kind": "mix", "worker": worker, "weight": weight,
                            "reply": reply})

    def after_step(self, t: float, worker: int, steps_done: int, per_epoch: int | None = None,
                   total: int | None = None, every: int | None = None) -> None:
        """An evaluation point if the evaluating worker's ``steps_done`` calls for one.

        A parameter server counts its updates: ``per_epoch``, ``total`` and
        ``every`` are then in updates (P times a worker's)."""
        per_epoch = per_epoch or self.per_epoch
        total = total or self.iterations
        every = self.eval_every if every is None else every
        if (every and steps_done % every == 0) or steps_done % per_epoch == 0 \
                or steps_done == total:
            self.events.append({"t": t, "kind": "eval", "worker": worker, "step": steps_done,
                                "epoch": steps_done / per_epoch})

    def synchronous_step(self, t: float, i: int) -> None:
        """One worker's part of synchronous step ``i`` is applied; after the last part,
        the step's evaluation point (if it has one)."""
        self._arrived[i] = self._arrived.get(i, 0) + 1
        if self._arrived[i] == self.workers:
            del self._arrived[i]
            self.after_step(t, 0, i + 1)

    def server_step(self, t: float, updates_done: int) -> None:
        """Evaluation points of a parameter server, whose steps are single pushes."""
        p = self.workers
        self.after_step(t, 0, updates_done, self.per_epoch * p, self.iterations * p,
                        self.eval_every * p)

    def sorted_events(self) -> list[dict]:
        """In time order; events at the same time keep the order they happened in."""
        return sorted(self.events, key=lambda e: e["t"])
