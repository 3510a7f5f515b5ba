"""Three readings of how NCCL's LL and LL128 ring waits, what Simple's slices would need, and the time beyond NCCL's bandwidth, against the published nccl-tests tables.

    python -m benchmarks.nccl.readings

Before 2.20 NCCL's LL and LL128 ring kernels cut a call into chunks of one size and
leave the chunks past its end empty (``libraries.nccl``). How long that takes depends on
what a rank waits for from the rank before it. By rounds, as the source has it, a step's
i-th trip of its threads waits for the same trip of the previous step
(``libraries.nccl.ring_kernel_bytes``, what the model prices). By whole steps, a step
waits for the whole chunk, so every channel runs ``2 (P - 1)`` steps of its largest
chunk (``ring_step_bytes``). By single lines, a rank passes every line on as it comes,
so only the busiest rank's real bytes count (``ring_rank_bytes``). This command prices
every table each way (``benchmarks.nccl.curves``, the same model but for that one rule)
and prints the sizes where they differ and the sizes within 10%.

It then prints what the A100 tables' Simple sizes (16 MiB to 1 GiB, one host of 24
channels, releases before 2.20) would need from the one mechanism found with their
shape: a fixed cost each slice a channel moves (``libraries.nccl.simple_ring_slices``:
a wait on the peer's flag, two barriers and a post behind a system fence) beside the
slice's bytes at one rate a channel, fitted by least squares to the table after NCCL's
own latency (call and ``2 (P - 1)`` steps), each size's relative error weighed alike.
The fit says what the table needs; no source gives either number, and the model does
not apply it.

Last it prints each table's time beyond NCCL's bandwidth from 8 MiB on: the published
time less ``2 (P - 1) / P * n / (share * bus)``, ``bus`` the preset's bus bandwidth from
NCCL's source (``intra.bandwidth``: 235, 240, 360 GB/s) and ``share`` that of the protocol
the model runs there (LL128's 0.92, or its cap's share where lower; 1 for Simple), beside
NCCL's own latency of that protocol (call and ``2 (P - 1)`` steps, ``tuning.cc``). Where
NCCL's cost model holds the two agree; what is left over is what the model lacks there.

And it sets the two A100 tables side by side, without the model (``side_by_side``): Azure's
time over SuperBench's at each size from 1 MiB. Both ran ``all_reduce_perf -g 8`` in one
process; their other settings (SuperBench ``-c 0`` and 20 timed calls, Azure a data check,
40 calls and ``NCCL_ALGO`` forced) do not reach the time nccl-tests prints, which is the
mean over back-to-back calls with the check after the timed loop (``BenchTime``,
``src/common.cu``).
"""
from __future__ import annotations

import sys
from unittest import mock

import cli
from benchmarks.nccl.curves import compare, one_host, size_text, tables
from libraries.nccl import (PER_CHANNEL_SPLIT, release_tuple, ring_kernel_bytes,
                            ring_rank_bytes, ring_step_bytes, simple_ring_slices)
from simulator.model.comm import choice

PROG = "python -m benchmarks.nccl.readings"


READINGS = {"whole steps": ring_step_bytes, "rounds (the model)": ring_kernel_bytes,
            "single lines": ring_rank_bytes}


def priced(table, reading: str) -> list[dict]:
    """``curves.compare`` with one reading of the LL and LL128 rings."""
    with mock.patch.object(choice, "ring_kernel_bytes", READINGS[reading]):
        return compare(table)


def slice_fit(table) -> tuple[float, float, list[tuple[int, float]]] | None:
    """(seconds a slice, bytes a second a channel, [(size, the fit's error)]) of a table's
    Simple sizes from 16 MiB on, where its preset runs NCCL's kernel channels before
    2.20; None elsewhere."""
    hw = one_host(table.preset, table.gpus).hardware
    if hw.kernel_channels <= 0 or release_tuple(hw.release) >= PER_CHANNEL_SPLIT:
        return None
    p, bus = table.gpus, hw.intra.bandwidth_bytes_per_s
    points = []
    for r in compare(table):
        if r["protocol"] != "Simple" or r["bytes"] < 16 * 2**20:
            continue
        latency_s = r["predicted_us"] * 1e-6 - 2 * (p - 1) / p * r["bytes"] / bus
        loops = simple_ring_slices(r["bytes"], p, hw.kernel_channels)
        slices = 2 * (p - 1) * sum(k for k, _ in loops)
        moved = 2 * (p - 1) * sum(k * size for k, size in loops)
        points.append((r["bytes"], slices, moved, r["published_us"] * 1e-6 - latency_s))
    # least squares of the relative error of y = a * slices + moved / rate
    w = [1 / (y * y) for *_, y in points]
    sss = sum(wi * s * s for wi, (_, s, _, _) in zip(w, points))
    smm = sum(wi * m * m for wi, (_, _, m, _) in zip(w, points))
    ssm = sum(wi * s * m for wi, (_, s, m, _) in zip(w, points))
    sy = sum(wi * s * y for wi, (_, s, _, y) in zip(w, points))
    my = sum(wi * m * y for wi, (_, _, m, y) in zip(w, points))
    det = sss * smm - ssm * ssm
    a, inv_rate = (sy * smm - my * ssm) / det, (sss * my - ssm * sy) / det
    errors = [(n, (a * s + m * inv_rate) / y - 1) for n, s, m, y in points]
    return a, 1 / inv_rate, errors


def slice_report() -> list[str]:
    lines = ["", "What the Simple sizes would need: a fixed cost a slice beside the slice's "
             "bytes at one rate a channel (fitted, not applied)", "",
             "| table | a slice (us) | a channel (GB/s) | the fit's error by size |",
             "|---|---:|---:|---|"]
    for table in tables():
        fit = slice_fit(table)
        if fit is not None:
            a, rate, errors = fit
            by_size = ", ".join(f"{size_text(n)} {e:+.1%}" for n, e in errors)
            lines.append(f"| {table.name} | {a * 1e6:.1f} | {rate / 1e9:.2f} | {by_size} |")
    return lines


def time_beyond_bus(table, smallest: int = 8 * 2**20) -> list[tuple[int, float, float]]:
    """(size, published time less its bytes at the share of the preset's bus bandwidth the
    model's protocol moves at, NCCL's latency of that protocol) in seconds, for a table's
    sizes from ``smallest`` on (the even spread, without the kernel's chunks)."""
    hw = one_host(table.preset, table.gpus).hardware
    p, bus = table.gpus, hw.intra.bandwidth_bytes_per_s
    out = []
    for r in compare(table):
        if r["bytes"] < smallest:
            continue
        ll = {"LL": hw.ll, "LL128": hw.ll128}.get(r["protocol"])
        call_s, step_s, share = ((ll.call_latency_s, ll.intra_latency_s, ll.share_at(bus))
                                 if ll is not None
                                 else (hw.call_latency_s, hw.intra.latency_s, 1.0))
        beyond_s = r["published_us"] * 1e-6 - 2 * (p - 1) / p * r["bytes"] / (share * bus)
        out.append((r["bytes"], beyond_s, call_s + 2 * (p - 1) * step_s))
    return out


def beyond_report() -> list[str]:
    lines = ["", "Time beyond NCCL's bandwidth (us): published less 2 (P - 1) / P x n / "
             "(share x bus) of the model's protocol, beside (in brackets) NCCL's latency "
             "of that protocol", "",
             "| table | bus (GB/s) | " + " | ".join(size_text(8 * 2**20 * 2**k) for k in range(8))
             + " |", "|---|---:|" + "---:|" * 8]
    for table in tables():
        bus = one_host(table.preset, table.gpus).hardware.intra.bandwidth_bytes_per_s
        cells = [f"{b * 1e6:.0f} ({lat * 1e6:.0f})" for _, b, lat in time_beyond_bus(table)]
        lines.append(f"| {table.name} | {bus / 1e9:.0f} | " + " | ".join(cells) + " |")
    return lines


def side_by_side(first: str = "a100-8x-azure", second: str = "a100-8x-superbench",
                 smallest: int = 2**20) -> list[tuple[int, float, float]]:
    """(size, first table's time, second's) in seconds at every size both publish from
    ``smallest`` on: two runs of one server compared without any model."""
    by_name = {t.name: dict(t.rows) for t in tables()}
    a, b = by_name[first], by_name[second]
    return [(n, a[n], b[n]) for n in sorted(set(a) & set(b)) if n >= smallest]


def side_by_side_report() -> list[str]:
    rows = side_by_side()
    return ["", "The two A100 tables against each other (no model): Azure's time (NCCL 2.18.5, "
            "in-place) over SuperBench's (2.8-2.9, the faster of its two columns)", "",
            "| " + " | ".join(size_text(n) for n, _, _ in rows) + " |",
            "|" + "---:|" * len(rows),
            "| " + " | ".join(f"{a / b:.2f}" for _, a, b in rows) + " |"]


def report() -> str:
    names = list(READINGS)
    lines = ["| table | size | protocol | published (us) | " + " | ".join(names) + " |",
             "|---|---:|---|---:|" + "---:|" * len(names)]
    counts = []
    for table in tables():
        rows = {name: priced(table, name) for name in names}
        for i, row in enumerate(rows[names[0]]):
            t = [rows[name][i]["predicted_us"] for name in names]
            if max(t) - min(t) > 0.05:
                errors = " | ".join(f"{rows[name][i]['error']:+.1%}" for name in names)
                lines.append(f"| {table.name} | {size_text(row['bytes'])} | {row['protocol']} | "
                             f"{row['published_us']:.1f} | {errors} |")
        within = ", ".join(f"{sum(abs(r['error']) <= 0.10 for r in rows[name])} by {name}"
                           for name in names)
        counts.append(f"{table.name}: sizes within 10% of {len(rows[names[0]])}: {within}")
    return "\n".join(lines + [""] + counts + slice_report() + beyond_report()
                     + side_by_side_report())


def build_parser() -> cli.Parser:
    return cli.Parser(prog=PROG, description=__doc__.split("\n\n")[0])


def run(args) -> int:
    print(report())
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
