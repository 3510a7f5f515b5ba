"""Parameter server: P workers (ranks 1..P) and one server (rank 0), MPI point to point.

* ``ps_sync``: each iteration the server sends w to the workers one after the
  other (``real/schemes/ps.py`` completes each worker's Isend before the
  next: the messages are above MPICH's eager limit, so each needs its
  receiver), every worker computes its gradient as soon as its w is in and
  pushes it (a gather to the server: an incast on the server's port), the
  server adds the P gradients (``gamma * P * grad_bytes``) and applies one
  update. Where every worker is on another host than the server, a push does not
  wait for the server's receive (MPICH's ofi netmod hands it to libfabric whole and
  the tcp provider saves it unexpected, as for ``ps_async`` below): each crosses the
  server's ingress as soon as it is sent, while the server still sends w to the
  workers after it, and the server takes the pushes in the order they arrived, one
  ``Recv`` from ``ANY_SOURCE`` at a time, copying each out of libfabric's buffer and
  adding it before the next (``take_pushes``). A server that shares its host with
  workers gathers by rendezvous as before (CMA on one host). It sends w after the
  last update too (``serve_sync`` answers every push; a worker's last step ends
  with that answer): P (I + 1) messages of w over I iterations. Where the ranks
  wait in sleeping polls (phantom runs, ``Transport.poll_s``), each send of w
  completes only once the server sees the worker's ack, after the worker's
  wake-up (``model.comm.polls``).
* ``ps_async``: the server applies each push as it arrives (first come, first
  served) and replies with the new w to that worker alone; workers never wait
  for each other. Staleness = updates applied between the worker's read of w
  and the application of its gradient. The server's loop takes one push at a
  time (``real/schemes/ps.py``, ``serve_async``: ``Recv`` of a header from
  ``ANY_SOURCE``, then that worker's vector, the update, and the answer sent
  before the next header), but a push does not wait for the server's turn to
  move: its receiver fetches it or it has arrived already. Between hosts
  MPICH's ofi netmod hands a tagged send to libfabric whole up to the
  provider's ``max_msg_size`` (``MPIDI_OFI_EAGER_THRESH``,
  ``ch4/netmod/ofi/ofi_send.h``), and the tcp provider saves an unexpected
  message whole (``xnet_handle_tag`` -> ``xnet_save_and_cont``,
  ``prov/tcp/src/xnet_progress.c``; ``max_saved_size`` unlimited by default),
  so pushes cross the server's ingress while its egress carries an answer. On
  one host MPICH sends a message of 8 KiB or more by CMA
  (``MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD``): the request to send crosses, and
  the receiver copies out of the sender's memory (``MPIDI_IPCI_copy_data``,
  ``ch4/shm/ipc/src/ipc_p2p.h``), so the server's turn holds its copy of the
  push, the update and the answer (a rendezvous the server waits for), not the
  push's hand-offs. Where the ranks wait in sleeping polls (``Transport.poll_s``),
  a push that finds the server waiting is taken half its interval between polls
  late, and the answer holds the server's turn until it sees the worker's ack
  (``model.comm.polls``); the worker's wait for w began when its push's send
  completed, at its first check after the server took the push; the first w goes to the
  workers one after the other, as ps_sync's sends (``first_w``).
* Both: the server's first w to a worker on another host that MPI_Init did not connect it
  to opens the pair's connection first (``send_w``, ``mpich.unopened_peers``).

Imports: SimPy, model.comm (polls, mpich), model.schemes.base.
"""
from __future__ import annotations

from collections import deque

import simpy

from simulator.model.comm import polls
from simulator.model.comm.mpich import unopened_peers
from simulator.model.schemes.base import Setup, host_copy, train_step


def start_ps_sync(env, setup: Setup):
    plan = setup.plan
    group = plan.worker_ranks + (plan.server_rank,)          # the server gathers: last
    inbox = [simpy.Store(env) for _ in plan.worker_ranks]     # w, as each worker gets it
    since = [0.0] * plan.workers                              # when each began to wait for w
    routes = setup.comm.routes
    pushes = None                     # every worker on another host: pushes move whole
    if all(routes.crosses(w, plan.server_rank) for w in plan.worker_ranks):
        pushes = simpy.Store(env)
    for w in setup.workers:
        env.process(ps_sync_worker(env, w, setup.comm, setup.recorder, plan, group,
                                   inbox[plan.worker_of(w.rank)], since, pushes))
    env.process(ps_sync_server(env, setup.server, setup.comm, setup.recorder, plan, group,
                               inbox, since, pushes))


def ps_sync_worker(env, worker, comm, recorder, plan, group, inbox, since, pushes=None):
    root = len(group) - 1
    for i in range(plan.iterations + 1):
        t0 = since[plan.worker_of(worker.rank)] = env.now
        yield inbox.get()
        yield from host_copy(worker, plan.kept_copy_s)      # load_flat_params
        recorder.add(worker.rank, "comm", t0, env.now, "read w")
        if i == plan.iterations:            # the answer to its last push
            return
        yield from train_step(env, worker, recorder, i)
        yield from host_copy(worker, plan.new_copy_s)       # flat_grads: a new tensor
        if pushes is None:
            yield from comm.gather(worker.rank, group, plan.param_bytes, root=root)
            continue
        t0 = env.now                        # the whole push, the server in its turn or not
        yield comm.leg(worker.rank, plan.server_rank, plan.param_bytes)
        pushes.put(worker.rank)
        recorder.add(worker.rank, "comm", t0, env.now, "push")


def take_pushes(env, server, comm, recorder, plan, pushes):
    """Generator: ``serve_sync``'s receives of the iteration's P pushes where they moved
    whole (every worker on another host): one ``Recv`` from ``ANY_SOURCE`` after another,
    each push taken in the order it arrived, copied out of libfabric's saved buffer (the
    host's copy, ``Routes.shm``) and added to the sum (``acc += grad``) before the next
    receive. A push that arrives while the server waits in sleeping polls is seen half its
    interval between polls later (``polls.wake_lag_s``)."""
    poll_s, n = comm.transport.poll_s, plan.param_bytes
    copy_s = n * comm.routes.shm.beta_s_per_byte
    t0 = env.now
    for _ in plan.worker_ranks:
        waiting = env.now
        yield pushes.get()
        if poll_s > 0 and env.now > waiting:
            yield env.timeout(polls.wake_lag_s(env.now - waiting, poll_s))
        yield env.timeout(copy_s)
        yield comm.reduce(n)
    recorder.add(server.rank, "comm", t0, env.now, "pushes")


def send_w(env, comm, server, dst, n_bytes, inbox, since, unopened=()):
    """Generator: the server's send of w to rank ``dst`` as ``Link.send`` waits for it: until
    it has arrived; where the ranks wait in sleeping polls (``Transport.poll_s``), the worker
    sees it half its interval between polls later and the server once it sees the worker's
    ack (``polls.ack_seen_s``). A first send to a worker in ``unopened`` (``mpich.unopened_peers``;
    it is taken out) opens the pair's connection first (``polls.connect_s``), after which
    the worker's polls fall one interval apart from its answer, so it sees w at the first
    of them after w arrived (``polls.polled_after_s``)."""
    poll_s, t0 = comm.transport.poll_s, env.now
    span = polls.interval_s(max(0.0, env.now - since), poll_s)
    if dst in unopened:
        unopened.discard(dst)
        latency_s = comm.routes.link.latency_s
        yield env.timeout(polls.connect_s(latency_s, span))
        answered, t0 = env.now - latency_s, env.now
        yield comm.transfer(server.rank, dst, n_bytes)
        seen = answered + polls.polled_after_s(env.now - answered, span)
        version = server.version
        env.timeout(seen - env.now).callbacks.append(lambda _ev: inbox.put(version))
        if poll_s > 0:
            yield env.timeout(t0 + polls.ack_seen_s(seen - t0, 0.0, poll_s) - env.now)
        return
    yield comm.transfer(server.rank, dst, n_bytes)
    if poll_s <= 0:
        inbox.put(server.version)
        return
    span = polls.interval_s(max(0.0, env.now - since), poll_s)
    version = server.version
    env.timeout(span / 2).callbacks.append(lambda _ev: inbox.put(version))
    yield env.timeout(t0 + polls.ack_seen_s(env.now - t0, span, poll_s) - env.now)


def ps_sync_server(env, server, comm, recorder, plan, group, inbox, since, pushes=None):
    root = len(group) - 1
    unopened = unopened_peers(comm.routes, server.rank, plan.worker_ranks)
    for i in range(plan.iterations):
        t0 = env.now
        for w in plan.worker_ranks:                      # one after the other
            k = plan.worker_of(w)
            yield from send_w(env, comm, server, w, plan.param_bytes, inbox[k], since[k],
                              unopened)
        recorder.add(server.rank, "comm", t0, env.now, "send w")
        if pushes is not None:
            yield from take_pushes(env, server, comm, recorder, plan, pushes)
        else:
            yield from comm.gather(server.rank, group, plan.param_bytes, root=root)
            t0 = env.now
            yield comm.reduce(plan.workers * plan.param_bytes)
            recorder.add(server.rank, "compute", t0, env.now, "sum")
        version = yield from server.apply(recorder)
        for w in range(plan.workers):                    # the mean of the P pushes, once
            recorder.update(env.now, w, i, version, version)
        recorder.after_step(env.now, 0, i + 1)
    t0 = env.now
    for w in plan.worker_ranks:                          # it answers the last pushes too
        k = plan.worker_of(w)
        yield from send_w(env, comm, server, w, plan.param_bytes, inbox[k], since[k])
    recorder.add(server.rank, "comm", t0, env.now, "send w")


class Loop:
    """The server's loop, one push at a time: the events ``simpy.Resource(env, 1)`` schedules,
    in the same order (a request granted by an event at once while the loop is free, else
    in turn; a release an event at once, which grants the next), without its queues'
    machinery, which cost ps_async more than the pushes' own steps."""

    def __init__(self, env):
        self.env = env
        self.user = None                     # the request holding the loop
        self.waiting: deque = deque()        # requests in turn

    def request(self) -> simpy.Event:
        turn = self.env.event()
        self.waiting.append(turn)
        self._grant()
        return turn

    def release(self, turn: simpy.Event) -> None:
        if turn is not self.user:
            raise RuntimeError("the server's loop released by a push that does not hold it")
        self.user = None
        released = self.env.event()
        released.callbacks.append(self._grant)
        released.succeed()

    def _grant(self, _ev=None) -> None:
        if self.user is None and self.waiting:
            self.user = self.waiting.popleft()
            self.user.succeed()


def start_ps_async(env, setup: Setup):
    plan = setup.plan
    loop = Loop(env)                               # the server's loop: one push at a time
    idle = [0.0]                                   # when the server's loop last began to wait
    first = [None] * plan.workers                  # spinning ranks: the first w at once
    if setup.comm.transport.poll_s > 0:            # sleeping polls: one after the other
        first = [simpy.Store(env) for _ in plan.worker_ranks]
        env.process(first_w(env, setup.server, setup.comm, setup.recorder, plan, loop, idle,
                            first))
    for w in setup.workers:
        env.process(ps_async_worker(env, w, setup.comm, setup.recorder, plan, setup.server,
                                    loop, idle, first[plan.worker_of(w.rank)]))


def first_w(env, server, comm, recorder, plan, loop, idle, first):
    """Generator: ``serve_async``'s first w (``Server.broadcast``) where the ranks wait in
    sleeping polls: to the workers one after the other, each send waited for until the
    server sees its ack, as ps_sync's (``send_w``), before the next and before the server's
    loop takes a push. (With spinning ranks the model sends the first w to all at once, as
    the one-host validations were predicted: its order there is not yet checked.)"""
    turn = loop.request()
    yield turn
    t0 = env.now
    unopened = unopened_peers(comm.routes, server.rank, plan.worker_ranks)
    for w in plan.worker_ranks:
        yield from send_w(env, comm, server, w, plan.param_bytes, first[plan.worker_of(w)], t0,
                          unopened)
    recorder.add(server.rank, "comm", t0, env.now, "send w")
    _release(env, loop, turn, idle)


def ps_async_worker(env, worker, comm, recorder, plan, server, loop, idle, first):
    me, n = worker.rank, plan.param_bytes
    routes = comm.routes
    across = routes.crosses(me, server.rank)
    copy_s = n * routes.shm.beta_s_per_byte          # the server's copy of a push
    poll_s = comm.transport.poll_s                   # sleeping polls: acknowledged answers
    t0 = env.now
    if first is None:                                    # initial w
        yield comm.transfer(server.rank, me, n)
    else:                                                # ... from ``first_w``
        yield first.get()
    yield from host_copy(worker, plan.kept_copy_s)          # load_flat_params
    recorder.add(me, "comm", t0, env.now, "read w")
    read_version = 0
    for i in range(plan.iterations):
        yield from train_step(env, worker, recorder, i)
        yield from host_copy(worker, plan.new_copy_s)       # flat_grads: a new tensor
        t0 = env.now
        # before the server's turn: between hosts the whole push, on one host its request
        ahead = comm.leg(me, server.rank, n if across else 0)
        turn = loop.request()                            # the server takes this push
        yield turn
        yield ahead
        if poll_s > 0 and env.now > idle[0]:             # it came while the server waited
            yield env.timeout(polls.wake_lag_s(env.now - idle[0], poll_s))
        seen = env.now
        # its copy (by CMA, or out of libfabric's buffer), then the update: it holds the loop
        applied_on, t1 = yield from server.copy_and_apply(copy_s, recorder)
        t2 = env.now
        recorder.update(t2, plan.worker_of(me), i, read_version, applied_on)
        recorder.server_step(t2, applied_on + 1)
        yield comm.transfer(server.rank, me, n)          # the new w: the server waits for it
        if poll_s > 0:      # ... until it sees the ack, once the worker woke
            span = polls.interval_s(*_waited(env.now, t0, seen, poll_s), poll_s)
            acked = t2 + polls.ack_seen_s(env.now - t2, span, poll_s)
            yield env.timeout(span / 2)
            env.timeout(max(0.0, acked - env.now)).callbacks.append(
                lambda _ev, turn=turn: _release(env, loop, turn, idle))
        else:
            loop.release(turn)
        recorder.add(me, "comm", t0, t1, "push")
        recorder.add(me, "wait", t1, t2, "server")
        yield from host_copy(worker, plan.kept_copy_s)      # load_flat_params
        recorder.add(me, "comm", t2, env.now, "read w")
        recorder.add_staleness(applied_on - read_version)
        read_version = applied_on + 1


def _waited(now: float, pushed: float, taken: float, poll_s: float) -> tuple[float]:
    """How long a ps_async worker has been in its current wait at ``now``: its push's send
    from ``pushed`` until it sees the server's ack of the push (taken at ``taken``), then
    its receive of w from there."""
    push_done = pushed + polls.ack_seen_s(taken - pushed, 0.0, poll_s)
    return (now - pushed if now < push_done else now - push_done,)


def _release(env, loop, turn, idle) -> None:
    loop.release(turn)
    idle[0] = env.now
