"""How NCCL's ring allreduce kernel cuts a call into chunks: facts read from its source.

NCCL prices a call with its tuner's closed form (``src/graph/tuning.cc``), which spreads
``n`` bytes evenly over every channel and every ring step. The kernel does not always:

* **Channels.** ``getAlgoInfo`` (``src/enqueue.cc``, 2.9.6 to 2.18.5; ``topoGetAlgoInfo``
  from 2.19) launches fewer channels than the communicator has while
  ``n < channels * threads * threadThreshold`` (``NCCL_LL_THREAD_THRESHOLD`` 8 times the
  ranks for a ring's LL, ``NCCL_LL128_THREAD_THRESHOLD`` 8, ``src/include/comm.h`` /
  ``src/graph/tuning.cc``), down to one channel, then halves the threads of that one.
* **Chunks, releases before 2.20.** The LL and LL128 ring kernels
  (``src/collectives/device/all_reduce.h``, ``runRing``) cut each loop into
  ``channels * ranks`` chunks of one size, rounded *up* to a multiple of
  ``minChunkSize`` (``threads * 8`` bytes for LL; ``threads * 60 / 2`` for LL128, whose
  grain is ``NCCL_LL128_SHMEM_ELEMS_PER_THREAD`` 8 lines of 120 data bytes in 128,
  halved: "it makes performance much, much smoother"), at most one step of the fifo
  (``calcBytePerStep``: 32 KiB of data for LL, 576,000 bytes for LL128). Chunks past the
  end are empty, but a ring's step ``k`` on rank ``r`` waits for step ``k - 1`` of the
  same chunk on rank ``r - 1``: a channel with one full chunk takes its ``2 (P - 1)``
  full steps, so every channel's ring moves ``2 (P - 1)`` chunks of that size whatever
  the others hold. From 2.20 the host splits the call into per-channel counts
  (``ncclCollCbdPart``) and the last loop's chunk is ``divUp(rest, ranks)``: no padding.

``ring_kernel_bytes`` gives the bytes NCCL's tuner would have to be told for its closed
form to take the time the kernel takes, each channel moving at its share of the
protocol's bus bandwidth (the tuner's own rule for fewer channels, ``bw / nChannels *
info->nChannels``, ``ncclTopoGetAlgoTime``). The model prices that many bytes
(``simulator.model.comm.choice.kernel_bytes``).

That reading takes a step as a whole. The flags are finer: an LL line carries its own
flag (``readLL`` spins on each 16-byte line, ``prims_ll.h``) and so does an LL128 line
of 128 bytes (``prims_ll128.h``), so a rank may pass a chunk's first lines on before
its last ones arrive, and an empty chunk costs it nothing. ``ring_rank_bytes`` is that
reading: the most real bytes one rank of one channel moves in its ``2 (P - 1)`` steps.
The published A100 tables fit it worse (``python -m benchmarks.nccl.readings``), so the
model keeps whole steps.

Imports: the standard library only.
"""
from __future__ import annotations

import math

# src/include/devcomm.h (2.9.6 to 2.18.5; device.h later) and src/include/comm.h
LL_MAX_THREADS = 512                 # NCCL_LL_MAX_NTHREADS
LL128_MAX_THREADS = 640              # NCCL_LL128_MAX_NTHREADS
LL_THREAD_THRESHOLD = 8              # NCCL_LL_THREAD_THRESHOLD (times the ranks for a ring)
LL128_THREAD_THRESHOLD = 8           # NCCL_LL128_THREAD_THRESHOLD
LL_STEP_BYTES = 8 * 512 * 16 // 2    # NCCL_LL_LINES_PER_THREAD x threads x 16-byte lines, half data
LL128_STEP_BYTES = 120 * 640 * 8 * 15 // 16   # NCCL_LL128_ELEMS_PER_THREAD x threads x 8 B, 120/128
LL_GRAIN_BYTES = 8                   # ProtoLL::calcBytePerGrain
LL128_GRAIN_BYTES = 8 * 8 * 15 // 16    # ProtoLL128::calcBytePerGrain: 8 lines' data per thread
PER_CHANNEL_SPLIT = (2, 20)          # the first release that splits a call per channel
SIMPLE_STEP_BYTES = (1 << 22) // 8  # DEFAULT_BUFFSIZE (src/init.cc) over NCCL_STEPS
SIMPLE_CHUNK_STEPS = 4               # ALLREDUCE_CHUNKSTEPS, NCCL_STEPS / 2 (collectives.h)
SIMPLE_SLICE_STEPS = 2               # ALLREDUCE_SLICESTEPS, NCCL_STEPS / 4
SIMPLE_ALIGN_BYTES = 512 * 8         # runRing rounds a chunk to its 512 workers x 8 B


def release_tuple(release: str) -> tuple[int, ...]:
    """``"2.18.5"`` -> (2, 18, 5); () where no release is given."""
    return tuple(int(p) for p in release.split(".") if p.isdigit()) if release else ()


def launched(n_bytes: float, ranks: int, protocol: str, channels: int) -> tuple[int, int]:
    """(channels, threads a channel) NCCL launches for a ring allreduce of ``n_bytes``
    with ``protocol`` ("ll" or "ll128") on a communicator of ``channels`` channels."""
    threads, threshold = ((LL_MAX_THREADS, LL_THREAD_THRESHOLD * ranks) if protocol == "ll"
                          else (LL128_MAX_THREADS, LL128_THREAD_THRESHOLD))
    nc = channels
    while n_bytes < nc * threads * threshold:
        if nc >= 2:
            nc -= 1
        elif threads % 128 == 0:
            threads //= 2
        else:
            break
    return nc, threads


def _chunks(n_bytes: float, ranks: int, protocol: str, channels: int):
    """(launched channels, fifo step, full loops, bytes of the last loop, its chunk) of a
    ring allreduce before 2.20 (``runRing``)."""
    nc, threads = launched(n_bytes, ranks, protocol, channels)
    if protocol == "ll":
        step, min_chunk = LL_STEP_BYTES, threads * LL_GRAIN_BYTES
    else:
        step, min_chunk = LL128_STEP_BYTES, threads * LL128_GRAIN_BYTES // 2
    full_loops = math.floor(n_bytes / (nc * ranks * step))
    rest = n_bytes - full_loops * nc * ranks * step
    last = min(math.ceil(rest / (nc * ranks * min_chunk)) * min_chunk, step) if rest > 0 else 0
    return nc, step, full_loops, rest, last


def _exact_split(release: str) -> bool:
    return not release or release_tuple(release) >= PER_CHANNEL_SPLIT


def ring_kernel_bytes(n_bytes: float, ranks: int, protocol: str, channels: int,
                      release: str) -> float:
    """The bytes whose even spread over ``channels`` channels and ``2 (P - 1)`` steps
    takes as long as the kernel's chunks of a ring allreduce of ``n_bytes`` (see the
    module): ``P * channels * sum of each loop's chunk`` before 2.20, ``n * channels /
    launched`` from 2.20 (and where no release is given)."""
    if n_bytes <= 0 or channels <= 0:
        return n_bytes
    if _exact_split(release):
        return n_bytes * channels / launched(n_bytes, ranks, protocol, channels)[0]
    _, step, full_loops, _, last = _chunks(n_bytes, ranks, protocol, channels)
    return ranks * channels * (full_loops * step + last)


def ring_steps(ranks: int, ring_index: int) -> list[int]:
    """The chunk each of a rank's ``2 (P - 1)`` sending steps of one loop handles
    (``runRing``: send, ``P - 2`` recvReduceSend, recvReduceCopySend, ``P - 2``
    recvCopySend; the final recv only copies out)."""
    p, r = ranks, ring_index
    return ([(r + p - 1) % p] + [(r + p - j) % p for j in range(2, p)] + [r]
            + [(r + p - j) % p for j in range(1, p - 1)])


def ring_rank_bytes(n_bytes: float, ranks: int, protocol: str, channels: int,
                    release: str) -> float:
    """The per-line reading of the flags (see the module): the bytes whose even spread
    takes as long as the busiest rank of the busiest channel moving only its chunks'
    real bytes, ``P * channels / (2 (P - 1))`` times that rank's bytes before 2.20;
    as ``ring_kernel_bytes`` from 2.20."""
    if n_bytes <= 0 or channels <= 0 or _exact_split(release):
        return ring_kernel_bytes(n_bytes, ranks, protocol, channels, release)
    nc, step, full_loops, rest, last = _chunks(n_bytes, ranks, protocol, channels)
    busiest = 0.0
    for b in range(nc if rest > 0 else 0):
        real = [max(0.0, min(last, rest - (c * nc + b) * last)) for c in range(ranks)]
        busiest = max(busiest, max(sum(real[c] for c in ring_steps(ranks, r))
                                   for r in range(ranks)))
    moved = full_loops * 2 * (ranks - 1) * step + busiest
    return moved * channels * ranks / (2 * (ranks - 1))


def simple_ring_slices(n_bytes: float, ranks: int, channels: int) -> list[tuple[int, float]]:
    """(slices, bytes a slice) of each step of one channel's Simple ring allreduce, loop
    by loop, 2.9.6 to 2.19 (``runRing``: a loop is ``channels * ranks`` chunks of at most
    ``SIMPLE_CHUNK_STEPS`` fifo steps, the last loop's chunk ``divUp(rest, channels *
    ranks)`` rounded up to ``SIMPLE_ALIGN_BYTES``; ``genericOp`` in ``prims_simple.h``
    moves a chunk in slices of half of it, at least 1/32 of a slice's two steps). Each
    slice is a wait on the peer's flag, two barriers and a post behind a system fence."""
    chunk_max = SIMPLE_STEP_BYTES * SIMPLE_CHUNK_STEPS
    min_slice = SIMPLE_STEP_BYTES * SIMPLE_SLICE_STEPS // 32
    loop = channels * ranks * chunk_max
    out, rest = [], float(n_bytes)
    while rest > 0:
        chunk = min(chunk_max, math.ceil(math.ceil(rest / (channels * ranks))
                                         / SIMPLE_ALIGN_BYTES) * SIMPLE_ALIGN_BYTES)
        per_slice = max(math.ceil(chunk / 2 / 64) * 64, min_slice)
        slices = math.ceil(chunk / per_slice)
        out.append((slices, chunk / slices))
        rest -= loop
    return out
