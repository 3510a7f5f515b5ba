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
  end are empty. From 2.20 the host splits the call into per-channel counts
  (``ncclCollCbdPart``) and the last loop's chunk is ``divUp(rest, ranks)``: no padding.
* **Rounds.** A rank waits for the rank before it a round at a time. LL's threads move
  one 8-byte line each a trip (``LLGenericOp`` in ``prims_ll.h``: ``eltPerTrip =
  nthreads * EltPerLine``, ``readLL`` spinning on each line's flag), so a round is
  ``threads * 8`` bytes. LL128's warps move one slice of 1,920 data bytes each a trip
  (``GenericOp`` in ``prims_ll128.h``: ``DataEltPerSlice``; a warp reloads until every
  flag of its slice has come, ``__any_sync(WARP_MASK, needReload)``), so a round is
  ``warps * 1,920`` bytes. Every op starts and ends with a barrier of its threads, so a
  rank's step starts when its previous step has ended. Round ``i`` of a step then waits
  for round ``i`` of the same chunk's previous step on the rank before (the chunk a step
  handles moves one rank on a step, ``ring_steps``). A chunk of one round (LL128's
  chunks up to 38,400 bytes) crosses the ring whole, so a channel with one full chunk
  runs ``2 (P - 1)`` full steps. A chunk of several rounds is passed on round by round,
  and a rank's empty chunks cost it nothing.

``ring_kernel_bytes`` follows the rounds through the busiest channel and gives the bytes
NCCL's tuner would have to be told for its closed form to take as long, each channel
moving at its share of the protocol's bus bandwidth (the tuner's own rule for fewer
channels, ``bw / nChannels * info->nChannels``, ``ncclTopoGetAlgoTime``). The model
prices that many bytes (``simulator.model.comm.choice.kernel_bytes``). Two coarser
readings are kept to compare (``python -m benchmarks.nccl.readings``): whole steps
(``ring_step_bytes``: every channel runs ``2 (P - 1)`` steps of its largest chunk) and
single lines (``ring_rank_bytes``: the busiest rank's real bytes).

Imports: the standard library only.
"""
from __future__ import annotations

import functools
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
LL128_SLICE_BYTES = 32 * LL128_GRAIN_BYTES  # DataEltPerSlice: a warp's 32 threads, 1,920 B
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


def ring_steps(ranks: int, ring_index: int) -> list[int]:
    """The chunk each of a rank's ``2 (P - 1)`` sending steps of one loop handles
    (``runRing``: send, ``P - 2`` recvReduceSend, recvReduceCopySend, ``P - 2``
    recvCopySend; the final recv only copies out)."""
    p, r = ranks, ring_index
    return ([(r + p - 1) % p] + [(r + p - j) % p for j in range(2, p)] + [r]
            + [(r + p - j) % p for j in range(1, p - 1)])


def round_bytes(protocol: str, threads: int) -> int:
    """The data bytes all of a channel's threads move in one trip (see the module)."""
    return threads * LL_GRAIN_BYTES if protocol == "ll" else threads // 32 * LL128_SLICE_BYTES


def _last_loop(n_bytes: float, ranks: int, protocol: str, channels: int):
    """(bytes a loop of full steps moves on each channel's ring, full loops, the distinct
    chunk sizes a channel holds in the last loop)."""
    nc, step, full_loops, rest, last = _chunks(n_bytes, ranks, protocol, channels)
    patterns = {tuple(max(0.0, min(last, rest - (c * nc + b) * last)) for c in range(ranks))
                for b in range(nc)} if rest > 0 else set()
    return 2 * (ranks - 1) * step, full_loops, patterns


def _as_even_spread(moved: float, ranks: int, channels: int) -> float:
    """The bytes whose even spread over ``channels`` and ``2 (P - 1)`` steps takes as
    long as one channel's ring moving ``moved`` bytes in a row."""
    return moved * channels * ranks / (2 * (ranks - 1))


def ring_path_bytes(sizes: tuple[float, ...], round_size: int) -> float:
    """The longest chain of rounds through one channel's ``2 (P - 1)`` steps, in bytes:
    each round takes its bytes, after the rank's previous round (its previous step's
    end for the first) and after the same round of the same chunk's previous step on
    the rank before (see the module)."""
    p = len(sizes)
    chunks = [ring_steps(p, r) for r in range(p)]
    end, before = [0.0] * p, [()] * p
    for s in range(2 * (p - 1)):
        now = []
        for r in range(p):
            t, done, left = end[r], [], sizes[chunks[r][s]]
            upstream = before[r - 1] if s else ()
            while left > 0:
                i, b = len(done), min(round_size, left)
                t = max(t, upstream[i] if i < len(upstream) else 0.0) + b
                done.append(t)
                left -= b
            now.append(tuple(done))
            end[r] = t
        before = now
    return max(end)


@functools.lru_cache(maxsize=4096)
def ring_kernel_bytes(n_bytes: float, ranks: int, protocol: str, channels: int,
                      release: str) -> float:
    """The bytes whose even spread over ``channels`` channels and ``2 (P - 1)`` steps
    takes as long as the kernel's rounds of a ring allreduce of ``n_bytes`` on its
    busiest channel (see the module) before 2.20; ``n * channels / launched`` from 2.20
    (and where no release is given)."""
    if n_bytes <= 0 or channels <= 0:
        return n_bytes
    nc, threads = launched(n_bytes, ranks, protocol, channels)
    if _exact_split(release):
        return n_bytes * channels / nc
    loop, full_loops, patterns = _last_loop(n_bytes, ranks, protocol, channels)
    unit = round_bytes(protocol, threads)
    busiest = max((ring_path_bytes(sizes, unit) for sizes in patterns), default=0.0)
    return _as_even_spread(full_loops * loop + busiest, ranks, channels)


def ring_step_bytes(n_bytes: float, ranks: int, protocol: str, channels: int,
                    release: str) -> float:
    """Whole steps (a reading to compare): every channel runs ``2 (P - 1)`` steps of the
    largest chunk, ``P * channels * sum of each loop's chunk`` before 2.20."""
    if n_bytes <= 0 or channels <= 0 or _exact_split(release):
        return ring_kernel_bytes(n_bytes, ranks, protocol, channels, release)
    _, step, full_loops, _, last = _chunks(n_bytes, ranks, protocol, channels)
    return ranks * channels * (full_loops * step + last)


def ring_rank_bytes(n_bytes: float, ranks: int, protocol: str, channels: int,
                    release: str) -> float:
    """Single lines (a reading to compare): the busiest rank of the busiest channel moves
    only its chunks' real bytes, whatever the rank before it does, before 2.20."""
    if n_bytes <= 0 or channels <= 0 or _exact_split(release):
        return ring_kernel_bytes(n_bytes, ranks, protocol, channels, release)
    loop, full_loops, patterns = _last_loop(n_bytes, ranks, protocol, channels)
    busiest = max((sum(sizes[c] for c in ring_steps(ranks, r))
                   for sizes in patterns for r in range(ranks)), default=0.0)
    return _as_even_spread(full_loops * loop + busiest, ranks, channels)


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
