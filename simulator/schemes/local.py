"""Schemes where workers mostly train alone: serial, psgd, async_avg, hogwild.

* ``serial``: one process, plain mini-batch SGD.
* ``psgd``: each rank trains on its 1/P shard; weights are averaged by an
  allreduce of ``param_bytes`` every ``avg_every`` steps and once at the end
  (``avg_every = 0``: only at the end, the one-shot average of seed 000).
* ``async_avg``: every ``avg_every`` steps (10 when 0, as the real scheme) a rank sends its
  weights to the holder (an extra rank on rank 0's host), which mixes them in
  (one update's service time) and sends the mix back; ranks never wait for
  each other, only for the holder's queue. Staleness = mixes by others since
  the rank last read the holder's weights.
* ``hogwild``: P processes on one host update one model in shared memory
  without locks: compute only, plus a per-update memory cost; the cores are
  shared, which is what limits the speedup.
"""
from __future__ import annotations

from ..plan import Setup, train_step


def start_serial(env, setup: Setup):
    for w in setup.workers:
        env.process(_alone(env, w, setup.recorder, setup.plan.iterations, 0.0))


def start_hogwild(env, setup: Setup):
    for w in setup.workers:
        env.process(_alone(env, w, setup.recorder, setup.plan.iterations,
                           setup.plan.hogwild_update_s))


def _alone(env, worker, recorder, iterations, extra_s):
    for i in range(iterations):
        yield from train_step(env, worker, recorder, i, extra_s)


def start_psgd(env, setup: Setup):
    for w in setup.workers:
        env.process(psgd_rank(env, w, setup.comm, setup.recorder, setup.plan))


def psgd_rank(env, worker, comm, recorder, plan):
    k = plan.avg_every
    for i in range(plan.iterations):
        yield from train_step(env, worker, recorder, i)
        if k and (i + 1) % k == 0 and i + 1 < plan.iterations:
            yield from comm.allreduce(worker.rank, plan.worker_ranks, plan.param_bytes,
                                      plan.algorithm)
    yield from comm.allreduce(worker.rank, plan.worker_ranks, plan.param_bytes, plan.algorithm)


def start_async_avg(env, setup: Setup):
    for w in setup.workers:
        env.process(async_avg_rank(env, w, setup.comm, setup.recorder, setup.plan, setup.server))


ASYNC_AVG_DEFAULT_K = 10      # real/schemes/async_avg.py: DEFAULT_K when --average-every is 0


def async_avg_rank(env, worker, comm, recorder, plan, holder):
    k = plan.avg_every or ASYNC_AVG_DEFAULT_K
    me, read_version = worker.rank, 0
    for i in range(plan.iterations):
        yield from train_step(env, worker, recorder, i)
        if (i + 1) % k and i + 1 < plan.iterations:
            continue
        t0 = env.now
        yield comm.transfer(me, holder.rank, plan.param_bytes)
        t1 = env.now
        mixed_on = yield from holder.apply(recorder)
        t2 = env.now
        yield comm.transfer(holder.rank, me, plan.param_bytes)
        recorder.add(me, "comm", t0, t1, "send weights")
        recorder.add(me, "wait", t1, t2, "holder")
        recorder.add(me, "comm", t2, env.now, "receive mix")
        recorder.add_staleness(mixed_on - read_version)
        read_version = mixed_on + 1
