"""Ranks that wait in sleeping polls, and the sends that wait for their receivers.

A rank of a phantom run waits in ``real.launch.dist.wait``: ``MPI_Test``, then sleeps of
50 us doubling after each empty poll up to the run's longest sleep ``poll_s``
(``PSGD_WAIT_SLEEP_S``, the record's ``environment.sleeping_waits``). MPICH and libfabric
progress only inside those ``Test`` calls, so a rank sees what reached it at its next poll:
its *checks* are at ``0, 50, 150, 350, ... us`` after it began to wait, ``poll_s`` apart once
the sleeps reach ``poll_s`` (``checks_s``).

A point-to-point send above libfabric's inject size does not complete when its bytes have
left: MPICH's ofi netmod asks for delivery completion on every send (``FI_DELIVERY_COMPLETE``
in its transmit flags wherever RMA is on, as over tcp: ``MPIDI_OFI_init_hints``,
``ch4/netmod/ofi/ofi_init.c``), which the tcp provider keeps as an acknowledged send
(``xnet_set_ack_flags``, ``prov/tcp/src/xnet.h``: the message carries
``XNET_DELIVERY_COMPLETE`` and the sender ``XNET_NEED_ACK``); the receiver's
provider queues the ack when it has taken the whole message (``xnet_process_recv``,
``prov/tcp/src/xnet_progress.c``), inside the receiver's progress. strace of
``benchmarks/ps_polls.py`` shows it on loopback: the 39,392-byte message written whole,
the receiver reading it and sending a 16-byte ack in the same poll, the sender's request
complete when it reads that ack. So such a send costs its arrival, then the receiver's
wake-up (``wake_lag_s``: half the interval between its polls when the message arrives, as
the arrival meets its polls at any phase), then the sender's next check after the ack
(``ack_seen_s``). The parameter server's ``Link.send`` waits for that before its next send.

Nothing here is fitted: the schedule is ``real.launch.dist.wait``'s and ``poll_s`` the
record's. Not included: each sleep's own lateness (50-80 us on the 2-core VM,
``benchmarks/ps_polls.py`` reports it), and the ack's own flight (one small message).

Imports: nothing of the model.
"""
from __future__ import annotations

import math

FIRST_SLEEP_S = 50e-6        # real.launch.dist.FIRST_SLEEP_S (the simulator imports no real)


def checks_s(poll_s: float, until_s: float) -> list[float]:
    """When a rank that began to wait at 0 polls, up to the first check at or after
    ``until_s``: 0, then after sleeps of ``FIRST_SLEEP_S`` doubling up to ``poll_s``."""
    out, t, nap = [0.0], 0.0, FIRST_SLEEP_S
    while t < until_s:
        t += min(nap, poll_s)
        nap *= 2
        out.append(t)
    return out


def sleep_s(j: int, poll_s: float) -> float:
    """The ``j``-th sleep (from 0) between a waiting rank's polls: 50 us doubling up to
    ``poll_s`` (> 0), each after a poll that found nothing done (``checks_s``' steps)."""
    return min(FIRST_SLEEP_S * 2 ** j, poll_s) if j < 64 else poll_s


def step_delay_s(poll_s: float) -> float:
    """How late a rank that waits in sleeping polls sees a step of a collective end, on
    average, once its wait has backed off: it polls every ``poll_s`` and the step ends
    anywhere between two polls, so ``poll_s / 2``. ``simulator.compare.polled_profile``
    charges it a step of every MPI collective; where the call's rounds are played out poll
    by poll (``model.comm.iallreduce``) it is not charged again."""
    return poll_s / 2


def interval_s(waited_s: float, poll_s: float) -> float:
    """The sleep between the polls of a rank that has waited ``waited_s`` (the one it is
    in, or starts, at that moment)."""
    t, nap = 0.0, FIRST_SLEEP_S
    while nap < poll_s and t + nap <= waited_s:
        t += nap
        nap *= 2
    return min(nap, poll_s)


def wake_lag_s(waited_s: float, poll_s: float) -> float:
    """How long after a message reaches a rank that has waited ``waited_s`` the rank sees
    it, on average: half its interval between polls then (``poll_s / 2`` once its sleeps
    have backed off, 1.55 ms into the wait at ``poll_s`` = 1 ms)."""
    return interval_s(waited_s, poll_s) / 2 if poll_s > 0 else 0.0


def ack_seen_s(arrival_s: float, span_s: float, poll_s: float) -> float:
    """When a sender that began to wait at 0 sees the ack of a message that arrived at
    ``arrival_s`` and was taken by a receiver whose polls are ``span_s`` apart (its ack at
    ``arrival_s + u``, ``u`` uniform over ``[0, span_s]``), on average: the mean over ``u``
    of the sender's first check at or after the ack (``checks_s``)."""
    if poll_s <= 0:
        return arrival_s + span_s / 2
    end = arrival_s + span_s
    checks = checks_s(poll_s, end)
    if span_s <= 0:
        return next(c for c in checks if c >= arrival_s)
    total = 0.0
    for before, check in zip(checks, checks[1:]):   # acks in (before, check] seen at check
        overlap = min(check, end) - max(before, arrival_s)
        if overlap > 0:
            total += overlap * check
    return total / span_s


def connect_s(latency_s: float, span_s: float) -> float:
    """How long the first send to a peer with no connection yet waits before its bytes
    leave, and ``span_s`` the peer's interval between polls (0: it spins). libfabric's tcp
    provider connects on that send (``xnet_get_conn`` -> ``xnet_rdm_connect``,
    ``prov/tcp/src/xnet_rdm_cm.c``; -FI_EAGAIN until connected) and MPICH retries it,
    progressing without a sleep (``MPIDI_OFI_CALL_RETRY``, ``ch4/netmod/ofi/ofi_impl.h``):
    TCP's handshake and the provider's request reach the peer after three latencies; the
    peer accepts at its next poll (``xnet_accept_sock``: half its interval on average),
    reads the request and answers at the poll after (``xnet_handle_conn`` ->
    ``xnet_process_connreq`` -> ``fi_accept``: one interval), and the answer takes one
    latency back. strace of ``benchmarks/first_contact.py`` shows the three polls."""
    return 4 * latency_s + 1.5 * span_s


def polled_after_s(arrival_s: float, span_s: float) -> float:
    """When a rank that polled at 0 and polls every ``span_s`` since sees what arrived at
    ``arrival_s`` (its first poll at or after it; ``span_s`` 0: at once)."""
    if span_s <= 0:
        return arrival_s
    return math.ceil(arrival_s / span_s - 1e-9) * span_s
