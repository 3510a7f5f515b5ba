"""async_avg's first exchange, measured against the model: the workers MPI_Init left
unconnected to rank 0 against the others.

    python -m benchmarks.first_exchange docs/results/phantom-{3,5,8,11,12} \
        [--copy-probe docs/results/large-messages/copies.csv] [--out first.csv]

async_avg's world is its P ranks and MPI_Init connects rank 0 only to the ranks +-2^k away
(``simulator.model.comm.mpich.init_peers``), so from P = 6 some workers' first push opens its
connection, which rank 0 answers only inside its progress (``Holder.connect``). For every
async_avg record of the folders at P = 6 or more (the records ``simulator.compare`` keeps),
this prints the first exchange's communication row (``iterations.csv``, the K-th step) of the
unconnected workers, mean, less the connected workers', and the same from the model's trace of
the record's point, predicted as ``benchmarks.repredict`` predicts it (the folder's profile,
link and held-in loop; ``--copy-probe`` for the host's copies).

Imports: pandas, contracts, pipelines.validate_phantom, simulator.
"""
from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd

import cli

PROG = "python -m benchmarks.first_exchange"


def split_ms(first: dict[int, float], workers: int) -> float:
    """The unconnected workers' mean first exchange less the connected workers' (ms), from
    ``first``: rank -> that rank's first exchange (s)."""
    from simulator.model.comm.mpich import init_peers
    peers = init_peers(0, workers)
    out = [first[w] for w in range(1, workers) if w not in peers]
    into = [first[w] for w in range(1, workers) if w in peers]
    return (statistics.fmean(out) - statistics.fmean(into)) * 1e3


def measured_first(rec: dict, every: int) -> dict[int, float]:
    """Each rank's communication row of its K-th step (its first exchange), s."""
    from simulator.compare import iterations_of
    it = iterations_of(rec)
    rows = it[it["iteration"] == every - 1]
    return dict(zip(rows["rank"].astype(int), rows["comm_s"].astype(float)))


def modelled_first(rec: dict, prof, link, workloads: Path) -> dict[int, float]:
    """Each worker's first exchange in the model's trace of the record's point, s."""
    from simulator import compare as C
    from simulator.engine import simulate
    from simulator.engine.machine import machine
    scheme, workers, workload = C.scheme_of(rec), C.workers_of(rec), C.workload_of(rec)
    files = C.workload_files([workloads])
    files.update(C.phantom_workloads({(scheme, workers, workload, 0, 0): [rec]}, [workloads]))
    on = C.cluster_of(rec, link)
    mach = machine(C.polled_profile(prof, rec), "", on,
                   C.model_workloads(prof, files, [workload.model]))
    trace = simulate(scheme, workers, workload, on, mach.profile, 0, trace=True).trace
    first: dict[int, float] = {}
    for e in sorted((e for e in trace["traceEvents"] if e.get("name") == "exchange"),
                    key=lambda e: e["ts"]):
        first.setdefault(e["tid"], e["dur"] / 1e6)
    return first


def folder_rows(folder: Path, copy_rows: list) -> list[dict]:
    """A row per async_avg record of one shipped phantom folder at P >= 6."""
    from benchmarks.repredict import calibrate_workers_of
    from calibrate.probes.copy_probe import with_copy_probe
    from contracts import profile as profiles
    from contracts import record_archive
    from contracts.cluster import load_link_calibration
    from pipelines.held_in import held_in_loop_s
    from simulator.compare import usable_records
    from simulator.model.schemes import SCHEMES
    shipped = pd.read_csv(folder / "compare.csv")
    link = load_link_calibration(folder / "link.toml")
    prof = profiles.load(folder / "profile.json")
    if copy_rows and not prof.copy_s_per_byte:
        prof = with_copy_probe(prof, copy_rows)
    rows = []
    with record_archive.unpacked(folder) as runs:
        if not prof.loop_s_per_step:
            prof = replace(prof, loop_s_per_step=held_in_loop_s(
                runs, link, calibrate_workers_of(shipped)))
        groups, _ = usable_records(runs, link, keep=("phantom",))
        for (scheme, workers, _w, bw, _h), recs in sorted(groups.items(), key=str):
            if scheme.name != "async_avg" or workers < 6:
                continue
            every = SCHEMES[scheme.name].averaging_every(scheme.avg_every)
            model = split_ms(modelled_first(recs[0], prof, link, folder / "workloads"), workers)
            for rec in recs:
                rows.append({"folder": folder.name, "workers": workers,
                             "mbit_s": round(bw / 1e6), "run": rec["run_id"],
                             "measured_ms": round(split_ms(measured_first(rec, every),
                                                           workers), 1),
                             "model_ms": round(model, 1)})
    return rows


def build_parser() -> cli.Parser:
    ap = cli.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=cli.input_folder,
                    help="shipped phantom validations (docs/results/phantom-N)")
    ap.add_argument("--copy-probe", type=cli.input_file, metavar="CSV",
                    help="a copy probe's rows, as for benchmarks.repredict (default: none)")
    ap.add_argument("--out", type=cli.output_file(".csv"), help="CSV to write (default: none)")
    return ap


def run(a) -> int:
    from calibrate.probes.copy_probe import read_rows
    from contracts.files import atomic_write_text
    copy_rows = list(read_rows(Path(a.copy_probe))) if a.copy_probe else []
    rows = []
    for folder in a.folders:
        if not (Path(folder) / "compare.csv").is_file():
            return cli.usage_error(PROG, f"{folder}: not a shipped phantom validation")
        rows += folder_rows(Path(folder), copy_rows)
    df = pd.DataFrame(rows)
    print("first exchange, unconnected workers less connected ones, ms (measured, model)")
    print(df.to_string(index=False) if not df.empty else "no async_avg record at P >= 6")
    if a.out:
        atomic_write_text(Path(a.out), df.to_csv(index=False))
    return 0


def main(argv=None) -> int:
    return cli.command(PROG, build_parser().parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
