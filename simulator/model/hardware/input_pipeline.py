"""The input pipeline's floor under a step: a host's CPU prepares every rank's batches with
the ranks' loader workers, on the cores they share.

PyTorch's DataLoader with ``num_workers = w`` runs w worker processes a rank; each makes whole
batches (``_MultiProcessingDataLoaderIter`` hands indices to the workers in turn), so a
rank's next batch is ready no faster than w workers can decode, crop and collate it. The k
ranks of a host run k x w workers over the host's ``cpu_cores``: one core each while they fit,
``cpu_cores / (k w)`` of one after (unpinned, the scheduler shares the cores out). An image
takes longer when many cores decode at once (shared caches and memory, all-core clocks), so
its CPU time is read at the number of processes busy on the host, ``min(cpu_cores, k w)``
(``cpu_cores`` when a rank may use any core, w = 0)::

    t_step >= batch x t_image(busy) / min(w, cpu_cores / k)        (w = 0: cpu_cores / k)

``t_image(n)`` is a measured curve: the time an image with n loader processes decoding at once
(``benchmarks.dle.input_probe``; a workload's ``measured.input_per_sample`` at one process
and ``measured.input_per_sample_at`` at more), linear between the measured counts and held at
the last one beyond it (no rise is made up past what was measured). The pipeline prefetches
beside the device's step, so the longer of the two sets the pace.
Imports: nothing.
"""
from __future__ import annotations


def image_s(one_s: float, busy: tuple[float, ...], at_busy_s: tuple[float, ...],
            processes: float) -> float:
    """Seconds an image with ``processes`` loader processes busy on the host: ``one_s`` at
    one, ``at_busy_s[i]`` at ``busy[i]`` (rising counts), linear between, the last beyond."""
    points = [(1.0, one_s)] + [(float(n), s) for n, s in zip(busy, at_busy_s) if n > 1]
    if processes <= points[0][0]:
        return one_s
    for (n0, s0), (n1, s1) in zip(points, points[1:]):
        if processes <= n1:
            return s0 + (s1 - s0) * (processes - n0) / (n1 - n0)
    return points[-1][1]


def busy_processes(workers: int, ranks: int, cpu_cores: float) -> float:
    """Loader processes decoding at once on a host of ``ranks`` ranks: one a core at most."""
    return cpu_cores if workers <= 0 else min(cpu_cores, ranks * workers)


def input_step_s(batch: int, one_s: float, busy: tuple[float, ...],
                 at_busy_s: tuple[float, ...], workers: int, ranks: int,
                 cpu_cores: float) -> float:
    """The shortest step a rank's input pipeline allows (0 where it is not modelled)."""
    if one_s <= 0 or cpu_cores <= 0:
        return 0.0
    cores = cpu_cores / ranks if workers <= 0 else min(workers, cpu_cores / ranks)
    t = image_s(one_s, busy, at_busy_s, busy_processes(workers, ranks, cpu_cores))
    return batch * t / cores
