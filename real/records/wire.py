"""What each rank of a scheme sends over a run: as the record counts it, and over TCP.

A scheme's messages follow from its model's tensors (in ``parameters()``
order, with their dtypes), the ranks' hosts and the training steps each worker
took. Two counts per rank:

* ``record_bytes``: the payload each rank hands to its calls, as
  ``comm.bytes_sent_per_rank`` of a run record counts it (``real/schemes``);
* ``tcp_bytes``: what its library puts on TCP (``real.records.testbed`` reads the
  sockets' ``tcpi_bytes_acked`` and checks the two agree), from the library's
  algorithm:

  - gloo (gather_scatter, allreduce, ddp) talks TCP even between ranks of one
    host, and frames every message (``libraries.gloo.gloo_tcp_bytes``: a 48-byte
    preamble for each of the sender's two operations and one the receiver sends
    back, gloo/transport/tcp/pair.cc). ``all_reduce`` is gloo's ring
    (gloo/allreduce.cc, ``ring``: a reduce-scatter and an allgather in segments,
    2 (P - 1) / P n a rank on average, each rank's own segments counted in whole
    elements by ``libraries.gloo.gloo_ring_rank_traffic``); ``gather`` sends each
    rank's n to the root, ``scatter`` the root's n to each other rank; DDP
    all-reduces every bucket (all gradients once a step, framed as one ring a
    dtype: its 25 MiB buckets add a few messages on large models, under 0.01%)
    and, when it is built, broadcasts the weights and buffers from rank 0 along
    a binomial tree (``_sync_module_states``; gloo/broadcast.cc), and the buffers
    again before every forward in training (``_sync_buffers``: BatchNorm's
    running statistics, ``broadcast_buffers=True``; ``_broadcast_coalesced``
    sends one flat message a dtype). Measured on the emulated
    cluster, the CNN's per-tensor allreduce at P = 2-16: within 0.01% of each
    rank's bytes (the framing is 28% of them at P = 8, 41% at P = 16);
  - MPICH moves messages between ranks of one host through shared memory: only
    peers on other hosts count. An Allreduce across hosts (one rank a host) is
    MPICH's algorithm (``libraries.mpich.choose_allreduce`` for
    ``auto``): recursive doubling (log2 p n) or reduce-scatter + allgather
    (2 (p - 1) / p n), p the largest power of two in P, with MPICH's fold of
    the other P - p ranks (an even rank below 2 (P - p) sends its n to the
    next rank and gets the result back), or the ring (2 (P - 1) / P n). With
    several ranks on some hosts ``auto`` is MPICH's composition: each host's
    first rank allreduces with the other hosts' first ranks, the rest stays in
    shared memory; a named algorithm there is not counted (None).

A flat buffer (mpi_allreduce, gather_scatter, the parameter server, psgd's and
async_avg's weights) is ``torch.cat`` of the tensors: one dtype, the widest
(``flat_bytes``). The parameter server's messages carry a 16-byte header; MPICH's own
headers are left out (tens of bytes a message: within the check's margin).

Imports: real.schemes (no scheme module), contracts.workload, libraries (gloo, mpich).
"""
from __future__ import annotations

import math

from real.schemes import SCHEMES
from contracts.workload import DTYPE_BYTES
from libraries.gloo import gloo_ring_rank_traffic, gloo_tcp_bytes
from libraries.mpich import choose_allreduce

PS_HEADER_BYTES = 16                 # [version, done] as int64 (real.schemes.ps)


def flat_bytes(tensors: list[tuple[int, str]]) -> int:
    """Bytes of ``torch.cat`` of (elements, dtype) tensors: one buffer of the promoted dtype
    (float64 if any, else float32 where dtypes differ or any is float32)."""
    dtypes = {d for _, d in tensors}
    dtype = dtypes.pop() if len(dtypes) == 1 else ("float64" if "float64" in dtypes
                                                   else "float32")
    return sum(n for n, _ in tensors) * DTYPE_BYTES[dtype]


def record_bytes(scheme: str, tensors: list[tuple[int, str]], steps: list[int],
                 average_every: int = 0) -> list[int]:
    """Payload each rank hands to its calls over the run (a record's ``bytes_sent_per_rank``).

    ``tensors``: (elements, dtype) in ``parameters()`` order; ``steps``: the training
    steps of each worker (worker i is rank i, or rank i + 1 behind a server)."""
    flat, each = flat_bytes(tensors), sum(n * DTYPE_BYTES[d] for n, d in tensors)
    msg = PS_HEADER_BYTES + flat
    sends = SCHEMES[scheme].exchange if scheme in SCHEMES else None
    if sends == "gather_scatter":
        return [s * (flat + (len(steps) * flat if r == 0 else 0)) for r, s in enumerate(steps)]
    if sends in ("per_tensor", "buckets"):
        return [s * each for s in steps]
    if sends == "flat":
        return [s * flat for s in steps]
    if sends == "average":
        return [_averagings(s, average_every) * flat for s in steps]
    if sends == "holder":               # rank 0 answers every push; its own mixes are local
        k = SCHEMES[scheme].averaging_every(average_every)
        return [sum(s // k for s in steps[1:]) * flat] + [(s // k + 1) * flat
                                                           for s in steps[1:]]
    if sends == "push_pull":            # the first weights and one answer a push, to each
        return [sum(1 + s for s in steps) * msg] + [s * msg for s in steps]
    raise ValueError(f"no message count for scheme {scheme!r}")


def tcp_bytes(scheme: str, tensors: list[tuple[int, str]], hosts: list[str],
              steps: list[int], average_every: int = 0,
              mpi_allreduce: str = "auto",
              buffers: list[tuple[int, str]] = ()) -> list[float | None]:
    """Payload each rank puts on TCP over the run; ``hosts``: each rank's host, in rank
    order (see the module docstring; None where the placement makes it unknown)."""
    ranks = len(hosts)
    flat = flat_bytes(tensors)
    msg = PS_HEADER_BYTES + flat
    sends = SCHEMES[scheme].exchange if scheme in SCHEMES else None
    if sends == "per_tensor":
        return [s * sum(gloo_ring_tcp_bytes(ranks, r, n, d) for n, d in tensors)
                for r, s in enumerate(steps)]
    if sends == "buckets":
        each = sum(n * DTYPE_BYTES[d] for n, d in tensors)
        by_dtype = {d: sum(n for n, e in tensors if e == d) for _, d in tensors}
        bufs = sum(n * DTYPE_BYTES[d] for n, d in buffers)
        msgs = len({d for _, d in buffers})            # a broadcast of the buffers: a dtype
        start = 1 + len({d for _, d in buffers} - set(by_dtype))   # weights and buffers
        kids = [binomial_children(r, ranks) for r in range(ranks)]
        return [s * sum(gloo_ring_tcp_bytes(ranks, r, n, d) for d, n in by_dtype.items())
                + gloo_tcp_bytes(kids[r] * (each + bufs), kids[r] * start, start * int(r > 0))
                + s * gloo_tcp_bytes(kids[r] * bufs, kids[r] * msgs, msgs * int(r > 0))
                for r, s in enumerate(steps)]
    if sends == "gather_scatter":      # the root scatters to and gathers from each other rank
        return [s * (gloo_tcp_bytes((ranks - 1) * flat, ranks - 1, ranks - 1) if r == 0
                     else gloo_tcp_bytes(flat, 1, 1)) for r, s in enumerate(steps)]
    apart = [[hosts[a] != hosts[b] for b in range(ranks)] for a in range(ranks)]
    if sends in ("flat", "average"):
        per_call = mpi_allreduce_bytes(flat, hosts, mpi_allreduce)
        calls = steps if sends == "flat" else [_averagings(s, average_every) for s in steps]
        return [None if b is None else c * b for c, b in zip(calls, per_call)]
    sent = record_bytes(scheme, tensors, steps, average_every)
    if sends == "holder":               # workers push to rank 0; rank 0 answers each push
        k = SCHEMES[scheme].averaging_every(average_every)
        replies = sum(s // k * flat for r, s in enumerate(steps) if r > 0 and apart[0][r])
        return [replies] + [sent[r] if apart[r][0] else 0 for r in range(1, ranks)]
    if sends == "push_pull":            # rank 0 the server, ranks 1..P the workers
        done = PS_HEADER_BYTES if SCHEMES[scheme].ends_with_done else 0   # (not in the record)
        return [sum((1 + steps[r - 1]) * msg for r in range(1, ranks) if apart[0][r])] + \
            [sent[r] + done if apart[r][0] else 0 for r in range(1, ranks)]
    raise ValueError(f"no message count for scheme {scheme!r}")


def gloo_ring_tcp_bytes(ranks: int, rank: int, elements: int, dtype: str) -> float:
    """What ``rank`` puts on TCP in one gloo ring allreduce of ``elements`` of ``dtype``:
    its segments' payload and the framing of the messages it sends and receives."""
    return gloo_tcp_bytes(*gloo_ring_rank_traffic(ranks, rank, elements, DTYPE_BYTES[dtype]))


def ring_bytes(n_bytes: float, ranks: int) -> float:
    """What one rank sends in a ring allreduce of ``n_bytes``: 2 (P - 1) / P n."""
    return 2 * (ranks - 1) / ranks * n_bytes if ranks > 1 else 0.0


def binomial_children(rank: int, ranks: int, root: int = 0) -> int:
    """Ranks ``rank`` sends to in gloo's broadcast from ``root`` (gloo/broadcast.cc): in
    round i = 0 .. ceil(log2 P) - 1 every relative rank v < 2^i sends to v + 2^i."""
    v = (rank - root) % ranks
    rounds = (ranks - 1).bit_length()
    return sum(1 for i in range(rounds) if v < 1 << i and v + (1 << i) < ranks)


def mpi_allreduce_bytes(n_bytes: float, hosts: list[str], algorithm: str = "auto"
                        ) -> list[float | None]:
    """TCP payload of one MPICH Allreduce per rank: 0 on one host (shared memory), the
    algorithm's own count with one rank a host; ``auto`` over hosts with several ranks on
    some is MPICH's composition (``smp``): only each host's first rank talks TCP, in an
    allreduce among those ranks. None for a named algorithm on such a placement."""
    ranks = len(hosts)
    if len(set(hosts)) == 1:
        return [0.0] * ranks
    algo = choose_allreduce(algorithm, n_bytes, ranks, hosts=len(set(hosts)))
    if algo == "smp":
        roots = [hosts.index(h) for h in dict.fromkeys(hosts)]
        across = mpi_allreduce_bytes(n_bytes, [str(r) for r in roots])
        out: list[float | None] = [0.0] * ranks
        for r, b in zip(roots, across):
            out[r] = b
        return out
    if len(set(hosts)) < ranks:
        return [None] * ranks
    if algo == "ring":
        return [ring_bytes(n_bytes, ranks)] * ranks
    pof2 = 1 << (ranks.bit_length() - 1)
    rem = ranks - pof2
    core = (math.log2(pof2) * n_bytes if algo == "recursive_doubling"
            else 2 * (pof2 - 1) / pof2 * n_bytes)
    out = []
    for r in range(ranks):
        if r < 2 * rem:                 # MPICH's fold: even ranks hand their data over
            out.append(n_bytes if r % 2 == 0 else core + n_bytes)
        else:
            out.append(core)
    return out


def steps_per_worker(scheme: str, train_samples: int, batch_size: int, global_batch: int,
                     workers: int, epochs: int) -> list[int]:
    """Training steps each worker takes (as ``real.launch.runner`` lays the data out): a slice of
    each global batch for the gradient-synchronous schemes, its own 1/P shard otherwise."""
    if SCHEMES[scheme].global_batch:
        full, rest = divmod(train_samples, global_batch)
        return [epochs * (full + (rest >= workers))] * workers
    shards = [(r + 1) * train_samples // workers - r * train_samples // workers
              for r in range(workers)]
    return [epochs * -(-n // batch_size) for n in shards]


def _averagings(steps: int, every: int) -> int:
    """psgd's weight averagings: every K steps, and once at the end."""
    return (steps // every if every else 0) + 1
