"""Gradient-synchronous schemes built on collectives: every rank meets every iteration.

* ``gather_scatter`` (gloo): rank 0 gathers the gradients, adds them up
  (``gamma * (P-1) * grad_bytes``) and scatters the mean back.

The schemes that average one flat vector copy it on the host around the library's call,
inside the run's communication row (``real.schemes``): the gradients into a new tensor
(``flat_grads``, ``Plan.new_copy_s``: above 32 MiB new memory, its pages faulted in), the
mean back into ``.grad`` (``load_flat_grads``, ``Plan.kept_copy_s``); mpi_allreduce also
divides the sum in place (``buf /= P``), gather_scatter's root stacks the P parts into one
new tensor, sums them into another and divides into a third (``torch.stack(parts).sum(0)
/ size``). Each is charged in the rank's communication (``_copy``); the per-tensor
schemes (allreduce, ddp) hand the gradients to the library where they lie.
* ``allreduce`` (gloo or nccl): one allreduce per parameter tensor, as the loop
  over ``model.parameters()`` in ``real/schemes/allreduce.py`` (``tensor_param_counts``).
* ``mpi_allreduce`` (MPI): one allreduce of the flat gradient buffer with the
  configured algorithm (``auto`` picks like MPICH).
* ``ddp`` (gloo or nccl): gradients in DDP's buckets (``workload.ddp_buckets``:
  1 MiB, then 25 MiB, in gradient-ready order; the first iteration one bucket of
  all); a bucket's allreduce starts as soon as the backward of its tensors is
  done and the previous bucket's allreduce is over, overlapping the rest of the
  backward. The step is split as ``(1 - backward_fraction)``
  forward and update, then the backward in bucket-sized pieces (each layer's
  share of the backward from the workload: measured, by FLOPs or by
  parameters). Building ``DistributedDataParallel`` broadcasts the weights from
  rank 0 first (``torch/nn/parallel/distributed.py``, ``_sync_module_states``:
  ``_broadcast_coalesced`` in buckets of 250 MB; gloo/broadcast.cc's binomial tree):
  the runs build it inside their training time (``real/schemes/ddp.py``).

Gradients travel as ``plan.grad_bytes_per_param`` bytes per element (2 with
fp16 compression) with the library's allreduce (``plan.gradient_algorithm``).

Imports: model.schemes.base.
"""
from __future__ import annotations

from simulator.model.schemes.base import Setup, train_step


def _start(env, setup: Setup, rank_loop):
    for w in setup.workers:
        env.process(rank_loop(env, w, setup.comm, setup.recorder, setup.plan))


def start_gather_scatter(env, setup):
    _start(env, setup, gather_scatter_rank)


def start_allreduce(env, setup):
    _start(env, setup, allreduce_rank)


def start_mpi_allreduce(env, setup):
    _start(env, setup, mpi_allreduce_rank)


def start_ddp(env, setup):
    _start(env, setup, ddp_rank)


def gather_scatter_rank(env, worker, comm, recorder, plan):
    ranks, n = plan.worker_ranks, plan.grad_bytes
    p = len(ranks)
    for i in range(plan.iterations):
        yield from train_step(env, worker, recorder, i)
        yield from _copy(env, worker, recorder, plan.new_copy_s, "flat_grads")
        yield from comm.gather(worker.rank, ranks, n, root=0)
        if worker.rank == ranks[0]:
            t0 = env.now
            yield comm.reduce((p - 1) * n)
            yield env.timeout((p + 2) * plan.new_copy_s)   # stack, sum, / size: new tensors
            recorder.add(worker.rank, "compute", t0, env.now, "average")
        yield from comm.scatter(worker.rank, ranks, n, root=0)
        yield from _copy(env, worker, recorder, plan.kept_copy_s, "load_flat_grads")
        _stepped(env, worker.rank, recorder, i)


def _copy(env, worker, recorder, copy_s: float, what: str):
    """The rank's own copy of its flat vector, in its communication row as the runs log it
    (nothing where the host's copies are not measured). Its time, like the collective's,
    is not shared with other jobs of the rank's cores, so the fast engine's segments
    (``engine.fast``) price it alike."""
    if copy_s > 0:
        t0 = env.now
        yield env.timeout(copy_s)
        recorder.add(worker.rank, "comm", t0, env.now, what)


def allreduce_rank(env, worker, comm, recorder, plan):
    for i in range(plan.iterations):
        yield from train_step(env, worker, recorder, i)
        for tensor_bytes in plan.tensor_bytes:
            yield from comm.allreduce(worker.rank, plan.worker_ranks, tensor_bytes,
                                      plan.gradient_algorithm)
        _stepped(env, worker.rank, recorder, i)


def mpi_allreduce_rank(env, worker, comm, recorder, plan):
    for i in range(plan.iterations):
        yield from train_step(env, worker, recorder, i)
        yield from _copy(env, worker, recorder, plan.new_copy_s, "flat_grads")
        yield from comm.allreduce(worker.rank, plan.worker_ranks, plan.grad_bytes,
                                  plan.algorithm)
        yield from _copy(env, worker, recorder, 2 * plan.kept_copy_s, "/= P, load_flat_grads")
        _stepped(env, worker.rank, recorder, i)


def ddp_rank(env, worker, comm, recorder, plan):
    me, bf, ranks = worker.rank, plan.backward_fraction, plan.worker_ranks
    interference = worker.interference
    yield from comm.bcast(me, ranks, plan.param_bytes, root=ranks[0])   # DDP is built
    for i in range(plan.iterations):
        *early, (last_bytes, last_share) = (plan.first_buckets or plan.buckets) if i == 0 \
            else plan.buckets
        step_s = worker.step_s[i]
        t0 = env.now
        work_s = step_s * (1 - bf)           # forward (and update) run before the first bucket
        pending = None
        for bucket_bytes, share in early:
            yield worker.compute(work_s + step_s * bf * share)
            work_s = 0.0
            pending = env.process(_bucket(comm, me, ranks, bucket_bytes, pending,
                                          plan.gradient_algorithm, interference))
        yield worker.compute(work_s + step_s * bf * last_share)
        recorder.add(me, "compute", t0, env.now, "step")
        recorder.step_done(me, env.now)
        if pending is not None:              # the last bucket follows the others
            yield pending
        yield from comm.allreduce(me, ranks, last_bytes, plan.gradient_algorithm)
        _stepped(env, me, recorder, i)


def _stepped(env, rank, recorder, i):
    """Step ``i`` applied on every worker: the mean gradient of its global batch, once.
    Its evaluation point follows the last worker's part of it."""
    recorder.update(env.now, rank, i, i, i)
    recorder.synchronous_step(env.now, i)


def _bucket(comm, rank, ranks, n_bytes, previous, algorithm="ring", interference=None):
    """One bucket's allreduce, after the previous bucket's (one communication stream);
    in flight on the rank's device from its launch to its end (``interference``)."""
    if previous is not None and not previous.processed:
        yield previous
    if interference is not None:
        interference.comm_started(rank)
    yield from comm.allreduce(rank, ranks, n_bytes, algorithm)
    if interference is not None:
        interference.comm_ended(rank)
