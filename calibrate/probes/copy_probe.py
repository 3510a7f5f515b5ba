"""The host's copies of a flat vector: into memory the process has, and into memory mapped afresh.

    python -m calibrate.copy_probe --out copies.csv            # ~2 s, one thread

Every scheme built on one flat vector copies it on the host each time it talks: the
gradients into one new tensor (``real.training.step.flat_grads``: ``torch.cat``), the
mean back into ``.grad`` (``load_flat_grads``: ``copy_``), the weights in and out
(``flat_params`` / ``load_flat_params``), gather_scatter's root its ``torch.stack`` and
``sum`` of the parts, async_avg's holder its mix. A phantom run sleeps the compute and
keeps these copies, and on VGG-11's 37 MB they are milliseconds: the schemes' steps on the
emulated cluster took 20-40% longer than their messages (``benchmarks.large_messages``).

Why a new tensor costs more than its copy: torch's CPU allocator takes its memory from
glibc's ``malloc`` (``c10::alloc_cpu``: ``posix_memalign``), which maps every request
above the mmap threshold with ``mmap`` and gives it back with ``munmap`` when freed; the
threshold follows the largest chunk freed up to ``DEFAULT_MMAP_THRESHOLD_MAX``, 32 MiB on
64-bit hosts (``malloc/malloc.c``: ``4 * 1024 * 1024 * sizeof(long)``). So a tensor above
32 MiB is fresh memory every time, and the kernel faults each of its pages in (and
zeroes it) on the copy's first touch; a smaller one is carved from the heap the process
already has after its first round. The probe times both on one thread:

* ``fresh``: ``torch.cat`` of ``--tensors`` pieces into a new tensor of n bytes;
* ``kept``: the same ``torch.cat`` into a tensor kept from the last round (``out=``);

at each ``--sizes`` (above 32 MiB, so that ``fresh`` is fresh), after a warm-up, and
fits each kind's seconds per byte as the median of ``t / n``: ``copy_s_per_byte``
(kept) and ``fresh_copy_s_per_byte`` (fresh) of ``contracts.profile.Profile``.
``Profile.copy_s`` prices one copy with them. ``with_copy_probe`` gives a profile the probe's numbers (``benchmarks.repredict
--copy-probe``). The numbers are the host's own, whatever the network: the same
parameter prices a copy at every bandwidth.

Imports: torch (``measure`` only), pandas, cli, contracts.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import cli
from contracts.profile import FRESH_MIN_BYTES

PROG = "python -m calibrate.copy_probe"
SIZES = (40_000_000, 80_000_000)
TENSORS = 34                        # VGG-11's parameter tensors


def measure(sizes=SIZES, repeats: int = 7, tensors: int = TENSORS) -> list[dict]:
    """Rows (kind, bytes, rep, time_s): each size's copies, fresh and kept, one thread."""
    import torch
    torch.set_num_threads(1)
    rows = []
    for n in sizes:
        parts = list(torch.ones(int(n) // 4).tensor_split(tensors))
        kept = torch.empty(int(n) // 4)
        for rep in range(repeats + 1):
            t0 = time.perf_counter()
            new = torch.cat(parts)
            t1 = time.perf_counter()
            torch.cat(parts, out=kept)
            t2 = time.perf_counter()
            del new
            if rep:                                 # the first round warms the heap up
                rows += [{"kind": "fresh", "bytes": int(n), "rep": rep - 1, "time_s": t1 - t0},
                         {"kind": "kept", "bytes": int(n), "rep": rep - 1, "time_s": t2 - t1}]
    return rows


def fit(rows) -> dict[str, float]:
    """``copy_s_per_byte`` and ``fresh_copy_s_per_byte``: the median of t / n of each kind
    (the copies' time grows with n through the origin; a size at or below 32 MiB is not
    fresh and is left out of ``fresh``)."""
    def per_byte(kind):
        got = [r["time_s"] / r["bytes"] for r in rows if r["kind"] == kind
               and (kind == "kept" or r["bytes"] > FRESH_MIN_BYTES)]
        if not got:
            raise ValueError(f"the copy probe's rows have no {kind} copy"
                             + (f" above {FRESH_MIN_BYTES} B" if kind == "fresh" else ""))
        return statistics.median(got)
    return {"copy_s_per_byte": per_byte("kept"), "fresh_copy_s_per_byte": per_byte("fresh")}


def with_copy_probe(profile, rows):
    """``profile`` with the probe's copy costs (``fit``)."""
    return replace(profile, **fit(rows))


def read_rows(path) -> list[dict]:
    """A probe's CSV as rows; a clear error for a file that is not one."""
    import pandas as pd
    try:
        df = pd.read_csv(path)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a copy probe's CSV ({e})") from None
    missing = {"kind", "bytes", "time_s"} - set(df.columns)
    if missing:
        raise ValueError(f"{path}: not a copy probe's CSV (no {', '.join(sorted(missing))})")
    return df.to_dict("records")


def build_parser() -> cli.Parser:
    p = cli.Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="CSV of the timed copies")
    p.add_argument("--sizes", default=",".join(str(s) for s in SIZES),
                   help="bytes of the flat vector, comma-separated (above 32 MiB)")
    p.add_argument("--repeats", type=int, default=7)
    return p


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from contracts.files import atomic_write_text
    try:
        sizes = tuple(int(float(s)) for s in str(args.sizes).split(","))
    except ValueError:
        return cli.usage_error(PROG, f"--sizes {args.sizes}: bytes, comma-separated")
    if any(s <= FRESH_MIN_BYTES for s in sizes) or args.repeats < 1:
        return cli.usage_error(PROG, f"--sizes must each be above {FRESH_MIN_BYTES} B and "
                                     "--repeats at least 1")
    rows = measure(sizes, args.repeats)
    atomic_write_text(Path(args.out), pd.DataFrame(rows).to_csv(index=False))
    f = fit(rows)
    print(f"copy into kept memory {f['copy_s_per_byte'] * 1e9:.3f} ns/B, into a new tensor "
          f"{f['fresh_copy_s_per_byte'] * 1e9:.3f} ns/B -> {args.out}")
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
