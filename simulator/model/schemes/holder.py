"""async_avg: asynchronous model averaging through a weight holder that lives in rank 0.

As ``real/schemes/async_avg.py`` runs it: every K local steps a worker sends its
weights to rank 0 and waits for the mix; ranks never wait for each other. Rank 0
trains too and answers the requests that have arrived only *between two of its
own steps* (``Iprobe``), so

* a request waits for the rest of rank 0's current step, and for one step more when it
  arrived while rank 0 computed: MPI progresses only inside MPI calls, and ``MPI_Iprobe``
  looks before it progresses. MPICH's ``MPID_Iprobe`` (``src/mpid/ch4/src/ch4_probe.h``)
  peeks at the messages its netmod has taken off the sockets and calls
  ``MPID_Progress_test`` only when the peek found none; the ofi netmod's peek
  (``MPIDI_OFI_do_iprobe``, ``fi_trecvmsg`` with ``FI_PEEK``) reaches libfabric's
  ``util_srx_peek`` (``prov/util/src/util_srx.c``), which searches the unexpected messages
  the tcp provider's progress has already read and none still in the socket. A push that
  arrived since rank 0's last MPI call is therefore missed by the next ``Iprobe``, read by
  the progress after it, and served one rank-0 step later; once rank 0 serves one, every
  call progresses, so it serves all that came (``Holder.serve``);
* a push does not wait for rank 0 to move: between hosts it crosses into rank 0's host
  as soon as it is sent, while rank 0 computes, and the pushes of many workers share rank
  0's ingress (max-min, ``model.fluid``: at 20 Mbit/s, 15 pushes of the CNN's 39 kB all
  come in about 15 message times after they left). MPICH's ofi netmod hands a tagged
  send up to the provider's ``max_msg_size`` to libfabric whole (``MPIDI_OFI_send``,
  ``src/mpid/ch4/netmod/ofi/ofi_send.h``: its own rendezvous only above
  ``MPIDI_OFI_EAGER_THRESH``, ``ofi_impl.h``, which is that size by default), the kernel's
  socket buffers take it without rank 0 (``Link.socket_buffer_bytes``: 11-16 MB
  calibrated, a push of more than that would wait for rank 0's next MPI call for the rest,
  which the model does not hold back), and libfabric's tcp provider saves it unexpected,
  whole, when rank 0's progress reads it (``xnet_save_and_cont``,
  ``prov/tcp/src/xnet_progress.c``; ``xnet_max_saved_size`` ``SIZE_MAX`` by default,
  ``xnet_init.c``). On rank 0's host a push moves only when rank 0 serves it (MPICH copies
  8 KiB and more out of the sender by CMA, ``MPIDI_IPCI_copy_data``);
* a worker's first push to rank 0 opens their connection where MPI_Init left none
  (``mpich.unopened_peers``: at P = 12, workers 3, 5, 6, 7 and 9): libfabric's tcp provider
  connects on that send (``xnet_get_conn`` -> ``xnet_rdm_connect``,
  ``prov/tcp/src/xnet_rdm_cm.c``) and MPICH retries it, progressing without a sleep
  (``MPIDI_OFI_CALL_RETRY``, ``ch4/netmod/ofi/ofi_impl.h``), while rank 0's side moves only
  inside rank 0's progress: one call accepts (``xnet_accept_sock``, ``xnet_cm.c``), a later
  one reads the request and answers (``xnet_handle_conn`` -> ``xnet_process_connreq``). Between
  its steps rank 0 progresses once an ``Iprobe`` that finds nothing, and all along while it
  serves, so such a push leaves after TCP's handshake and the request (three latencies), two
  of rank 0's progress calls and the answer's latency (``Holder.connect``), one or two of its
  steps late where rank 0 was not serving;
* serving stretches rank 0's epoch: per request it receives the weights (already there
  between hosts; it waits for what has not come), mixes them in (``Plan.mix_s``, the
  server's update cost) and sends the mix back, one request at a time, so a port answers
  at most one push a message time.

Rank 0 also mixes its own weights in every K steps and once more after its last step (as
``real.train`` does). When its shard is done it only serves until every other worker has sent
its last weights (no reply to those). Staleness = mixes since the rank last read the holder's
weights.

Imports: SimPy, model.comm.mpich, model.schemes.base.
"""
from __future__ import annotations

import simpy

from simulator.model.comm.mpich import unopened_peers
from simulator.model.schemes.base import Setup, host_copy, train_step

DEFAULT_K = 10        # real/schemes/async_avg.py: DEFAULT_K when --average-every is 0


class Holder:
    """The shared weights on rank 0: a mailbox, a version count, and rank 0's serving."""

    def __init__(self, env, setup: Setup):
        self.env, self.setup = env, setup
        self.rank0 = setup.workers[0]
        self.every = setup.plan.avg_every     # K: steps between exchanges (resolved in the plan)
        self.inbox = simpy.Store(env)     # (src, reply event, last, sent at, crossed) in order
        self.progressed_at = 0.0          # rank 0's last MPI call: what came before it is read
        self.version = 0                  # mixes so far
        self.done = 0                     # workers that sent their last weights
        self.serving = False              # rank 0 in ``serve``: its MPI calls progress all along
        self.progressed = env.event()     # fires at rank 0's next progress call
        self.unopened = unopened_peers(setup.comm.routes, 0,
                                       [w.rank for w in setup.workers[1:]])

    def progress(self) -> None:
        """Rank 0 calls MPI's progress now: what has arrived is read, and what waits for its
        progress (a connection's accept, its request) goes on."""
        self.progressed_at = self.env.now
        called, self.progressed = self.progressed, self.env.event()
        called.succeed()

    def next_progress(self):
        """Event: rank 0's next progress call; at once while it serves."""
        return self.env.timeout(0) if self.serving else self.progressed

    def connect(self, src: int):
        """Generator: the first push of ``src`` opens its connection to rank 0 if MPI_Init
        did not (``unopened``): TCP's handshake and the provider's request reach rank 0 after
        three latencies, rank 0 accepts at its next progress call and reads the request and
        answers at the one after, and the answer takes one latency back; the worker spins
        meanwhile and sends as soon as it is in."""
        if src not in self.unopened:
            return
        self.unopened.discard(src)
        latency_s = self.setup.comm.routes.link.latency_s
        yield self.env.timeout(3 * latency_s)
        yield self.next_progress()        # xnet_accept_sock
        yield self.next_progress()        # xnet_handle_conn -> xnet_process_connreq, answered
        yield self.env.timeout(latency_s)

    def push(self, src: int):
        """Event: the push of ``src`` has crossed to rank 0's host, where it moves without
        rank 0 (None on rank 0's host: rank 0 copies it when it serves)."""
        routes = self.setup.comm.routes
        if routes.link is None or routes.placement[src] == routes.placement[0]:
            return None
        return self.setup.comm.leg(src, 0, self.setup.plan.param_bytes)

    def mix(self):
        """Rank 0 mixes one set of weights in; returns the version it was mixed on."""
        mixed_on = self.version
        yield self.rank0.compute(self.setup.plan.mix_s)
        self.version += 1
        return mixed_on

    def seen(self) -> bool:
        """Whether ``Iprobe`` finds a push now: the first in the inbox arrived before rank 0's
        last MPI call, whose progress read it off the socket."""
        return bool(self.inbox.items) and self.inbox.items[0][3] < self.progressed_at

    def serve(self, block: bool):
        """Rank 0 answers what its ``Iprobe`` finds, then all that arrives while it serves;
        with ``block``, until every worker is done (``Irecv`` and wait: each push as it
        comes). An ``Iprobe`` that finds none progresses: what has arrived is read."""
        env, plan, comm, rec = self.env, self.setup.plan, self.setup.comm, self.setup.recorder
        if not block and not self.seen():
            self.progress()
            return
        self.serving = True
        self.progress()
        while self.inbox.items or (block and self.done < plan.workers - 1):
            t0 = env.now                  # real.train logs all of it, waiting too, as comm
            src, reply, last, _, crossed = yield self.inbox.get()
            yield crossed if crossed is not None else comm.transfer(src, 0, plan.param_bytes)
            if last:                      # the final push: received is all its sender waits for
                self.done += 1
                reply.succeed(None)
                yield from self.mix()
                rec.mix(env.now, src, 1 / plan.workers, reply=False)
            else:
                mixed_on = yield from self.mix()
                rec.mix(env.now, src, 1 / plan.workers, reply=True)
                yield comm.transfer(0, src, plan.param_bytes)
                reply.succeed(mixed_on)
            rec.add(0, "comm", t0, env.now, "serve")
        self.serving = False
        self.progress()

    def mix_own(self):
        """Rank 0 mixes its own weights in and continues from the mix: its weights copied
        out into a new tensor (``flat_params``), mixed, and the mix copied back
        (``load_flat_params``; ``Plan.new_copy_s``, ``kept_copy_s``)."""
        t0, plan = self.env.now, self.setup.plan
        yield from host_copy(self.rank0, plan.new_copy_s)
        yield from self.mix()
        yield from host_copy(self.rank0, plan.kept_copy_s)
        self.setup.recorder.add(0, "comm", t0, self.env.now, "mix own weights")
        self.setup.recorder.mix(self.env.now, 0, 1 / self.setup.plan.workers, reply=True)


def start_async_avg(env, setup: Setup):
    holder = Holder(env, setup)
    env.process(_rank0(env, holder, setup))
    for w in setup.workers[1:]:
        env.process(_worker(env, w, holder, setup))


def _rank0(env, holder: Holder, setup: Setup):
    """Every K steps rank 0 mixes its own weights in; between steps it serves; at the end
    it mixes its last weights and serves until every worker has sent its last ones."""
    plan, rec = setup.plan, setup.recorder
    for i in range(plan.iterations):
        yield from train_step(env, holder.rank0, rec, i)
        rec.update(env.now, 0, i, i, i)
        if (i + 1) % holder.every == 0:
            yield from holder.mix_own()
        yield from holder.serve(block=False)
        rec.after_step(env.now, 0, i + 1)
    yield from holder.mix_own()
    yield from holder.serve(block=True)


def _worker(env, worker, holder: Holder, setup: Setup):
    plan, rec, me = setup.plan, setup.recorder, worker.rank
    read_version = 0
    for i in range(plan.iterations):
        yield from train_step(env, worker, rec, i)
        rec.update(env.now, me, i, i, i)
        if (i + 1) % holder.every == 0:
            t0 = env.now
            yield from host_copy(worker, plan.new_copy_s)   # flat_params: a new tensor
            yield from holder.connect(me)                   # its first push: the connection
            reply = env.event()
            yield holder.inbox.put((me, reply, False, env.now, holder.push(me)))
            mixed_on = yield reply
            yield from host_copy(worker, plan.kept_copy_s)  # load_flat_params
            rec.add(me, "comm", t0, env.now, "exchange")   # rank 0's step, then the exchange
            rec.add_staleness(mixed_on - read_version)
            read_version = mixed_on + 1
    t0 = env.now
    yield from host_copy(worker, plan.new_copy_s)           # flat_params of the last weights
    yield from holder.connect(me)
    received, crossed = env.event(), holder.push(me)
    yield holder.inbox.put((me, received, True, env.now, crossed))
    yield crossed if crossed is not None else received    # its send is done once it crossed
    rec.add(me, "comm", t0, env.now, "last weights")
