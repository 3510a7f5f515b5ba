"""Schemes where workers mostly train alone: serial, psgd, hogwild (and async_avg, in ``holder``).

* ``serial``: one process, plain mini-batch SGD.
* ``psgd``: each rank trains on its 1/P shard; weights are averaged by an
  allreduce of ``param_bytes`` every ``avg_every`` steps and once at the end
  (``avg_every = 0``: only at the end, the one-shot average of seed 000): an
  ``MPI_Iallreduce`` waited in ``real.launch.dist.wait`` (``Comm.iallreduce``: where
  the ranks sleep between polls, its rounds advance at their polls).
* ``async_avg``: see ``holder`` (the weight holder lives in rank 0).
* ``hogwild``: P processes on one host update one model in shared memory
  without locks: compute only, plus a per-update memory cost; the cores are
  shared, which is what limits the speedup.

Imports: model.schemes.base.
"""
from __future__ import annotations

from simulator.model.schedule_log import SharedWeights
from simulator.model.schemes.base import Setup, train_step


def start_serial(env, setup: Setup):
    shared = SharedWeights()
    for w in setup.workers:
        env.process(_alone(env, w, setup.recorder, setup.plan.iterations, 0.0, shared))


def start_hogwild(env, setup: Setup):
    shared = SharedWeights()
    for w in setup.workers:
        env.process(_alone(env, w, setup.recorder, setup.plan.iterations,
                           setup.plan.hogwild_update_s, shared))


def _alone(env, worker, recorder, iterations, extra_s, shared: SharedWeights):
    """Steps on one shared model: each reads the weights as it starts and writes at its end."""
    for i in range(iterations):
        read = shared.version
        yield from train_step(env, worker, recorder, i, extra_s)
        recorder.update(env.now, worker.rank, i, read, shared.version)
        shared.version += 1
        if worker.rank == 0:
            recorder.after_step(env.now, 0, i + 1)


def start_psgd(env, setup: Setup):
    for w in setup.workers:
        env.process(psgd_rank(env, w, setup.comm, setup.recorder, setup.plan))


def psgd_rank(env, worker, comm, recorder, plan):
    k, me = plan.avg_every, worker.rank
    for i in range(plan.iterations):
        yield from train_step(env, worker, recorder, i)
        recorder.update(env.now, me, i, i, i)
        if k and (i + 1) % k == 0 and i + 1 < plan.iterations:
            yield from comm.iallreduce(me, plan.worker_ranks, plan.param_bytes, plan.algorithm)
            recorder.average(env.now, plan.worker_ranks, i)
        recorder.after_step(env.now, me, i + 1)     # every replica: the point is their mean
    yield from comm.iallreduce(me, plan.worker_ranks, plan.param_bytes, plan.algorithm)
    recorder.average(env.now, plan.worker_ranks, "final")
