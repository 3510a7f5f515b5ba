"""NCCL's allreduce against published nccl-tests tables: the model's collective at every size.

    python -m benchmarks.nccl.curves --out docs/nccl

Each table (``simulator/data/nccl_tests/*.toml``) is one published ``all_reduce_perf`` run
on one node of 8 GPUs, with its source, its NCCL release and its command. The model prices
the same call on one host of the table's preset: a ring allreduce over the host's 8
devices with the protocol NCCL's tuner picks (Simple, LL or LL128, each with its call
latency, its latency per ring step and its share of the bus bandwidth, all read from NCCL's
``src/graph/tuning.cc`` into the preset), the time the simulator's own collective costs give
(``model.comm.costs``, ``model.comm.choice``). nccl-tests times back-to-back calls: a call
takes at least the host's time to launch it, so the predicted time is::

    max(launch, call latency + 2 (P - 1) step latency + 2 (P - 1) / P * n / (share * bus bw))

``launch`` is the table's own time at its smallest size that it states to 1% or better (8
bytes in a table of times; with ``-g 8`` one thread launches the kernels of all 8 GPUs in
turn); it is read from the table and not checked. The published time of a size is the lower
of the table's out-of-place and in-place times (the same call twice; other load only adds
time). A table that gives the bus bandwidth instead (``columns = "busbw"``) gives the time
through nccl-tests' own definition, ``busbw = 2 (P - 1) / P * n / time``, and its rounding
(half the last printed digit) is carried as each size's uncertainty. Sizes from 1 KiB to
1 GiB are compared.

Writes ``curves.csv`` (size, published, predicted, protocol, error) and ``curves.png``.
"""
from __future__ import annotations

import sys
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

import cli
from simulator.model.comm.closed_forms import bus_bandwidth
from contracts.cluster import PRESETS_DIR, Cluster, load_preset
from contracts.files import atomic_write_text, save_figure
from contracts.profile import load_default
from simulator.engine.placement import on_hardware
from simulator.model.comm.choice import call_latency_s, resolve_algorithm
from simulator.model.comm.costs import collective_time_s
from simulator.model.fabric import make_routes

PROG = "python -m benchmarks.nccl.curves"

TABLES = PRESETS_DIR.parent / "nccl_tests"
SMALLEST, LARGEST = 1024, 2**30          # the sizes compared
PROTOCOL = {"ring": "Simple", "ring_ll": "LL", "ring_ll128": "LL128"}


@dataclass(frozen=True)
class Table:
    name: str
    title: str
    source: str
    nccl: str
    command: str
    preset: str
    gpus: int
    rows: tuple[tuple[int, float], ...]    # (bytes, published time in seconds)
    rounding: tuple[float, ...] = ()       # each row's relative uncertainty from its printing

    def uncertainty(self, i: int) -> float:
        return self.rounding[i] if self.rounding else 0.0

    @property
    def launch_s(self) -> float:
        """The time of the smallest call stated to 1% or better: what launching one costs
        (not compared)."""
        return next(t for i, (_, t) in enumerate(self.rows) if self.uncertainty(i) <= 0.01)


def busbw_rows(raw_rows, gpus: int) -> tuple[tuple, tuple]:
    """(bytes, seconds) rows and their relative rounding from (bytes, bus bandwidth GB/s)
    rows printed to two decimals: nccl-tests' busbw = 2 (P - 1) / P * n / time."""
    factor = 2 * (gpus - 1) / gpus
    rows = tuple((int(n), factor * n / (bw * 1e9)) for n, bw in raw_rows)
    return rows, tuple(0.005 / bw for _, bw in raw_rows)


def load_table(path: Path) -> Table:
    raw = tomllib.loads(Path(path).read_text())
    gpus = int(raw["gpus"])
    if raw.get("columns", "time") == "busbw":
        rows, rounding = busbw_rows(raw["rows"], gpus)
    else:
        rows, rounding = tuple((int(n), min(a, b) * 1e-6) for n, a, b in raw["rows"]), ()
    return Table(raw["name"], raw["title"], raw["source"], raw["nccl"], raw["command"],
                 raw["preset"], gpus, rows, rounding)


def tables() -> list[Table]:
    return [load_table(p) for p in sorted(TABLES.glob("*.toml"))]


def one_host(preset: str, gpus: int) -> Cluster:
    return replace(load_preset(preset), hosts=1, link=None, placement="packed")


def pricer(cluster: Cluster, gpus: int):
    """A function of (bytes, launch seconds) that gives (protocol, seconds) of one
    allreduce over ``gpus`` devices of one host, as the simulator prices it (analytic
    fidelity), at least the launch."""
    transport = on_hardware(load_default(), cluster).transport("nccl")
    routes = make_routes(tuple(cluster.placement_of(gpus)), cluster, transport)
    ranks = tuple(range(gpus))

    def price(n_bytes: int, launch_s: float = 0.0):
        algorithm = resolve_algorithm("nccl", "ring", ranks, float(n_bytes), routes)
        t = (collective_time_s("allreduce", ranks, float(n_bytes), routes, 0.0, algorithm)
             + call_latency_s(transport, routes, algorithm))
        return PROTOCOL[algorithm], max(launch_s, t)
    return price


def predicted_s(cluster: Cluster, gpus: int, n_bytes: int, launch_s: float = 0.0):
    """(protocol, seconds) of one allreduce of ``n_bytes`` (``pricer``)."""
    return pricer(cluster, gpus)(n_bytes, launch_s)


def compare(table: Table) -> list[dict]:
    """One row per compared size: published and predicted time, bus bandwidth, error."""
    price = pricer(one_host(table.preset, table.gpus), table.gpus)
    out = []
    for i, (n, published_s) in enumerate(table.rows):
        if not SMALLEST <= n <= LARGEST:
            continue
        protocol, t = price(n, table.launch_s)
        out.append({"bytes": n, "published_us": published_s * 1e6, "predicted_us": t * 1e6,
                    "rounding": table.uncertainty(i),
                    "protocol": protocol,
                    "published_busbw": bus_bandwidth(n, published_s, table.gpus) / 1e9,
                    "predicted_busbw": bus_bandwidth(n, t, table.gpus) / 1e9,
                    "error": t / published_s - 1})
    return out


def size_text(n: int) -> str:
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 2**k:
            return f"{n / 2**k:g} {unit}"
    return f"{n} B"


def rounding_text(row: dict) -> str:
    """' (printed to +-x%)' where the table's printing leaves more than 0.5% unknown."""
    return f" (printed to ±{row['rounding']:.1%})" if row["rounding"] > 0.005 else ""


def markdown(table: Table, rows: list[dict]) -> str:
    worst = max(rows, key=lambda r: abs(r["error"]))
    within = sum(abs(r["error"]) <= 0.10 for r in rows)
    lines = [f"{table.title} (preset `{table.preset}`; launch {table.launch_s * 1e6:.1f} us "
             f"from the table's smallest call stated to 1%): {within} of {len(rows)} sizes within 10%, "
             f"worst {worst['error']:+.1%} at {size_text(worst['bytes'])}", "",
             "| size | published (us) | predicted (us) | protocol | bus bw published (GB/s) "
             "| predicted (GB/s) | error |", "|---:|---:|---:|---|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {size_text(r['bytes'])} | {r['published_us']:.1f} | "
                     f"{r['predicted_us']:.1f} | {r['protocol']} | {r['published_busbw']:.2f} "
                     f"| {r['predicted_busbw']:.2f} | {r['error']:+.1%}{rounding_text(r)} |")
    return "\n".join(lines)


def figure(results: list[tuple[Table, list[dict]]], path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    fig = Figure(figsize=(7, 4.2))
    ax = fig.add_subplot()
    for (table, rows), color in zip(results, ("C0", "C1", "C2", "C3")):
        x = [r["bytes"] for r in rows]
        ax.plot(x, [r["published_busbw"] for r in rows], "o", color=color, mfc="none",
                label=f"{table.name} published")
        ax.plot(x, [r["predicted_busbw"] for r in rows], "-", color=color,
                label=f"{table.name} predicted")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("allreduce size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title("nccl-tests all_reduce_perf, 8 GPUs: published vs predicted "
                 "(python -m benchmarks.nccl.curves)", fontsize=8)
    return save_figure(fig, path)


def build_parser() -> cli.Parser:
    ap = cli.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="docs/nccl", help="folder for curves.csv and curves.png")
    return ap


def run(args) -> int:
    results = [(t, compare(t)) for t in tables()]
    csv = ["table,bytes,published_us,predicted_us,protocol,error"]
    for table, rows in results:
        csv += [f"{table.name},{r['bytes']},{r['published_us']:.2f},{r['predicted_us']:.2f},"
                f"{r['protocol']},{r['error']:.4f}" for r in rows]
        print(markdown(table, rows), end="\n\n")
    out = Path(args.out)
    atomic_write_text(out / "curves.csv", "\n".join(csv) + "\n")
    figure(results, out / "curves.png")
    print(f"wrote {out / 'curves.csv'}, {out / 'curves.png'}", file=sys.stderr)
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
