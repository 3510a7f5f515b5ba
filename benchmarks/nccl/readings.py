"""Two readings of NCCL's LL and LL128 flags against the published nccl-tests tables.

    python -m benchmarks.nccl.readings

Before 2.20 NCCL's LL and LL128 ring kernels cut a call into chunks of one size and
leave the chunks past its end empty (``libraries.nccl``). How long that takes depends
on what a rank waits for. Read by whole steps, a rank's step waits for the whole
chunk of the rank before it, so every channel runs ``2 (P - 1)`` steps of its largest
chunk (``libraries.nccl.ring_kernel_bytes``, what the model prices). Read by lines, as
the flags are (one a 16-byte LL line, ``readLL`` in ``prims_ll.h``; one a 128-byte LL128
line, ``prims_ll128.h``), a rank passes lines on as they come and an empty chunk costs
nothing, so the busiest rank's real bytes set the time (``ring_rank_bytes``). This
command prices every table both ways (``benchmarks.nccl.curves``, the same model but
for that one rule) and prints the sizes where the two differ and the sizes within 10%.
"""
from __future__ import annotations

import sys
from unittest import mock

import cli
from benchmarks.nccl.curves import compare, size_text, tables
from libraries.nccl import ring_rank_bytes
from simulator.model.comm import choice

PROG = "python -m benchmarks.nccl.readings"


def by_lines(table) -> list[dict]:
    """``curves.compare`` with the per-line reading in place of whole steps."""
    with mock.patch.object(choice, "ring_kernel_bytes", ring_rank_bytes):
        return compare(table)


def report() -> str:
    lines = ["| table | size | protocol | published (us) | whole steps | by lines |",
             "|---|---:|---|---:|---:|---:|"]
    counts = []
    for table in tables():
        steps, per_line = compare(table), by_lines(table)
        for a, b in zip(steps, per_line):
            if abs(a["predicted_us"] - b["predicted_us"]) > 0.05:
                lines.append(f"| {table.name} | {size_text(a['bytes'])} | {a['protocol']} | "
                             f"{a['published_us']:.1f} | {a['error']:+.1%} | {b['error']:+.1%} |")
        within = [sum(abs(r["error"]) <= 0.10 for r in rows) for rows in (steps, per_line)]
        counts.append(f"{table.name}: {within[0]} of {len(steps)} sizes within 10% by whole "
                      f"steps, {within[1]} by lines")
    return "\n".join(lines + [""] + counts)


def build_parser() -> cli.Parser:
    return cli.Parser(prog=PROG, description=__doc__.split("\n\n")[0])


def run(args) -> int:
    print(report())
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
